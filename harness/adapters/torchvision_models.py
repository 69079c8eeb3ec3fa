"""``torchvision:<name>[@<ENTRY>]``: a torchvision model with a weights file, or without one the pretrained weights of
its weights entry (``ENTRY``, e.g. ``IMAGENET1K_V1``; else ``DEFAULT``) through torch.hub's cache; preprocessed by its
weights entry's transform."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

from dataset_builder.shards import file_sha256
from harness.adapters.common import ZooTarget, did_you_mean
from harness.adapters.weights import ClassCountMismatch, load_weights, read_weights
from harness.errors import HarnessError, message_line
from harness.submission import Submission

STALL_S = 60.0  # a download that hears nothing for this long ends (torch.hub's download takes no timeout of its own)


def torchvision_weights_entry(name: str, sha: str):
    """The torchvision weights entry for ``name`` whose file hash prefix ``sha`` matches, else the DEFAULT entry."""
    from torchvision.models import get_model_weights

    entries = get_model_weights(name)
    for entry in entries:
        if sha.startswith(Path(entry.url).stem.rsplit("-", 1)[-1]):
            return entry, "matched by file hash"
    return entries.DEFAULT, "DEFAULT (weights file not recognised)"


def named_entry(name: str, entry: str):
    """The weights entry ``entry`` (``IMAGENET1K_V1``, or ``DEFAULT``) of the model ``name``; one line naming the
    entries it has otherwise."""
    from torchvision.models import get_model_weights

    entries = get_model_weights(name)
    try:
        return entries[entry]
    except KeyError:
        known = [e.name for e in entries]
        raise HarnessError(
            f"torchvision: {name} has no weights entry '{entry}' (it has {', '.join(known)}, DEFAULT)"
        ) from None


def entry_label(entry) -> str:
    """``ResNet18_Weights.IMAGENET1K_V1``: the entry as the record names it."""
    return f"{type(entry).__name__}.{entry.name}"


def cached_file(entry) -> Path:
    """Where torch.hub keeps the entry's weights: ``$TORCH_HOME/hub/checkpoints/<the url's file name>``."""
    from torch.hub import get_dir

    return Path(get_dir()) / "checkpoints" / Path(urlparse(entry.url).path).name


def fetch(entry) -> Path:
    """The entry's weights file from torch.hub's cache, downloaded there first when missing (its hash checked against
    the prefix its name carries, as ``torch.hub`` checks it); offline (``HF_HUB_OFFLINE``), an unreachable server or a
    file that does not match its name is one line."""
    from urllib.error import HTTPError

    from huggingface_hub import constants
    from torch.hub import HASH_REGEX, download_url_to_file

    path, label = cached_file(entry), entry_label(entry)
    if path.is_file():
        return path
    if constants.HF_HUB_OFFLINE:  # read as huggingface_hub reads it, as the Hub kinds do
        raise HarnessError(
            f"torchvision: {label} is not in the torch.hub cache ({path.parent}) and HF_HUB_OFFLINE is set: fetch it "
            "once online, or give --weights"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    prefix = HASH_REGEX.search(path.name)
    try:  # a temporary file renamed over the path: nothing half-written is left in the cache
        with _stall_timeout(STALL_S):
            download_url_to_file(entry.url, str(path), prefix and prefix.group(1), progress=False)
    except HTTPError as exc:
        raise HarnessError(f"torchvision: {entry.url} answered {exc.code} {exc.reason} for {label}") from exc
    except OSError as exc:  # URLError too; a stall is a TimeoutError, alone, as a URLError's reason or behind another
        raise _unreachable(entry, label, path, _timed_out(exc)) from exc
    except RuntimeError as exc:  # torch.hub's hash check
        raise HarnessError(f"torchvision: the file fetched for {label} does not match its name: {exc}") from exc
    return path


def _timed_out(exc: BaseException | None, depth: int = 0) -> bool:
    """Whether a TimeoutError is ``exc``, its reason (a URLError's), or what caused either."""
    if not isinstance(exc, BaseException) or depth > 8:  # a reason may be a string
        return False
    if isinstance(exc, TimeoutError):
        return True
    return any(_timed_out(e, depth + 1) for e in (getattr(exc, "reason", None), exc.__cause__, exc.__context__))


def _unreachable(entry, label: str, path: Path, stalled: bool) -> HarnessError:
    server = urlparse(entry.url).netloc
    what = f"{server} sent nothing for {STALL_S:g} s" if stalled else f"cannot reach {server}"
    return HarnessError(
        f"torchvision: {what} to fetch {label}, and it is not in the torch.hub cache ({path.parent}): check the "
        "network, or give --weights"
    )


@contextmanager
def _stall_timeout(seconds: float) -> Iterator[None]:
    """Sockets opened inside give up after ``seconds`` without a byte (urllib's default timeout, which torch.hub's
    download uses)."""
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        socket.setdefaulttimeout(previous)


def pretrained(name: str, entry, num_classes: int | None):
    """The model built by torchvision with the weights of ``entry`` (its builder's own loading: key renames, auxiliary
    heads, input transform), read from torch.hub's cache after the file is checked to hold tensors only; and the
    file's sha256. A classifier of another width than ``num_classes`` is refused from the entry's categories, before
    anything is read or fetched."""
    import torchvision

    classes = len(entry.meta["categories"])
    if num_classes and classes != num_classes:
        raise ClassCountMismatch(classes, num_classes)
    path = fetch(entry)
    read_weights(path)  # torch.load(weights_only=True): what torch.hub then loads holds nothing but tensors
    try:
        model = torchvision.models.get_model(name, weights=entry)
    except (RuntimeError, ValueError) as exc:
        raise HarnessError(
            f"torchvision: the cached {path.name} does not fit {name}: {message_line(exc)}; delete it to fetch it again"
        ) from exc
    return model, file_sha256(path)


def build(name: str, num_classes: int | None, weights: str | None, named: str | None):
    """The model, its weights loaded, the file's sha256, its weights entry and how that entry was chosen: the entry
    named, else (a weights file) the entry whose file hash it carries, else ``DEFAULT``."""
    import torchvision

    entry = named_entry(name, named) if named else None
    choice = "named in the target" if named else "DEFAULT"
    if weights is None:
        entry = entry or named_entry(name, "DEFAULT")
        return *pretrained(name, entry, num_classes), entry, choice
    model = torchvision.models.get_model(name, weights=None, **({"num_classes": num_classes} if num_classes else {}))
    sha = load_weights(model, weights)
    if entry is not None:
        return model, sha, entry, choice
    return model, sha, *torchvision_weights_entry(name, sha)


def torchvision_target(target: ZooTarget) -> Submission:
    """A torchvision classifier with weights from a file, or (no file) its weights entry's through torch.hub's cache;
    preprocessing from its weights entry's preset transform."""
    import torchvision

    name, _, named = target.name.partition("@")
    known = torchvision.models.list_models(module=torchvision.models)
    if name not in known:
        raise HarnessError(f"torchvision: unknown classification model '{name}'{did_you_mean(name, known)}")
    model, sha, entry, how = build(name, target.num_classes, target.weights, named or None)
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
        "weights_entry": entry_label(entry),
        "weights_entry_choice": how,
    }
    return Submission(
        name=f"torchvision-{name}",
        model=model.eval(),
        transform=preset,
        channels=3,
        preprocessing=preprocessing,
        source=f"torchvision:{target.name}",
        file_sha256=sha,
        torchvision_weights={"entry": entry_label(entry), "url": entry.url} if target.weights is None else None,
    )
