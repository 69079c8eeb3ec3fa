"""What every zoo adapter shares: the weights it needs, its optional package, a did-you-mean."""

from __future__ import annotations

import difflib
import importlib

from harness.errors import HarnessError


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
