"""Decoded images kept on disk, per shard, so that the next evaluation with the same preprocessing skips decoding.

An entry holds what the ``torchvision`` decoder makes of a shard before normalising (uint8, resized and cropped),
with the shard's keys and labels, in the score cache's checksummed format, renamed into place (not flushed: a torn
entry fails its checksum). Its folder is keyed by
the benchmark's sha256, the decoder's plan (resize, filter, crop, channels) and the versions of Pillow and torchvision
(whose pixels these are); its name is the shard's sha256. A damaged entry is reported in one line, discarded and
decoded again; the cache stops growing at its budget (nothing is evicted, nothing outside it is touched). Written by
hand: no maintained library keeps decoded WebDataset shards per preprocessing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np
import PIL
import torchvision

from dataset_builder.files import write_atomic
from harness.bundle import tag_cache
from harness.runtime.score_cache import Damaged, encode, read_entry

MAX_ENTRY_BYTES = 1 << 30  # a shard's images are held in memory until it is whole: larger shards are not kept


def cache_key(benchmark_sha256: str, plan, channels: int) -> str:
    """The folder of a benchmark's decoded images under one preprocessing."""
    defining = [benchmark_sha256, dataclasses.asdict(plan), channels, PIL.__version__, torchvision.__version__]
    return hashlib.sha256(json.dumps(defining, sort_keys=True, default=str).encode()).hexdigest()[:24]


class DecodedCache:
    """Per-shard decoded images under ``root/<key>``; writes stop once ``root`` holds ``budget_bytes``."""

    def __init__(self, root: Path, key: str, budget_bytes: int):
        self.root, self.folder, self.budget = root, root / key, budget_bytes
        self.used: int | None = None  # bytes under root, counted on the first write
        self.writable = True

    def _path(self, shard: dict) -> Path:
        return self.folder / f"{shard['sha256']}.decoded"

    def load(self, shard: dict) -> dict[str, np.ndarray] | None:
        """A shard's ``keys``, ``labels`` and uint8 ``images``, or None (a damaged entry is reported and removed)."""

        def check(arrays: dict) -> None:
            if not {"keys", "labels", "images"} <= arrays.keys() or arrays["images"].dtype != np.uint8:
                raise Damaged("it is not a decoded shard")
            if not len(arrays["keys"]) == len(arrays["labels"]) == len(arrays["images"]) == shard["num_samples"]:
                raise Damaged(f"it holds {len(arrays['images'])} images, the manifest lists {shard['num_samples']}")

        return read_entry(self._path(shard), check, "decoded image cache", "decoded")

    def save(self, shard: dict, keys: list[str], labels: np.ndarray, images: np.ndarray) -> None:
        """Keep a shard's decoded images, unless that would take the cache past its budget; a cache that cannot be
        written is no longer written (it only saves time)."""
        if not self.writable:
            return
        data = encode({"keys": np.asarray(keys, dtype=str), "labels": labels, "images": images})
        if self.used is None:
            self.used = sum(p.stat().st_size for p in self.root.rglob("*.decoded")) if self.root.is_dir() else 0
        if self.used + len(data) > self.budget:
            return
        try:
            tag_cache(self.root)
            self.folder.mkdir(parents=True, exist_ok=True)
            write_atomic(self._path(shard), data, durable=False)
            self.used += len(data)
        except OSError:  # the score cache beside it says in one line that the folder cannot be written
            self.writable = False
