"""``rankfeat``: the energy of the logits once the last feature maps lose their rank-1 part, Song, Sebe & Wang,
"RankFeat: Rank-1 Feature Removal for Out-of-distribution Detection", NeurIPS 2022, https://arxiv.org/abs/2209.08590.

Each image's maps ``X`` (``C x HW``, from ``forward_features(images) -> B x C x H x W``) become
``X' = X - s_1 u_1 v_1^T``, with ``s_1, u_1, v_1`` the largest singular value and its singular vectors, and the kappa
is ``logsumexp(forward_head(X'))``: pytorch-ood's RankFeat, through the model, which must have both methods (a timm CNN
has them; a submission may define them). Any other model is refused in one line.
"""

from __future__ import annotations

import torch
from pytorch_ood import detector as pod

from harness.errors import HarnessError
from harness.kappas.base import ModelKappa
from harness.kappas.layers import outlier_scores, unwrapped
from harness.kappas.model import logits_of
from harness.kappas.ood_bridge import register_pytorch_ood

SPLIT_HOW = (
    "a timm: CNN target, or a model with forward_features(images) -> feature maps B x C x H x W and "
    "forward_head(maps) -> logits"
)


@register_pytorch_ood(pod.RankFeat, "rankfeat", {})
class RankFeat(ModelKappa):
    """pytorch-ood's RankFeat on ``forward_features`` (the backbone) and ``forward_head`` (the head)."""

    def score_model(self, model, images, seed):
        model = unwrapped(model)
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

        return outlier_scores(pod.RankFeat(backbone, lambda maps: logits_of(model.forward_head(maps))).predict(images))
