"""What every zoo adapter shares: what it builds from, its optional package, a did-you-mean, a closed stdin."""

from __future__ import annotations

import difflib
import importlib
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from harness.errors import HarnessError


@dataclass(frozen=True)
class ZooTarget:
    """What an adapter builds a ``KIND:NAME`` target from: ``name`` (after ``KIND:``), the weights file (None for a
    folder kind, see :mod:`harness.zoo`; for a kind that fetches pretrained weights, None: fetch them), the logits'
    width the benchmark expects (None: unchecked), its ID class names in benchmark order (None: not given) and the Hub
    revision to fetch pretrained weights at (None: the library's own, ``main``)."""

    name: str
    weights: str | None = None
    num_classes: int | None = None
    classnames: Sequence[str] | None = None
    revision: str | None = None


def import_optional(module: str, package: str):
    """Import an adapter's optional dependency, or say which package to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise HarnessError(f"this target needs the {package} package: pip install {package}") from exc


def did_you_mean(name: str, known: list[str]) -> str:
    """``"; did you mean a, b?"`` with the up to three names of ``known`` closest to ``name``, or ``""``."""
    close = difflib.get_close_matches(name, known, n=3)
    return f"; did you mean {', '.join(close)}?" if close else ""


def list_if_tuple(value):
    """A tuple as a list (as JSON writes it); anything else as it is."""
    return list(value) if isinstance(value, tuple) else value


@contextmanager
def stdin_closed() -> Iterator[None]:
    """Inside, ``sys.stdin`` is None, so that a library's prompt fails before it shows or reads anything (``input()``
    raises "lost sys.stdin"): transformers asks whether to run a repo's own code wherever its caller passes no
    ``trust_remote_code``, as open_clip does for the transformers text towers and tokenizers some architectures name."""
    saved, sys.stdin = sys.stdin, None
    try:
        yield
    finally:
        sys.stdin = saved
