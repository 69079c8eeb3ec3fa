"""``gram``: deviations of intermediate layers' Gram matrices from their ID bounds, Sastry & Oore, "Detecting
Out-of-Distribution Examples with Gram Matrices", ICML 2020, https://arxiv.org/abs/1912.12510.

For the output ``F_l`` of layer ``l`` (``layers``: module names, or ``auto`` for a timm model's ``feature_info``) and
each pole ``p`` (``num_poles_list``: ``a,b,...``; None: ``1..L`` for ``L`` layers), the row sums of
``G_l^p = (F_l^p F_l^p^T)^(1/p)``; the fit keeps each entry's minimum and maximum over the fit split's images of each
class. ``delta_l(x)`` sums how far the entries of ``x`` fall outside the bounds of its predicted class, and the kappa
is ``-sum_l delta_l(x) / E[delta_l]``, the expectation estimated on a held-out tenth of the fit split. A pass
over the fit split in the model's process computes the Gram statistics, pytorch-ood's Gram fits on them in the harness
and scores through the model (the head is the rest of the model: its logits).
"""

from __future__ import annotations

import numpy as np
import torch
from pytorch_ood import detector as pod

from harness.errors import HarnessError
from harness.kappas.base import LayersKappa
from harness.kappas.layers import arrays, layer_outputs, named_layers, outlier_scores, tensors
from harness.kappas.ood_bridge import register_pytorch_ood


class _Statistics:
    """Gram statistics already computed, handed to pytorch-ood's ``Gram.fit`` in place of a batch of inputs."""

    def __init__(self, layers: list[dict[int, torch.Tensor]]):
        self.layers = layers

    def to(self, device):
        return self


class _GramOnStatistics(pod.Gram):
    """pytorch-ood's Gram fit (per-class bounds, held-out deviations) on Gram statistics computed beside the model."""

    def _create_feature_list(self, data: _Statistics):
        return None, data.layers

    @staticmethod
    def _gram_vector(feature: dict[int, torch.Tensor], p: int) -> torch.Tensor:
        return feature[p]


@register_pytorch_ood(pod.Gram, "gram", {"layers": "auto", "num_poles_list": None})
class Gram(LayersKappa):
    """pytorch-ood's Gram on the outputs of the named layers; the head is the rest of the model (its logits)."""

    def __init__(self, params: dict):
        super().__init__(params)
        self.detector = None

    def _layers(self, model):
        return [m for _, m in named_layers(model, self.params["layers"], "gram")]

    def _poles(self, count: int) -> list[int]:
        poles = self.params["num_poles_list"]
        if poles is None:
            return list(range(1, count + 1))
        try:
            return [int(p) for p in str(poles).split(",")]
        except ValueError as exc:
            raise HarnessError(f"kappa 'gram': num_poles_list takes integers a,b,..., got '{poles}'") from exc

    def extract(self, model, images) -> dict:
        logits, outs = layer_outputs(model, self._layers(model), images)
        return {
            "num_classes": np.array(logits.shape[1]),
            **{
                f"g{i}_{p}": pod.Gram._gram_vector(z, p).cpu().numpy()
                for i, z in enumerate(outs)
                for p in self._poles(len(outs))
            },
        }

    def fit_extracted(self, parts: list[dict], labels: np.ndarray) -> None:
        count = len({k.split("_")[0] for k in parts[0] if k.startswith("g")})
        poles = self._poles(count)
        layers = [
            {p: torch.from_numpy(np.concatenate([part[f"g{i}_{p}"] for part in parts])) for p in poles}
            for i in range(count)
        ]
        num_classes = int(parts[0]["num_classes"])
        self.detector = _GramOnStatistics(None, [None] * count, num_classes, poles)
        self.detector._device = torch.device("cpu")  # where the statistics are (pytorch-ood warns when it must guess)
        self.detector.fit([(_Statistics(layers), torch.from_numpy(labels.astype(np.int64)))])
        self.load(self.state())  # pytorch-ood's own Gram scores here too (the fitting subclass reads statistics)

    def state(self) -> dict:
        d = self.detector
        return {
            "num_classes": d.num_classes,
            "poles": list(d.num_poles_list),
            "min": arrays(d.feature_min),
            "max": arrays(d.feature_max),
            "norm": arrays(d.layer_norm),
        }

    def load(self, state: dict) -> None:
        self.detector = pod.Gram(None, [None] * len(state["min"]), state["num_classes"], state["poles"])
        self.detector.feature_min, self.detector.feature_max = tensors(state["min"]), tensors(state["max"])
        self.detector.layer_norm = tensors(state["norm"])

    def score_model(self, model, images, seed):
        logits, outs = layer_outputs(model, self._layers(model), images)
        return outlier_scores(self.detector.predict_structured(logits, outs))
