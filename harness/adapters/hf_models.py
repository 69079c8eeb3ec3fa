"""``hf:<folder>``: a Hugging Face ``transformers`` image classifier saved with ``save_pretrained``."""

from __future__ import annotations

from pathlib import Path

import torch
from PIL import Image

from harness.adapters.common import ZooTarget, import_optional, list_if_tuple
from harness.errors import HarnessError
from harness.submission import Submission


class LogitsOf(torch.nn.Module):
    """A Hugging Face image classifier as a module that returns its logits."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.model(pixel_values=images).logits


def hf_target(target: ZooTarget) -> Submission:
    """A transformers image classifier from a local folder, with its AutoImageProcessor preprocessing."""
    transformers = import_optional("transformers", "transformers")
    path = Path(target.name)
    if not (path / "config.json").is_file():
        raise HarnessError(f"hf: {path} is not a folder saved with save_pretrained (no config.json)")
    try:
        model = transformers.AutoModelForImageClassification.from_pretrained(path, local_files_only=True)
        processor = transformers.AutoImageProcessor.from_pretrained(path, local_files_only=True)
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

    return Submission(
        name=f"hf-{path.resolve().name}",
        model=LogitsOf(model).eval(),
        transform=transform,
        channels=3,
        preprocessing=preprocessing,
        source=f"hf:{path.resolve().name}",
        file_sha256=None,
    )
