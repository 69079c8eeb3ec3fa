"""``open_clip:<arch>[/<tag>]``: the paper's zero-shot CLIP classifier (docs/method.md section 5)."""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from harness.adapters.common import ZooTarget, import_optional
from harness.adapters.hub_weights import SAFE_TWINS, HubWeights, pin
from harness.adapters.weights import load_weights, pickles_refused
from harness.errors import HarnessError, message_line
from harness.submission import Submission

CLIP_TEMPLATES = (
    "itap of a {}.",
    "a bad photo of the {}.",
    "a origami {}.",
    "a photo of the large {}.",
    "the {} in a video game.",
    "art of the {}.",
    "a photo of the small {}.",
)


def zero_shot_head(
    encode_text: Callable[[torch.Tensor], torch.Tensor],
    tokenizer: Callable[[list[str]], torch.Tensor],
    classnames: Sequence[str],
    templates: Sequence[str] = CLIP_TEMPLATES,
    batch_size: int = 1000,
) -> torch.Tensor:
    """Class weights ``(num_classes, dim)``: per class, the templates' text embeddings L2-normalised, averaged,
    normalised."""
    texts = [template.format(name) for name in classnames for template in templates]
    with torch.no_grad():
        embeddings = torch.cat(
            [encode_text(tokenizer(texts[i : i + batch_size])).float() for i in range(0, len(texts), batch_size)]
        )
    embeddings = F.normalize(embeddings, dim=-1).reshape(len(classnames), len(templates), -1)
    return F.normalize(embeddings.mean(dim=1), dim=-1)


class ZeroShotClassifier(torch.nn.Module):
    """logits = 100 * L2-normalised image features @ class weights (the paper's CLIP classifier)."""

    def __init__(self, clip: torch.nn.Module, class_weights: torch.Tensor):
        super().__init__()
        self.clip = clip
        self.register_buffer("class_weights", class_weights)

    @property
    def text_embeddings(self) -> torch.Tensor:
        """The ID class names' text embeddings (the class weights), which MCM reads."""
        return self.class_weights

    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        return self.clip.encode_image(images)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        features = F.normalize(self.encode_image(images).float(), dim=-1)
        return 100.0 * features @ self.class_weights.T


def open_clip_options(arch: str, tag: str) -> dict:
    """``create_model_and_transforms`` options for a pretrained tag: activation and preprocessing, as open_clip would
    set them."""
    open_clip = import_optional("open_clip", "open_clip_torch")

    if arch not in open_clip.list_models():
        raise HarnessError(f"open_clip: unknown architecture '{arch}'")
    if not tag:
        return {}
    tags = open_clip.list_pretrained_tags_by_model(arch)
    if tag not in tags:
        raise HarnessError(f"open_clip: unknown tag '{tag}' for {arch}; known: {', '.join(tags)}")
    cfg = open_clip.get_pretrained_cfg(arch, tag)
    return {
        "force_quick_gelu": bool(cfg.get("quick_gelu")),
        "image_mean": cfg.get("mean"),
        "image_std": cfg.get("std"),
        "image_interpolation": cfg.get("interpolation"),
        "image_resize_mode": cfg.get("resize_mode"),
    }


def open_clip_hub(arch: str, tag: str, revision: str | None) -> HubWeights:
    """The Hub weights file open_clip fetches for the pretrained tag ``arch/tag`` (its safetensors twin first), pinned
    to the commit ``revision`` names and fetched into the cache."""
    open_clip = import_optional("open_clip", "open_clip_torch")

    hub_id = open_clip.get_pretrained_cfg(arch, tag).get("hf_hub") if tag else None
    if not hub_id:
        named = f"the tag {arch}/{tag}" if tag else f"{arch} (no /TAG)"
        raise HarnessError(f"open_clip: {named} has no weights on the Hugging Face Hub; give --weights")
    repo, filename = posixpath.split(hub_id)  # open_clip's 'owner/repo/' or 'owner/repo/file'
    name = filename or "open_clip_pytorch_model.bin"
    twin = SAFE_TWINS.get(name) or (name[:-4] + ".safetensors" if name.endswith((".bin", ".pth")) else None)
    return pin("open_clip", repo, [twin, name] if twin else [name], revision)


def open_clip_target(target: ZooTarget) -> Submission:
    """An open_clip model (``ARCH[/TAG]``) as a zero-shot classifier over ``target.classnames`` (None: CLIP's curated
    ImageNet-1K class names); preprocessing from the tag's config (mean, std, interpolation, resize). Without a weights
    file, the tag's pretrained weights from the Hub (:func:`open_clip_hub`), loaded by open_clip."""
    open_clip = import_optional("open_clip", "open_clip_torch")

    spec, classnames = target.name, target.classnames
    arch, _, tag = spec.partition("/")
    options = open_clip_options(arch, tag)
    if target.weights is None:
        hub = open_clip_hub(arch, tag, target.revision)
        try:
            with pickles_refused(f"open_clip: {hub.file} of {hub.repo}@{hub.revision[:12]}"):
                model, _, transform = open_clip.create_model_and_transforms(arch, pretrained=str(hub.path), **options)
        except (RuntimeError, OSError, ValueError) as exc:
            raise HarnessError(f"open_clip: cannot load {hub.file} of {hub.repo}: {message_line(exc)}") from exc
        sha = hub.sha256()
    else:
        try:
            model, _, transform = open_clip.create_model_and_transforms(arch, pretrained=None, **options)
        except (RuntimeError, OSError, ValueError) as exc:  # e.g. a transformers text tower that is not available
            raise HarnessError(f"open_clip: cannot build {arch}: {message_line(exc)}") from exc
        sha, hub = load_weights(model, target.weights), None
    if classnames is None:
        from open_clip.zero_shot_metadata import IMAGENET_CLASSNAMES as classnames

        names_source = "CLIP's curated ImageNet-1K class names"
    else:
        names_source = "given"
    try:
        tokenizer = open_clip.get_tokenizer(arch)
    except OSError as exc:
        raise HarnessError(f"open_clip: the tokenizer of {arch} is not available offline: {message_line(exc)}") from exc
    model.eval()
    head = ZeroShotClassifier(model, zero_shot_head(model.encode_text, tokenizer, classnames))
    cfg = model.visual.preprocess_cfg
    preprocessing = {
        "input_size": [3, *cfg["size"]],
        "interpolation": cfg["interpolation"],
        "mean": list(cfg["mean"]),
        "std": list(cfg["std"]),
        "crop_pct": 1.0,
        "resize_mode": cfg["resize_mode"],
        "transform": "open_clip.image_transform_v2",
        "zero_shot": {"templates": list(CLIP_TEMPLATES), "classnames": names_source, "logit_scale": 100.0},
    }
    name = f"open_clip-{arch}" + (f"-{tag}" if tag else "")
    return Submission(
        name=name,
        model=head.eval(),
        transform=transform,
        channels=3,
        preprocessing=preprocessing,
        source=f"open_clip:{spec}",
        file_sha256=sha,
        hub_weights=None if hub is None else hub.record(),
    )
