"""``nacue``: neuron activation coverage, Liu et al., "Neuron Activation Coverage: Rethinking Out-of-distribution
Detection and Generalization", ICLR 2024, https://arxiv.org/abs/2306.02879.

For each neuron ``z`` of the named layers (``layers``: module names, or ``auto`` for a timm model's ``feature_info``),
``sigmoid(alpha * z * dKL/dz)``, with KL the divergence of the softmax from the uniform distribution, falls in one of
``m_bins`` geometric bins; the fit counts each bin's hits on the fit split. A sample's coverage of a neuron is
``min(count of its bin / o_star, 1)``, and the kappa is that coverage averaged over each layer's neurons, summed over
layers. A pass over the fit split in the model's process counts the bins with pytorch-ood's NACUE batch by batch
(counts add up), the harness sums them, and NACUE scores through the model.
"""

from __future__ import annotations

import numpy as np
import torch
from pytorch_ood import detector as pod
from pytorch_ood.detector.nac import _LayerStats

from harness.kappas.base import LayersKappa
from harness.kappas.layers import named_layers, outlier_scores
from harness.kappas.model import LogitsOnly
from harness.kappas.ood_bridge import register_pytorch_ood


@register_pytorch_ood(pod.NACUE, "nacue", {"layers": "auto", "m_bins": 50, "alpha": 100.0, "o_star": 50})
class Nacue(LayersKappa):
    """pytorch-ood's NACUE on the named layers: bin counts from its own ``fit`` per batch (counts add up), summed."""

    def __init__(self, params: dict):
        super().__init__(params)
        self.counts = None

    def _detector(self, model) -> pod.NACUE:
        layers = [m for _, m in named_layers(model, self.params["layers"], "nacue")]
        return pod.NACUE(
            LogitsOnly(model),
            layers,
            m_bins=self.params["m_bins"],
            alpha=self.params["alpha"],
            o_star=self.params["o_star"],
        )

    def extract(self, model, images) -> dict:
        detector = self._detector(model).fit([images])
        return {f"counts{i}": s.counts.numpy() for i, s in enumerate(detector._stats)}

    def fit_extracted(self, parts: list[dict], labels: np.ndarray) -> None:
        self.counts = [sum(part[f"counts{i}"] for part in parts) for i in range(len(parts[0]))]

    def state(self) -> dict:
        return {"counts": self.counts}

    def load(self, state: dict) -> None:
        self.counts = state["counts"]

    def score_model(self, model, images, seed):
        detector = self._detector(model)
        detector._stats = [
            _LayerStats(m=m, o_star=o, counts=torch.from_numpy(c))
            for m, o, c in zip(detector.m_bins, detector.o_star, self.counts)
        ]
        detector._fitted = True
        return outlier_scores(detector.predict(images))
