"""``hf:<folder>``: a Hugging Face ``transformers`` image classifier saved with ``save_pretrained``; or
``hf:<owner>/<repo>`` (no such folder): one in a Hub model repo, fetched through huggingface_hub's cache at a pinned
commit."""

from __future__ import annotations

from pathlib import Path

import torch
from PIL import Image

from dataset_builder.errors import one_line
from harness.adapters.common import ZooTarget, import_optional, list_if_tuple
from harness.adapters.configs import check_model_size, read_config
from harness.adapters.hub_weights import HubWeights, pin
from harness.adapters.weights import check_config_classes, pickles_refused
from harness.errors import HarnessError, escaped
from harness.submission import Submission

HF_WEIGHTS = ["model.safetensors", "pytorch_model.bin"]  # transformers' order for an unsharded checkpoint
PROCESSOR = "preprocessor_config.json"  # the AutoImageProcessor's settings
NO_REPO_CODE = "refused: the harness runs no code from a model repo"
MAX_INPUT_SIDE = 4096  # pixels of a side the processor may resize or crop to: the largest classifiers take 896


class LogitsOf(torch.nn.Module):
    """A Hugging Face image classifier as a module that returns its logits."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.model(pixel_values=images).logits


def is_hub_repo(name: str) -> bool:
    """Whether ``hf:<name>`` names a Hub model repo: ``owner/repo``, and no such folder here."""
    return name.count("/") == 1 and not name.startswith((".", "/")) and not Path(name).exists()


def checked_config(data: dict, where: str, num_classes: int | None):
    """The transformers configuration that ``data`` (a ``config.json``) describes, refused in one line opened by
    ``where`` unless transformers' own code builds it: no ``auto_map`` (code of the repo's own) and a ``model_type``
    transformers knows; then its labels checked against ``num_classes`` and its model's size on the meta device
    (:func:`harness.adapters.configs.check_model_size`)."""
    transformers = import_optional("transformers", "transformers")
    if "auto_map" in data:
        raise HarnessError(f"{where}: config.json names code of its own (auto_map), {NO_REPO_CODE}")
    model_type = data.get("model_type")
    if not isinstance(model_type, str) or model_type not in transformers.CONFIG_MAPPING:
        named = (
            "names no model_type" if model_type is None else f"names the model_type '{escaped(str(model_type), 80)}'"
        )
        raise HarnessError(
            f"{where}: config.json {named}, which transformers {transformers.__version__} does not know (a model "
            f"with code of its own), {NO_REPO_CODE}"
        )
    check_config_classes(data, "id2label", num_classes)
    try:
        config = transformers.CONFIG_MAPPING[model_type].from_dict(data)
    except Exception as exc:  # a value its configuration class cannot take
        raise HarnessError(f"{where}: config.json is no {model_type} configuration: {one_line(exc)}") from exc
    auto = transformers.AutoModelForImageClassification
    check_model_size(where, lambda: auto.from_config(config, trust_remote_code=False))
    return config


def checked_processor(data: dict, where: str) -> None:
    """Refuse in one line opened by ``where`` a ``preprocessor_config.json`` (``data``, read within the cap on a
    configuration) that names code of its own or asks for a side outside 1 to :data:`MAX_INPUT_SIDE` pixels."""
    if "auto_map" in data:
        raise HarnessError(f"{where}: {PROCESSOR} names code of its own (auto_map), {NO_REPO_CODE}")
    for key in ("size", "crop_size"):
        value = data.get(key)
        sides = value.values() if isinstance(value, dict) else [value]
        large = [side for side in sides if isinstance(side, (int, float)) and not 0 < side <= MAX_INPUT_SIDE]
        if large:
            raise HarnessError(
                f"{where}: {PROCESSOR} asks for a {key} of {escaped(str(large[0]), 40)} pixels, outside "
                f"1 to {MAX_INPUT_SIDE:,}"
            )


def hf_source(target: ZooTarget) -> tuple[str | Path, dict, HubWeights | None]:
    """Where the classifier loads from: a folder, or a Hub repo pinned to the commit ``target.revision`` names (with
    the weights file read there); and ``from_pretrained``'s options, its checked configuration among them
    (:func:`checked_config`, and its processor's, :func:`checked_processor`: refused before any weights are read or
    fetched)."""
    if not is_hub_repo(target.name):
        path = Path(target.name)
        if target.revision is not None:
            raise HarnessError(f"hf: {path} is a folder: --revision applies to a Hub repo (hf:<owner>/<repo>)")
        if not (path / "config.json").is_file():
            raise HarnessError(f"hf: {path} is not a folder saved with save_pretrained (no config.json)")
        where = f"hf: {path}"
        config = checked_config(read_config(path / "config.json", where), where, target.num_classes)
        if (path / PROCESSOR).is_file():  # none: transformers says so when it loads
            checked_processor(read_config(path / PROCESSOR, where), where)
        return path, {"config": config, "local_files_only": True}, None
    where = f"hf: {target.name}"
    pinned = pin("hf", target.name, ["config.json"], target.revision, configuration=True)
    config = checked_config(read_config(pinned.path, where), where, target.num_classes)
    processor = pin("hf", target.name, [PROCESSOR], pinned.revision, configuration=True)
    checked_processor(read_config(processor.path, where), where)
    hub = pin("hf", target.name, HF_WEIGHTS, pinned.revision)
    return target.name, {"config": config, "revision": pinned.revision}, hub


def hf_target(target: ZooTarget) -> Submission:
    """A transformers image classifier from a local folder or a Hub repo, with its AutoImageProcessor
    preprocessing; transformers' own code only (``trust_remote_code=False``)."""
    transformers = import_optional("transformers", "transformers")
    path, options, hub = hf_source(target)
    weights = f"hf: the weights in {path}" if hub is None else f"hf: {hub.file} of {hub.repo}@{hub.revision[:12]}"
    try:
        with pickles_refused(weights):
            model = transformers.AutoModelForImageClassification.from_pretrained(
                path, trust_remote_code=False, **options
            )
        processor = transformers.AutoImageProcessor.from_pretrained(path, trust_remote_code=False, **options)
    except (OSError, ValueError) as exc:
        raise HarnessError(f"hf: cannot load {path}: {str(exc).splitlines()[0]}") from exc
    settings = processor.to_dict()
    preprocessing = {
        k: list_if_tuple(settings[k])
        for k in (
            "size",
            "crop_size",
            "crop_pct",
            "do_resize",
            "do_center_crop",
            "do_rescale",
            "rescale_factor",
            "do_normalize",
        )
        if k in settings
    }
    preprocessing |= {
        "mean": list_if_tuple(settings.get("image_mean")),
        "std": list_if_tuple(settings.get("image_std")),
        "transform": type(processor).__name__,
    }
    if "resample" in settings:
        preprocessing["interpolation"] = Image.Resampling(settings["resample"]).name.lower()

    def transform(image: Image.Image) -> torch.Tensor:
        return processor(images=image.convert("RGB"), return_tensors="pt")["pixel_values"][0]

    short = Path(path).resolve().name if hub is None else str(path).rsplit("/", 1)[-1]
    return Submission(
        name=f"hf-{short}",
        model=LogitsOf(model).eval(),
        transform=transform,
        channels=3,
        preprocessing=preprocessing,
        source=f"hf:{short}" if hub is None else f"hf:{path}",
        file_sha256=None if hub is None else hub.sha256(),
        hub_weights=None if hub is None else hub.record(),
    )
