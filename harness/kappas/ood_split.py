"""pytorch-ood's detectors that read a model split in two, scored through the model in its process.

``rankfeat`` removes the rank-1 part of the last spatial feature maps and scores the head's logits by energy: it needs
``forward_features(images) -> B x C x H x W`` maps and ``forward_head(maps) -> logits`` (a timm CNN has both; a
submission may define them). ``mcm`` is the max softmax of the cosine similarities of the image embedding and the ID
class names' text embeddings over a temperature: it needs ``encode_image(images)`` and ``text_embeddings`` (one row per
ID class), as an ``open_clip:`` target's zero-shot classifier has them. Any other model is refused in one line.
"""

from __future__ import annotations

import torch
from pytorch_ood import detector as pod

from harness.errors import HarnessError
from harness.kappas.base import ModelKappa
from harness.kappas.model import logits_of
from harness.kappas.ood_layers import _scores, _unwrapped

SPLIT_HOW = (
    "a timm: CNN target, or a model with forward_features(images) -> feature maps B x C x H x W and "
    "forward_head(maps) -> logits"
)
CLIP_HOW = "an open_clip: target, or a model with encode_image(images) and text_embeddings (one row per ID class)"


class RankFeat(ModelKappa):
    """pytorch-ood's RankFeat on ``forward_features`` (the backbone) and ``forward_head`` (the head)."""

    def score_model(self, model, images, seed: int):
        model = _unwrapped(model)
        if not (callable(getattr(model, "forward_features", None)) and callable(getattr(model, "forward_head", None))):
            raise HarnessError(f"kappa 'rankfeat' needs the model split into a backbone and a head: {SPLIT_HOW}")

        def backbone(x: torch.Tensor) -> torch.Tensor:
            maps = model.forward_features(x)
            channels = getattr(model, "num_features", None)
            if not isinstance(maps, torch.Tensor) or maps.ndim != 4 or channels not in (None, maps.shape[1]):
                shape = tuple(maps.shape) if isinstance(maps, torch.Tensor) else type(maps).__name__
                raise HarnessError(
                    f"kappa 'rankfeat' needs spatial feature maps B x C x H x W from forward_features, "
                    f"this model's are {shape}: {SPLIT_HOW}"
                )
            return maps.float()  # the SVD runs in float32, under autocast too

        return _scores(pod.RankFeat(backbone, lambda maps: logits_of(model.forward_head(maps))).predict(images))


class Mcm(ModelKappa):
    """pytorch-ood's MCM on the model's image encoder and the text embeddings of the ID class names."""

    def score_model(self, model, images, seed: int):
        model = _unwrapped(model)
        text = getattr(model, "text_embeddings", None)
        if not callable(getattr(model, "encode_image", None)) or not isinstance(text, torch.Tensor) or text.ndim != 2:
            raise HarnessError(f"kappa 'mcm' needs CLIP image and class-name text embeddings: {CLIP_HOW}")
        detector = pod.MCM(model.encode_image, text, temperature=self.params["temperature"])
        return _scores(detector.predict(images))
