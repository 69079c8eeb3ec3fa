"""``torchvision:<name>``: a torchvision model with a weights file and its weights entry's transform."""

from __future__ import annotations

from pathlib import Path

from harness.adapters.common import ZooTarget, did_you_mean
from harness.adapters.weights import load_weights
from harness.errors import HarnessError
from harness.submission import Submission


def torchvision_weights_entry(name: str, sha: str):
    """The torchvision weights entry for ``name`` whose file hash prefix ``sha`` matches, else the DEFAULT entry."""
    from torchvision.models import get_model_weights

    entries = get_model_weights(name)
    for entry in entries:
        if sha.startswith(Path(entry.url).stem.rsplit("-", 1)[-1]):
            return entry, "matched by file hash"
    return entries.DEFAULT, "DEFAULT (weights file not recognised)"


def torchvision_target(target: ZooTarget) -> Submission:
    """A torchvision classifier with weights from a file; preprocessing from its weights entry's preset transform."""
    import torchvision

    name, num_classes = target.name, target.num_classes
    known = torchvision.models.list_models(module=torchvision.models)
    if name not in known:
        raise HarnessError(f"torchvision: unknown classification model '{name}'{did_you_mean(name, known)}")
    model = torchvision.models.get_model(name, weights=None, **({"num_classes": num_classes} if num_classes else {}))
    sha = load_weights(model, target.weights)
    entry, how = torchvision_weights_entry(name, sha)
    preset = entry.transforms()
    crop, resize = preset.crop_size[0], preset.resize_size[0]
    preprocessing = {
        "input_size": [3, crop, crop],
        "interpolation": preset.interpolation.value,
        "mean": list(preset.mean),
        "std": list(preset.std),
        "crop_pct": round(crop / resize, 4),
        "resize_size": resize,
        "antialias": preset.antialias,
        "transform": "torchvision ImageClassification preset",
        "weights_entry": f"{type(entry).__name__}.{entry.name}",
        "weights_entry_choice": how,
    }
    return Submission(
        name=f"torchvision-{name}",
        model=model.eval(),
        transform=preset,
        channels=3,
        preprocessing=preprocessing,
        source=f"torchvision:{name}",
        file_sha256=sha,
    )
