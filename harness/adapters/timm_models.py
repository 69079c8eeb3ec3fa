"""``timm:<name>``: a timm model with a weights file, or without one its pretrained weights from the Hugging Face Hub;
preprocessed as timm resolves it."""

from __future__ import annotations

import torch

from harness.adapters.common import ZooTarget, did_you_mean
from harness.adapters.configs import check_model_size, read_config
from harness.adapters.hub_weights import HubWeights, pin, weight_files
from harness.adapters.weights import (
    ClassCountMismatch,
    check_config_classes,
    check_file_classes,
    load_weights,
    pickles_refused,
)
from harness.errors import HarnessError, message_line
from harness.submission import Submission, recorded, timm_transform

HF_HUB = "hf-hub:"


def timm_target(target: ZooTarget) -> Submission:
    """A timm model with weights from a file, or (no file) timm's pretrained weights from the Hub pinned to the commit
    ``target.revision`` names; preprocessing from timm's data config for the model."""
    import timm
    from timm.data import resolve_data_config

    name, num_classes = target.name, target.num_classes
    if target.weights is None:
        model, hub = pretrained(name, target.revision, num_classes)
        sha = hub.sha256()
    else:
        check_file_classes(target.weights, classifier_of(name), num_classes)
        built = name
        if name.startswith(HF_HUB):  # the repo's config.json checked, and the model built from that commit's
            repo, commit = hub_config(name, None, None)
            built = f"{HF_HUB}{repo}@{commit}"
        try:
            model = timm.create_model(built, pretrained=False, **({"num_classes": num_classes} if num_classes else {}))
        except RuntimeError as exc:
            raise HarnessError(f"timm: {exc}{did_you_mean(name, timm.list_models())}") from exc
        sha, hub = load_weights(model, target.weights), None
    config = resolve_data_config({}, model=model)
    preprocessing = recorded(config) | {"transform": "timm.create_transform"}
    return Submission(
        name=name.removeprefix(HF_HUB).split("@")[0].rsplit("/", 1)[-1],
        model=model.eval(),
        transform=timm_transform(config),
        channels=config["input_size"][0],
        preprocessing=preprocessing,
        source=f"timm:{name}",
        file_sha256=sha,
        hub_weights=None if hub is None else hub.record(),
    )


def classifier_of(name: str) -> str:
    """The classifier layer timm's pretrained config names for ``name`` (``fc``, ``head.fc``; the first of several
    heads), or ``""`` where it names none (an ``hf-hub:`` repo, a name timm does not know)."""
    from timm.models import get_pretrained_cfg

    if name.startswith(HF_HUB):
        return ""
    try:
        cfg = get_pretrained_cfg(name)
    except RuntimeError:  # an unknown tag: create_model says so
        return ""
    layer = cfg.classifier if cfg is not None else None
    return (layer[0] if isinstance(layer, (tuple, list)) else layer) or ""


def one_revision(name: str, named: str, revision: str | None) -> str | None:
    """The revision to fetch ``name`` at: ``revision`` (``--revision``) or the one its repo id names, refused when they
    differ; None (main) when neither is given."""
    if named and revision and named != revision:
        raise HarnessError(f"timm: {name} names revision '{named}', --revision '{revision}': give one")
    return revision or named or None


def hub_config(name: str, revision: str | None, num_classes: int | None) -> tuple[str, str]:
    """The repo of ``hf-hub:owner/repo[@revision]`` and the commit its revision (or ``revision``) names, once its
    ``config.json`` (timm's, beside the weights) is checked before any weights are fetched or model is built: read
    within the cap on a configuration, its classes against ``num_classes``, and the model it describes on the meta
    device (:mod:`harness.adapters.configs`)."""
    import timm

    repo, _, named = name.removeprefix(HF_HUB).partition("@")
    pinned = pin("timm", repo, ["config.json"], one_revision(name, named, revision), configuration=True)
    where = f"timm: {repo}"
    check_config_classes(read_config(pinned.path, where), "num_classes", num_classes)
    check_model_size(where, lambda: timm.create_model(f"{HF_HUB}{repo}@{pinned.revision}", pretrained=False))
    return repo, pinned.revision


def hub_source(name: str, revision: str | None, num_classes: int | None) -> tuple[str, list[str], str | None]:
    """Where timm fetches the pretrained weights of the registered ``name`` (``arch[.tag]``): the Hub repo, the files
    that pin its commit, the revision. A registered config whose classifier has another number of classes than
    ``num_classes`` is refused here, before anything is downloaded."""
    import timm
    from timm.models import get_pretrained_cfg

    try:
        cfg = get_pretrained_cfg(name)
    except RuntimeError as exc:  # an unknown tag
        raise HarnessError(f"timm: {str(exc).rstrip('.')}{did_you_mean(name, timm.list_pretrained())}") from exc
    if cfg is None or not cfg.hf_hub_id:
        raise HarnessError(
            f"timm: {name} has no pretrained weights on the Hugging Face Hub"
            f"{did_you_mean(name, timm.list_pretrained())}; give a weights file (--weights)"
        )
    if num_classes and cfg.num_classes and cfg.num_classes != num_classes:
        raise ClassCountMismatch(cfg.num_classes, num_classes)
    repo, _, named = cfg.hf_hub_id.partition("@")
    return repo, weight_files(cfg.hf_hub_filename), one_revision(name, named, revision)


def pretrained(name: str, revision: str | None, num_classes: int | None) -> tuple[torch.nn.Module, HubWeights]:
    """``timm.create_model(name, pretrained=True)`` with its Hub repo pinned to the commit ``revision`` names, and the
    weights file timm read there (:class:`HubWeights`); a classifier of another width than ``num_classes`` is a
    :class:`ClassCountMismatch`."""
    import timm

    if name.startswith(HF_HUB):
        repo, commit = hub_config(name, revision, num_classes)
    else:
        repo, files, revision = hub_source(name, revision, num_classes)
        commit = pin("timm", repo, files, revision).revision
    try:
        with pickles_refused(f"timm: the weights of {repo}@{commit[:12]}"):
            if name.startswith(HF_HUB):
                model = timm.create_model(f"{HF_HUB}{repo}@{commit}", pretrained=True)
            else:
                custom_load = timm.models.get_pretrained_cfg(name).custom_load  # kept: a new hf_hub_id resets it
                overlay = {"hf_hub_id": f"{repo}@{commit}", "custom_load": custom_load}
                model = timm.create_model(name, pretrained=True, pretrained_cfg_overlay=overlay)
    except (RuntimeError, OSError, KeyError, ValueError) as exc:
        raise HarnessError(f"timm: cannot build {name} from {repo}@{commit[:12]}: {message_line(exc)}") from exc
    hub = pin("timm", repo, weight_files(model.pretrained_cfg.get("hf_hub_filename")), commit)
    if num_classes and model.num_classes != num_classes:
        raise ClassCountMismatch(model.num_classes, num_classes)
    return model, hub
