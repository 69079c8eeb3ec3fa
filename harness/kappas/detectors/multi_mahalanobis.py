"""``multi_mahalanobis``: the Mahalanobis score summed over intermediate layers, Lee et al., "A Simple Unified
Framework for Detecting Out-of-Distribution Samples and Adversarial Attacks", NeurIPS 2018,
https://arxiv.org/abs/1807.03888.

With ``f_i(x)`` the spatial mean of the output of layer ``i`` (``layers``: module names, or ``auto`` for a timm
model's ``feature_info``), and the class means ``mu_ik`` and shared precision ``P_i`` fitted on the fit split,
``M_i(x) = min_k (f_i(x) - mu_ik)^T P_i (f_i(x) - mu_ik) / 2`` and the kappa is ``-sum_i alpha_i M_i(x)`` (``alpha``:
one weight, or one per layer ``a,b,...``; None: 1 each). A pass over the fit split in the model's process extracts the
layer means, pytorch-ood's MultiMahalanobis fits on them in the harness and scores through the model.
"""

from __future__ import annotations

import numpy as np
import torch
from pytorch_ood import detector as pod

from harness.errors import HarnessError
from harness.kappas.base import LayersKappa
from harness.kappas.layers import arrays, layer_outputs, named_layers, outlier_scores, tensors
from harness.kappas.ood_bridge import register_pytorch_ood


def _floats(value, count: int, name: str, kappa: str) -> list[float] | None:
    """A per-layer parameter (``None``, one number, or ``a,b,...``) as ``count`` floats, or None for the default."""
    if value is None:
        return None
    values = [float(v) for v in str(value).split(",")] if isinstance(value, str) else [float(value)]
    values = values * count if len(values) == 1 else values
    if len(values) != count:
        raise HarnessError(f"kappa '{kappa}': {name} gives {len(values)} values for {count} layers")
    return values


def _to(value, device):
    if isinstance(value, torch.Tensor):
        return value.to(device)
    return [_to(v, device) for v in value] if isinstance(value, list) else value


@register_pytorch_ood(pod.MultiMahalanobis, "multi_mahalanobis", {"layers": "auto", "alpha": None})
class MultiMahalanobis(LayersKappa):
    """pytorch-ood's MultiMahalanobis on the spatially averaged outputs of the named layers."""

    def __init__(self, params: dict):
        super().__init__(params)
        self.detector = None

    def _layers(self, model):
        return [m for _, m in named_layers(model, self.params["layers"], "multi_mahalanobis")]

    def extract(self, model, images) -> dict:
        _, outs = layer_outputs(model, self._layers(model), images)
        return {f"z{i}": z.reshape(len(z), z.shape[1], -1).mean(dim=2).cpu().numpy() for i, z in enumerate(outs)}

    def _detector(self, count: int):
        return pod.MultiMahalanobis(
            [torch.nn.Identity()] * count, _floats(self.params["alpha"], count, "alpha", "multi_mahalanobis")
        )

    def fit_extracted(self, parts: list[dict], labels: np.ndarray) -> None:
        zs = [torch.from_numpy(np.concatenate([p[f"z{i}"] for p in parts])) for i in range(len(parts[0]))]
        self.detector = self._detector(len(zs)).fit_structured(zs, torch.from_numpy(labels.astype(np.int64)))

    def state(self) -> dict:
        return {"mu": arrays(self.detector.mu), "precision": arrays(self.detector.precision)}

    def load(self, state: dict) -> None:
        self.detector = self._detector(len(state["mu"]))
        self.detector.mu, self.detector.precision = tensors(state["mu"]), tensors(state["precision"])

    def score_model(self, model, images, seed):
        _, outs = layer_outputs(model, self._layers(model), images)
        self.detector.mu, self.detector.precision = (
            _to(self.detector.mu, images.device),
            _to(self.detector.precision, images.device),
        )
        return outlier_scores(self.detector.predict_structured(outs, device=images.device))
