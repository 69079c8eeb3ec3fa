"""``mahalanobis_odin``: the Mahalanobis score at an input perturbed against it, Lee et al., "A Simple Unified
Framework for Detecting Out-of-Distribution Samples and Adversarial Attacks", NeurIPS 2018,
https://arxiv.org/abs/1807.03888.

With the class means ``mu_k`` and the shared precision ``P`` fitted on the fit split's kept features (as
``mahalanobis``) and ``f(x)`` the features that feed the model's last layer,
``M(x) = min_k (f(x) - mu_k)^T P (f(x) - mu_k) / 2``; the input is perturbed against it,
``x' = x - eps * sign(grad_x M(x))``, and the kappa is ``-M(x')``. ``eps`` is in the model's normalised input space, as
the harness's ODIN. The fit is pytorch-ood's MahalanobisODIN's, in the harness; it scores through the model, in the
model's process.
"""

from __future__ import annotations

import numpy as np
import torch
from pytorch_ood import detector as pod

from harness.errors import HarnessError
from harness.kappas.base import FittedModelKappa
from harness.kappas.features import HOW_TO_EXPOSE, last_linear
from harness.kappas.layers import arrays, outlier_scores, tensors
from harness.kappas.model import split_output
from harness.kappas.ood_bridge import register_pytorch_ood


def penultimate(model: torch.nn.Module):
    """``x -> the features`` feeding the model's last layer (the model's own, when it returns ``(logits, features)``),
    differentiable: MahalanobisODIN's encoder."""

    def encoder(x: torch.Tensor) -> torch.Tensor:
        inputs = {}
        linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
        hooks = [m.register_forward_pre_hook(lambda module, args: inputs.__setitem__(module, args[0])) for m in linears]
        try:
            logits, features = split_output(model(x))
        finally:
            for hook in hooks:
                hook.remove()
        if features is None:
            layer = last_linear(model, logits.shape[1])
            if layer is None or layer not in inputs:
                raise HarnessError(
                    f"kappa 'mahalanobis_odin' needs features, but the model gives none: {HOW_TO_EXPOSE}"
                )
            features = inputs[layer]
        return features.reshape(len(features), -1).float()

    return encoder


@register_pytorch_ood(pod.MahalanobisODIN, "mahalanobis_odin", {"eps": 0.002})
class MahalanobisOdin(FittedModelKappa):
    """pytorch-ood's MahalanobisODIN: fitted on the kept features, scored on inputs perturbed through the model."""

    def __init__(self, params: dict):
        super().__init__(params)
        self.detector = pod.MahalanobisODIN(None, eps=params["eps"])

    def fit(self, outputs) -> None:
        self.detector.fit_features(
            torch.from_numpy(np.asarray(outputs.features, dtype=np.float32)),
            torch.from_numpy(np.asarray(outputs.labels, dtype=np.int64)),
        )

    def state(self) -> dict:
        return {"mu": arrays(self.detector._base.mu), "precision": arrays(self.detector._base.precision)}

    def load(self, state: dict) -> None:
        self.detector._base.mu, self.detector._base.precision = tensors(state["mu"]), tensors(state["precision"])

    def score_model(self, model, images, seed):
        base = self.detector._base
        base.mu, base.precision, base.encoder = (
            base.mu.to(images.device),
            base.precision.to(images.device),
            penultimate(model),
        )
        try:
            return outlier_scores(self.detector.predict(images))
        finally:
            base.encoder = None
