"""``mcm``: maximum concept matching, Ming et al., "Delving into Out-of-Distribution Detection with Vision-Language
Representations", NeurIPS 2022, https://arxiv.org/abs/2211.13445.

With ``z(x)`` the L2-normalised CLIP image embedding and ``T`` the L2-normalised text embeddings of the ID class names
(one row per class), the kappa is ``max_k softmax(z(x) . T^T / temperature)_k`` (the paper's temperature: 1):
pytorch-ood's MCM on the model's ``encode_image(images)`` and ``text_embeddings``, which an ``open_clip:`` target's
zero-shot classifier has. Any other model is refused in one line.
"""

from __future__ import annotations

import torch
from pytorch_ood import detector as pod

from harness.errors import HarnessError
from harness.kappas.base import ModelKappa
from harness.kappas.layers import outlier_scores, unwrapped
from harness.kappas.ood_bridge import register_pytorch_ood

CLIP_HOW = "an open_clip: target, or a model with encode_image(images) and text_embeddings (one row per ID class)"


@register_pytorch_ood(pod.MCM, "mcm", {"temperature": 1.0})
class Mcm(ModelKappa):
    """pytorch-ood's MCM on the model's image encoder and the text embeddings of the ID class names."""

    def score_model(self, model, images, seed):
        model = unwrapped(model)
        text = getattr(model, "text_embeddings", None)
        if not callable(getattr(model, "encode_image", None)) or not isinstance(text, torch.Tensor) or text.ndim != 2:
            raise HarnessError(f"kappa 'mcm' needs CLIP image and class-name text embeddings: {CLIP_HOW}")
        detector = pod.MCM(model.encode_image, text, temperature=self.params["temperature"])
        return outlier_scores(detector.predict(images))
