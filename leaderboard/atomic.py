"""Crash-safe file writes: write a temporary sibling, flush it to disk, rename it over the target, flush the folder."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

PARTIAL = ".partial"


def fsync_dir(path: Path) -> None:
    """Make the entries of folder ``path`` (new names, renames) durable."""
    handle = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp)`` then replace ``path`` with ``tmp``; on any error ``path`` is left as it was."""
    tmp = path.with_name(path.name + PARTIAL)
    try:
        write(tmp)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    finally:
        tmp.unlink(missing_ok=True)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    write_atomic(path, lambda tmp: tmp.write_bytes(data))
