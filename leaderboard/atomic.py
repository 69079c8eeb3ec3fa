"""Crash-safe file writes: write a temporary sibling, flush it to disk, then rename over the target."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

PARTIAL = ".partial"


def write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp)`` then replace ``path`` with ``tmp``; on any error ``path`` is left as it was."""
    tmp = path.with_name(path.name + PARTIAL)
    try:
        write(tmp)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    write_atomic(path, lambda tmp: tmp.write_bytes(data))
