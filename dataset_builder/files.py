"""Crash-safe file writes, for the whole project: write a temporary sibling, flush it to disk, rename it over the
target, flush the folder. A reader sees the old file or the new one, never a part, even after a kill or a crash.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

PARTIAL = ".partial"
_TOKEN = re.compile(r"\.[0-9a-f]{12}$")  # what write_atomic adds before PARTIAL: secrets.token_hex(6)


def fsync_path(path: Path, flags: int = os.O_RDONLY) -> None:
    """Flush the file ``path`` to disk, or for a folder its entries (new names, renames)."""
    handle = os.open(path, flags)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def fsync_dir(path: Path) -> None:
    """Make the entries of folder ``path`` (new names, renames) durable."""
    fsync_path(path, os.O_RDONLY | os.O_DIRECTORY)


def fsync_tree(folder: Path) -> None:
    """Flush every file and folder under ``folder``, and ``folder`` itself (so that a rename after it publishes whole
    files)."""
    for path in [*sorted(folder.rglob("*")), folder]:
        fsync_path(path)


def commit(partial: Path, path: Path, durable: bool = True) -> None:
    """Flush the finished file ``partial`` to disk, rename it over ``path`` and flush the folder; not ``durable``, only
    the rename (a kill still leaves the old file or the new one; a crash of the machine may leave a torn one)."""
    if durable:
        fsync_path(partial)
    os.replace(partial, path)
    if durable:
        fsync_dir(path.parent)


def write_atomic(path: Path, data: bytes | Callable[[Path], object], durable: bool = True) -> None:
    """Replace ``path`` by ``data``, or by what ``data(tmp)`` writes to the file ``tmp``; an error before the rename
    leaves ``path`` as it was. The temporary name is unique to the call: concurrent writers of a path never mix
    bytes. ``durable=False`` skips the flushes: for files that carry their own checksum, where a torn file after a
    crash is found and made again."""
    partial = path.with_name(f"{path.name}.{secrets.token_hex(6)}{PARTIAL}")
    try:
        if callable(data):
            data(partial)
        else:
            with open(partial, "xb") as handle:
                handle.write(data)
        commit(partial, path, durable)
    except BaseException:
        with suppress(OSError):
            partial.unlink(missing_ok=True)
        raise


def written_for(name: str) -> str | None:
    """The name of the file that the temporary file ``name`` was to become (None when ``name`` is not one)."""
    if not name.endswith(PARTIAL):
        return None
    return _TOKEN.sub("", name.removesuffix(PARTIAL))
