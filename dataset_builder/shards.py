"""WebDataset shards: deterministic writing (sorted members, mtime 0, atomic rename) and checked reading.

A sample is ``{"__key__": key, <image_ext>: image bytes, "json": {"class_id": ...}}``. Keys contain
no dots (WebDataset splits member names at the first dot).
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Iterator

import webdataset as wds
from webdataset.tariterators import tarfile_samples

from dataset_builder import faults
from dataset_builder.errors import BenchmarkError


@dataclass(frozen=True)
class ShardInfo:
    """One shard as the manifest lists it (``path`` relative to the benchmark root)."""

    path: str
    split: str
    sha256: str
    num_samples: int
    num_bytes: int
    class_id: str | None = None

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


def sample_key(class_id: str, image_key: str) -> str:
    """A WebDataset-safe sample key: ``<class_id>__<image stem>`` with dots replaced."""
    stem = image_key.rsplit("/", 1)[-1]
    stem = stem.rsplit(".", 1)[0] if "." in stem else stem
    return f"{class_id}__{stem}".replace(".", "_")


def make_sample(key: str, image_ext: str, image: bytes, class_id: str) -> dict:
    return {"__key__": key, image_ext: image, "json": json.dumps({"class_id": class_id}, sort_keys=True).encode()}


def file_sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class ShardWriter:
    """Streams samples into ``root/relpath`` (created on the first sample, so nothing empty is left behind);
    ``close()`` renames it into place atomically and returns its manifest entry, or None when nothing was written."""

    def __init__(self, root: Path, relpath: str, split: str, class_id: str | None = None):
        self.root, self.relpath, self.split, self.class_id = root, relpath, split, class_id
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
        os.replace(self.partial, self.target)
        faults.point("shard-done")
        return ShardInfo(self.relpath, self.split, file_sha256(self.target), self.count, self.target.stat().st_size, self.class_id)


def write_shard(root: Path, relpath: str, split: str, samples: Iterable[dict], class_id: str | None = None) -> ShardInfo:
    """Write ``samples`` (in the given order, at least one) to ``root/relpath`` atomically; return its manifest entry."""
    writer = ShardWriter(root, relpath, split, class_id)
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
        raise BenchmarkError(f"corrupt shard {path}: {exc.args[0] if exc.args else type(exc).__name__}") from None


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
