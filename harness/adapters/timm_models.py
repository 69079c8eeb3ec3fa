"""``timm:<name>``: a timm model with a weights file, preprocessed as timm resolves it."""

from __future__ import annotations

from harness.adapters.common import ZooTarget, did_you_mean
from harness.adapters.weights import load_weights
from harness.errors import HarnessError
from harness.submission import Submission, recorded, timm_transform


def timm_target(target: ZooTarget) -> Submission:
    """A timm model with weights from a file; preprocessing from timm's data config for the model."""
    import timm
    from timm.data import resolve_data_config

    name, num_classes = target.name, target.num_classes
    try:
        model = timm.create_model(name, pretrained=False, **({"num_classes": num_classes} if num_classes else {}))
    except RuntimeError as exc:
        raise HarnessError(f"timm: {exc}{did_you_mean(name, timm.list_models())}") from exc
    sha = load_weights(model, target.weights)
    config = resolve_data_config({}, model=model)
    preprocessing = recorded(config) | {"transform": "timm.create_transform"}
    return Submission(
        name=name,
        model=model.eval(),
        transform=timm_transform(config),
        channels=config["input_size"][0],
        preprocessing=preprocessing,
        source=f"timm:{name}",
        file_sha256=sha,
    )
