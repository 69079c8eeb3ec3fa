"""Streaming benchmark shards into batches for the model.

Shards are divided among DataLoader workers (and, under torchrun, among ranks by the caller); a
worker fetches each shard (a Hub shard is downloaded on first use), checks its size and sha256
against the manifest, decodes and transforms its images, and cuts it into batches that never span
two shards. A batch's content therefore depends only on its shard and the batch size, which keeps
stochastic kappas and resumed runs reproducible whatever the number of workers.
"""

from __future__ import annotations

import io
import json
from typing import Callable, Iterator

import torch
from PIL import Image

from dataset_builder.benchmark import Benchmark
from dataset_builder.errors import BenchmarkError
from dataset_builder.shards import read_shard


def _collate(shard: str, examples: list) -> dict:
    keys, images, labels = zip(*examples)
    return {"shard": shard, "keys": list(keys), "images": torch.stack(images), "labels": torch.tensor(labels, dtype=torch.int64)}


def batches_within_shard(shard: str, examples: Iterator[tuple], batch_size: int) -> Iterator[dict]:
    batch: list = []
    for example in examples:
        batch.append(example)
        if len(batch) == batch_size:
            yield _collate(shard, batch)
            batch = []
    if batch:
        yield _collate(shard, batch)


def _undecodable(shard: dict, key: str | None, exc: Exception) -> BenchmarkError:
    return BenchmarkError(f"corrupt shard {shard['path']}: sample {key} cannot be decoded ({type(exc).__name__}: {exc})")


class ShardStream(torch.utils.data.IterableDataset):
    """Batches ``{"shard", "keys", "images", "labels"}`` of the given shards, or ``{"shard", "error"}``
    when a shard is missing, corrupt or holds an unreadable sample (the consumer raises it)."""

    def __init__(self, benchmark: Benchmark, shards: list[dict], transform: Callable, channels: int,
                 label_of: dict[str, int], batch_size: int, verify: bool = True):
        super().__init__()
        self.benchmark, self.shards, self.transform, self.channels = benchmark, shards, transform, channels
        self.label_of, self.batch_size, self.verify = label_of, batch_size, verify

    def _example(self, shard: dict, sample: dict) -> tuple:
        ext = self.benchmark.image_ext
        key = sample.get("__key__")
        try:
            class_id = json.loads(sample["json"])["class_id"]
            image = Image.open(io.BytesIO(sample[ext]))
        except Exception as exc:  # any undecodable sample is reported with its shard and key
            raise _undecodable(shard, key, exc) from None
        limit = self.benchmark.max_image_pixels
        if image.width * image.height > limit:  # checked on the header, before decoding
            raise BenchmarkError(f"shard {shard['path']}: sample {key} is {image.width}x{image.height} pixels, "
                                 f"above the benchmark's max_image_pixels ({limit})")
        try:
            image = image.convert("L" if self.channels == 1 else "RGB")
        except Exception as exc:
            raise _undecodable(shard, key, exc) from None
        if class_id not in self.label_of:
            raise BenchmarkError(f"shard {shard['path']}: sample {key} has class '{class_id}', which is not in this split")
        return key, self.transform(image), self.label_of[class_id]

    def __iter__(self) -> Iterator[dict]:
        worker = torch.utils.data.get_worker_info()
        mine = self.shards if worker is None else self.shards[worker.id :: worker.num_workers]
        for shard in mine:
            try:
                path = self.benchmark.shard_path(shard)
                self.benchmark.check_shard(shard, path, deep=self.verify)
                examples = (self._example(shard, sample) for sample in read_shard(path))
                yield from batches_within_shard(shard["path"], examples, self.batch_size)
            except BenchmarkError as exc:
                yield {"shard": shard["path"], "error": str(exc)}
                return


def shard_batches(benchmark: Benchmark, shards: list[dict], transform: Callable, channels: int, label_of: dict[str, int],
                  batch_size: int = 256, workers: int = 2, verify: bool = True, pin_memory: bool = False) -> Iterator[dict]:
    """Batches of ``shards`` (see :class:`ShardStream`), decoded in ``workers`` processes (0: in this one)."""
    if not shards:
        return iter(())
    stream = ShardStream(benchmark, shards, transform, channels, label_of, batch_size, verify)
    workers = max(0, min(workers, len(shards)))
    loader = torch.utils.data.DataLoader(stream, batch_size=None, num_workers=workers, pin_memory=pin_memory)
    return iter(loader)
