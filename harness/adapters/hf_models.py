"""``hf:<folder>``: a Hugging Face ``transformers`` image classifier saved with ``save_pretrained``; or
``hf:<owner>/<repo>`` (no such folder): one in a Hub model repo, fetched through huggingface_hub's cache at a pinned
commit."""

from __future__ import annotations

from pathlib import Path

import torch
from PIL import Image

from harness.adapters.common import ZooTarget, import_optional, list_if_tuple
from harness.adapters.hub_weights import HubWeights, pin
from harness.adapters.weights import check_config_classes
from harness.errors import HarnessError
from harness.submission import Submission

HF_WEIGHTS = ["model.safetensors", "pytorch_model.bin"]  # transformers' order for an unsharded checkpoint


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


def hf_source(target: ZooTarget) -> tuple[str | Path, dict, HubWeights | None]:
    """Where the classifier loads from: a folder, or a Hub repo pinned to the commit ``target.revision`` names (with
    the weights file read there); and ``from_pretrained``'s options. A ``config.json`` whose labels number other than
    ``target.num_classes`` is refused before any weights are read or fetched."""
    if not is_hub_repo(target.name):
        path = Path(target.name)
        if target.revision is not None:
            raise HarnessError(f"hf: {path} is a folder: --revision applies to a Hub repo (hf:<owner>/<repo>)")
        if not (path / "config.json").is_file():
            raise HarnessError(f"hf: {path} is not a folder saved with save_pretrained (no config.json)")
        check_config_classes(path / "config.json", "id2label", target.num_classes)
        return path, {"local_files_only": True}, None
    config = pin("hf", target.name, ["config.json"], target.revision)
    check_config_classes(config.path, "id2label", target.num_classes)  # before the weights are fetched
    hub = pin("hf", target.name, HF_WEIGHTS, config.revision)
    return target.name, {"revision": config.revision}, hub


def hf_target(target: ZooTarget) -> Submission:
    """A transformers image classifier from a local folder or a Hub repo, with its AutoImageProcessor
    preprocessing."""
    transformers = import_optional("transformers", "transformers")
    path, options, hub = hf_source(target)
    try:
        model = transformers.AutoModelForImageClassification.from_pretrained(path, **options)
        processor = transformers.AutoImageProcessor.from_pretrained(path, **options)
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
