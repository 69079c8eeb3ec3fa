"""WebDataset shards: deterministic writing (sorted members, mtime 0, atomic rename) and checked reading.

A sample is ``{"__key__": key, <image_ext>: image bytes, "cls": label, "json": {"class_id": ...}}``: the image,
its integer label as ASCII digits (timm's and the Hub's image WebDatasets' ``cls``; one label space per benchmark,
the class tables' ``label``) and its class id. Benchmarks of format 1 have no ``cls``. Keys contain no dots
(WebDataset splits member names at the first dot). Since format 3 each shard has a Parquet copy beside it, for
``datasets`` (:mod:`dataset_builder.copies`), listed in the shard's manifest entry (``parquet``).
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import webdataset as wds
from webdataset.tariterators import tarfile_samples

from dataset_builder import faults
from dataset_builder.errors import BenchmarkError
from dataset_builder.files import commit


@dataclass(frozen=True)
class ShardInfo:
    """One shard as the manifest lists it (``path`` relative to the benchmark root)."""

    path: str
    split: str
    sha256: str
    num_samples: int
    num_bytes: int
    class_id: str | None = None
    parquet: dict | None = None  # the Parquet copy: path, sha256, num_bytes

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


def sample_key(class_id: str, image_key: str) -> str:
    """A WebDataset-safe sample key: ``<class_id>__<image stem>`` with dots replaced."""
    stem = image_key.rsplit("/", 1)[-1]
    stem = stem.rsplit(".", 1)[0] if "." in stem else stem
    return f"{class_id}__{stem}".replace(".", "_")


def make_sample(key: str, image_ext: str, image: bytes, class_id: str, label: int) -> dict:
    return {
        "__key__": key,
        image_ext: image,
        "cls": str(int(label)).encode(),
        "json": json.dumps({"class_id": class_id}, sort_keys=True).encode(),
    }


def file_sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class ShardWriter:
    """Streams samples into ``root/relpath`` (created on the first sample, so nothing empty is left behind);
    ``close()`` flushes it and renames it into place (:func:`dataset_builder.files.commit`) and returns its manifest
    entry, or None when nothing was written. The file is written as ``<shard>.partial``, a fixed name, so that a resumed
    build overwrites what a killed one left instead of leaving it in the benchmark."""

    def __init__(self, root: Path, relpath: str, split: str, class_id: str | None = None, copy: bool = True):
        self.root, self.relpath, self.split, self.class_id, self.copy = root, relpath, split, class_id, copy
        self.target = root / relpath
        self.partial = self.target.with_name(self.target.name + ".partial")
        self.count = 0
        self._file = self._tar = None

    def write(self, sample: dict) -> None:
        if self._tar is None:
            self.target.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.partial, "wb")
            self._tar = wds.TarWriter(self._file, user="cood", group="cood", mode=0o444, mtime=0, encoder=False)
        self._tar.write(sample)
        self.count += 1

    def close(self) -> ShardInfo | None:
        if self._tar is None:
            return None
        self._tar.close()
        self._file.close()
        self._tar = None
        commit(self.partial, self.target)
        parquet = self._write_copy() if self.copy else None
        faults.point("shard-done", self.target)
        size = self.target.stat().st_size
        return ShardInfo(self.relpath, self.split, file_sha256(self.target), self.count, size, self.class_id, parquet)

    def _write_copy(self) -> dict:
        """The shard's Parquet copy (:mod:`dataset_builder.copies`), written; its manifest entry."""
        from dataset_builder.copies import copy_path, write_copy

        path = write_copy(self.target, read_shard(self.target))
        return {"path": copy_path(self.relpath), "sha256": file_sha256(path), "num_bytes": path.stat().st_size}


def write_shard(
    root: Path, relpath: str, split: str, samples: Iterable[dict], class_id: str | None = None, copy: bool = True
) -> ShardInfo:
    """Write ``samples`` (in the given order, at least one) to ``root/relpath`` atomically, and its Parquet copy
    unless not ``copy`` (the form of formats 1 and 2); return its manifest entry."""
    writer = ShardWriter(root, relpath, split, class_id, copy)
    for sample in samples:
        writer.write(sample)
    info = writer.close()
    if info is None:
        raise ValueError(f"no samples for shard {relpath}")
    return info


def iter_samples(path: str | os.PathLike) -> Iterator[dict]:
    """Samples of one shard (webdataset's tar reader): ``__key__`` plus raw bytes per field.

    A broken tar raises BenchmarkError naming the shard."""
    try:
        for sample in tarfile_samples([{"url": str(path)}]):
            yield {k: v for k, v in sample.items() if k != "__url__"}
    except (tarfile.TarError, OSError, EOFError, ValueError) as exc:
        raise BenchmarkError(f"corrupt shard {path}: {exc.args[0] if exc.args else type(exc).__name__}") from exc


def _member_name(header: bytes) -> str:
    name = header[:100].split(b"\0", 1)[0]
    if header[257:262] == b"ustar" and header[345] != 0:
        name = header[345:500].split(b"\0", 1)[0] + b"/" + name
    return name.decode("utf-8")


def _pax_path(records: bytes) -> str | None:
    """The ``path`` of a pax extended header's records (``"<len> key=value\\n"`` each), or None."""
    for line in records.split(b"\n"):
        _, _, item = line.partition(b" ")
        key, eq, value = item.partition(b"=")
        if eq and key == b"path":
            return value.decode("utf-8")
    return None


def _number(field: bytes, path, offset: int, default: bytes) -> int:
    try:
        return int(field.split(b"\0", 1)[0].strip() or default, 8)
    except ValueError as exc:
        raise BenchmarkError(f"corrupt shard {path}: a tar header at byte {offset} is not a number") from exc


_BLOCK = np.arange(512)


def _check_sums(data, headers: list[int], stored: list[int], path) -> None:
    """Every header's checksum (the sum of its bytes, its checksum field counted as spaces) against the stored one,
    all headers in one array operation; raises BenchmarkError at the first that differs."""
    if not headers:
        return
    view = np.frombuffer(data, np.uint8)
    blocks = view[np.asarray(headers)[:, None] + _BLOCK].astype(np.int64)
    del view  # an mmap cannot close while an array still reads it
    sums = blocks.sum(1) - blocks[:, 148:156].sum(1) + 8 * ord(" ")
    bad = np.flatnonzero(sums != np.asarray(stored))
    if len(bad):
        raise BenchmarkError(f"corrupt shard {path}: bad tar header checksum at byte {headers[bad[0]]}")


def _members(data, path) -> list[tuple[str, int, int]]:
    """The regular members of a tar in memory, ``(name, start, size)`` in order, every header's checksum checked."""
    members, headers, stored = [], [], []
    offset, end, long_name = 0, len(data), None
    try:
        while offset + 512 <= end:
            header = data[offset : offset + 512]
            if header == bytes(512):
                break
            headers.append(offset)
            stored.append(_number(header[148:156], path, offset, b"-1"))
            size = _number(header[124:136], path, offset, b"0")
            body, kind = offset + 512, header[156:157]
            if body + size > end:
                raise BenchmarkError(f"corrupt shard {path}: the member at byte {offset} runs past the end of the file")
            offset = body + (size + 511) // 512 * 512
            if kind in (b"x", b"g"):
                long_name = _pax_path(data[body : body + size]) if kind == b"x" else long_name
            elif kind in (b"0", b"\0"):
                members.append((long_name or _member_name(header), body, size))
                long_name = None
            elif kind == b"5":
                long_name = None
            else:
                raise BenchmarkError(f"corrupt shard {path}: member type {kind!r} at byte {body - 512} is not a file")
        if 0 < end - offset < 512:
            raise BenchmarkError(f"corrupt shard {path}: a truncated tar header at byte {offset}")
    except BenchmarkError:
        _check_sums(data, headers, stored, path)  # a header's damage is named as such first
        raise
    _check_sums(data, headers, stored, path)
    return members


def samples_from_bytes(data, path: str | os.PathLike = "") -> Iterator[dict]:
    """The samples of a shard in memory (bytes or an mmap), as :func:`iter_samples` gives them, without tarfile's
    per-member cost.

    Written by hand because tarfile and webdataset spend most of a small image's read time on Python per-member
    bookkeeping. It reads regular members and pax path headers (what the builder writes), checks every header's
    checksum (in one array operation, before the first sample), and refuses other member types in one line."""
    current = None
    for name, body, size in _members(data, path):
        folder, _, base = name.rpartition("/")
        stem, dot, field = base.partition(".")
        if not dot:
            continue
        key = f"{folder}/{stem}" if folder else stem
        if current is not None and current["__key__"] != key:
            yield current
            current = None
        current = current or {"__key__": key}
        current[field] = bytes(data[body : body + size])
    if current is not None:
        yield current


def read_shard(path: str | os.PathLike) -> Iterator[dict]:
    """The samples of a shard file through :func:`samples_from_bytes` over a memory map (the OS pages it in)."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            yield from samples_from_bytes(data, path)
    except ValueError as exc:  # an empty file cannot be mapped
        raise BenchmarkError(f"corrupt shard {path}: {exc}") from exc


class RollingShards:
    """Writes samples into ``<folder>/000000.tar, 000001.tar, ...`` of at most ``maxcount`` samples each."""

    def __init__(self, root: Path, folder: str, split: str, maxcount: int = 10_000):
        self.root, self.folder, self.split, self.maxcount = root, folder, split, maxcount
        self.pending: list[dict] = []
        self.infos: list[ShardInfo] = []

    def add(self, samples: Iterable[dict]) -> None:
        self.pending.extend(samples)
        while len(self.pending) >= self.maxcount:
            self._flush(self.pending[: self.maxcount])
            self.pending = self.pending[self.maxcount :]

    def close(self) -> list[ShardInfo]:
        if self.pending:
            self._flush(self.pending)
            self.pending = []
        return self.infos

    def _flush(self, samples: list[dict]) -> None:
        relpath = f"{self.folder}/{len(self.infos):06d}.tar"
        self.infos.append(write_shard(self.root, relpath, self.split, samples))
