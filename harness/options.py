"""What the command line can refuse before torch is imported (with :class:`harness.config.EvalConfig`, which refuses
options that cannot work): a target that is neither a file nor a zoo target, and model names that records and output
paths cannot take. Standard library only, so that ``cood-harness submit`` refuses them in one line in a fraction of a
second (the heavy imports take far longer)."""

from __future__ import annotations

import unicodedata
from pathlib import Path

from harness.errors import HarnessError

ZOO_TARGETS = ("timm", "torchvision", "open_clip", "hf")
DECODERS = ("auto", "pil", "torchvision")
FEATURE_DTYPES = ("float32", "float16")
MAX_NAME_BYTES = 200
LINE_BREAKING = ("Cc", "Cs", "Zl", "Zp")  # control characters, lone surrogates, line and paragraph separators


def is_zoo_target(target: str) -> bool:
    """``timm:``, ``torchvision:``, ``open_clip:`` or ``hf:``: library code with the submitter's data (weights, configs)."""
    kind, sep, _ = str(target).partition(":")
    return bool(sep) and kind in ZOO_TARGETS


def check_target(target: str, weights: str | Path | None = None) -> None:
    """A zoo target that names a model, or a submission file that exists (``weights`` only with a zoo target)."""
    if is_zoo_target(target):
        if not str(target).partition(":")[2]:
            raise HarnessError(f"target '{target}' names no model")
        return
    if not Path(target).is_file():
        raise HarnessError(f"submission file {target} not found")
    if weights is not None:
        raise HarnessError(f"--weights applies to timm:, torchvision: and open_clip: targets, not to the file {target}")


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
        raise HarnessError(f"the model name {shown} is {len(name.encode())} UTF-8 bytes long, more than {MAX_NAME_BYTES}")
