"""What the command line can refuse before torch is imported (with :class:`harness.config.EvalConfig`, which refuses
options that cannot work): a target that is neither a file nor a zoo target, and model names that records and output
paths cannot take. Standard library only, so that ``cood-harness submit`` refuses them in one line in a fraction of a
second (the heavy imports take far longer)."""

from __future__ import annotations

import unicodedata
from pathlib import Path

from harness.errors import HarnessError
from harness.zoo import hub_kinds, kinds_listed, weights_kinds, zoo_kind

DECODERS = ("auto", "pil", "torchvision")
FEATURE_DTYPES = ("float32", "float16")
MAX_NAME_BYTES = 200
LINE_BREAKING = ("Cc", "Cs", "Zl", "Zp")  # control characters, lone surrogates, line and paragraph separators


def is_zoo_target(target: str) -> bool:
    """A registered ``KIND:NAME`` target (:mod:`harness.zoo`): library code with the submitter's data (weights,
    configs)."""
    return zoo_kind(target) is not None


def check_target(target: str, weights: str | Path | None = None, revision: str | None = None) -> None:
    """A zoo target that names a model, with a weights file when its kind takes one and none when it names a folder (a
    kind that fetches pretrained weights may go without, and then, where they come from the Hub, takes a ``revision``);
    or a submission file that exists, without weights."""
    kind = zoo_kind(target)
    if kind is None:
        if not Path(target).is_file():
            prefix, sep, _ = str(target).partition(":")
            unknown = sep and len(prefix) > 1 and prefix.isidentifier()  # not a drive letter, not a path
            hint = f", and {prefix}: is no zoo target kind ({kinds_listed()})" if unknown else ""
            raise HarnessError(f"submission file {target} not found{hint}")
        if weights is not None:
            raise HarnessError(misplaced_weights(f"the file {target}"))
    elif not str(target).partition(":")[2]:
        raise HarnessError(f"target '{target}' names no model")
    elif kind.folder and weights is not None:
        raise HarnessError(f"{kind.name}: targets take their weights from the folder; drop --weights")
    elif not kind.folder and weights is None and not kind.pretrained:
        raise HarnessError(f"{target} needs a weights file (--weights); nothing is downloaded")
    if revision is not None and (kind is None or not kind.hub or weights is not None):
        raise HarnessError(misplaced_revision())


def misplaced_weights(what: str, option: str = "--weights") -> str:
    """The error for a weights file given with ``what`` (a file, a module), which takes none."""
    return f"{option} applies to {weights_kinds()} targets, not to {what}"


def misplaced_revision(option: str = "--revision") -> str:
    """The error for a Hub revision given with anything but a target that fetches pretrained weights."""
    return f"{option} applies to the pretrained weights of {hub_kinds()} targets given no weights file"


def check_name(name: str) -> None:
    """A model name as records and output paths use it: at most 200 UTF-8 bytes, no path separator, no control
    character, not '', '.' or '..'; anything else is refused in one line."""
    if not isinstance(name, str):
        raise HarnessError(f"the model name must be a string, got {type(name).__name__}")
    shown = repr(name if len(name) <= 60 else name[:60] + "...")
    if name in ("", ".", ".."):
        raise HarnessError(f"the model name {shown} is not a name")
    if "/" in name or "\\" in name:
        raise HarnessError(f"the model name {shown} contains '/' or '\\'")
    if any(unicodedata.category(c) in LINE_BREAKING for c in name):
        raise HarnessError(f"the model name {shown} contains a control character")
    if len(name.encode()) > MAX_NAME_BYTES:
        raise HarnessError(
            f"the model name {shown} is {len(name.encode())} UTF-8 bytes long, more than {MAX_NAME_BYTES}"
        )
