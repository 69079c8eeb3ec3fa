"""Streaming benchmark shards into batches for the model.

Shards are divided among DataLoader workers, or read by a background thread when there are none (and, under
torchrun, divided among ranks by the caller); each shard is fetched (a Hub shard is downloaded on first use), checked
against the manifest's size and sha256, and cut into batches that never span two shards, decoded by the run's
decoder (:mod:`harness.decoding`) in the workers, or in this process for a GPU decoder. A batch's content therefore depends only on its shard and the batch size, which keeps
stochastic kappas and resumed runs reproducible whatever the number of workers.
"""

from __future__ import annotations

import json
import os
import threading
from queue import Full, Queue
from typing import Callable, Iterator

import torch

from dataset_builder.benchmark import Benchmark
from dataset_builder.errors import BenchmarkError
from dataset_builder.shards import read_shard


def _collate(shard: str, decode: Callable | None, examples: list) -> dict:
    keys, datas, labels = zip(*examples)
    batch = {"shard": shard, "keys": list(keys), "labels": torch.tensor(labels, dtype=torch.int64)}
    if decode is None:
        return batch | {"data": list(datas)}
    return batch | {"images": decode(list(datas), [f"{shard}: sample {key}" for key in keys])}


def batches_within_shard(shard: str, examples: Iterator[tuple], batch_size: int, decode: Callable | None = None) -> Iterator[dict]:
    batch: list = []
    for example in examples:
        batch.append(example)
        if len(batch) == batch_size:
            yield _collate(shard, decode, batch)
            batch = []
    if batch:
        yield _collate(shard, decode, batch)


class ShardStream(torch.utils.data.IterableDataset):
    """Batches ``{"shard", "keys", "images", "labels"}`` of the given shards (``"data"``, the images' bytes, in place
    of ``"images"`` when ``decode`` is None), or ``{"shard", "error"}`` when a shard is missing, corrupt or holds an
    unreadable sample (the consumer raises it)."""

    def __init__(self, benchmark: Benchmark, shards: list[dict], decode: Callable | None, label_of: dict[str, int],
                 batch_size: int, verify: bool = True):
        super().__init__()
        self.benchmark, self.shards, self.decode = benchmark, shards, decode
        self.label_of, self.batch_size, self.verify = label_of, batch_size, verify

    def _example(self, shard: dict, sample: dict) -> tuple:
        key = sample.get("__key__")
        try:
            class_id = json.loads(sample["json"])["class_id"]
            data = sample[self.benchmark.image_ext]
        except Exception as exc:  # any undecodable sample is reported with its shard and key
            raise BenchmarkError(f"corrupt shard {shard['path']}: sample {key} cannot be decoded ({type(exc).__name__}: {exc})") from None
        if class_id not in self.label_of:
            raise BenchmarkError(f"shard {shard['path']}: sample {key} has class '{class_id}', which is not in this split")
        return key, data, self.label_of[class_id]

    def __iter__(self) -> Iterator[dict]:
        worker = torch.utils.data.get_worker_info()
        mine = self.shards if worker is None else self.shards[worker.id :: worker.num_workers]
        for shard in mine:
            try:
                path = self.benchmark.shard_path(shard)
                self.benchmark.check_shard(shard, path, deep=self.verify)
                examples = (self._example(shard, sample) for sample in read_shard(path))
                yield from batches_within_shard(shard["path"], examples, self.batch_size, self.decode)
            except BenchmarkError as exc:
                yield {"shard": shard["path"], "error": str(exc)}
                return


def _decoded(batches: Iterator[dict], decode: Callable) -> Iterator[dict]:
    """Decode batches of bytes here (a GPU decoder cannot run in the loader's worker processes)."""
    for batch in batches:
        if "data" in batch:
            data = batch.pop("data")
            try:
                batch["images"] = decode(data, [f"{batch['shard']}: sample {key}" for key in batch["keys"]])
            except BenchmarkError as exc:
                batch = {"shard": batch["shard"], "error": str(exc)}
        yield batch
        if "error" in batch:
            return


def prefetched(batches: Iterator[dict], depth: int = 2) -> Iterator[dict]:
    """``batches`` produced by a background thread, ``depth`` ahead: reading, decoding (Pillow and torchvision
    release the GIL) and the consumer's forward pass overlap. Stops the thread when the consumer stops early."""
    queue: Queue = Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def produce() -> None:
        try:
            for batch in batches:
                while not stop.is_set():
                    try:
                        queue.put(batch, timeout=0.1)
                        break
                    except Full:
                        continue
                if stop.is_set():
                    return
            item = done
        except BaseException as exc:  # re-raised in the consumer
            item = exc
        while not stop.is_set():
            try:
                queue.put(item, timeout=0.1)
                return
            except Full:
                continue

    thread = threading.Thread(target=produce, name="cood-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item = queue.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        thread.join()


def default_workers(device: torch.device) -> int:
    """Loader worker processes by default: none on the CPU (a background thread reads and decodes, and the model keeps
    every core; workers would take cores from it), up to 8 beside a GPU."""
    return 0 if device.type == "cpu" else min(8, max(1, len(os.sched_getaffinity(0)) - 1))


def shard_batches(benchmark: Benchmark, shards: list[dict], decoder, label_of: dict[str, int], batch_size: int = 256,
                  workers: int = 2, verify: bool = True, pin_memory: bool = False) -> Iterator[dict]:
    """Batches of ``shards`` (see :class:`ShardStream`), read in ``workers`` processes (0: in a background thread of
    this one) and decoded by ``decoder`` (:mod:`harness.decoding`): in the workers on the CPU, here on a GPU."""
    if not shards:
        return iter(())
    in_stream = decoder.device.type == "cpu"
    stream = ShardStream(benchmark, shards, decoder if in_stream else None, label_of, batch_size, verify)
    workers = max(0, min(workers, len(shards)))
    if workers:
        batches = iter(torch.utils.data.DataLoader(stream, batch_size=None, num_workers=workers, pin_memory=pin_memory))
        return batches if in_stream else prefetched(_decoded(batches, decoder))
    batches = iter(stream) if in_stream else _decoded(iter(stream), decoder)
    return prefetched(_pinned(batches) if pin_memory and in_stream else batches)


def _pinned(batches: Iterator[dict]) -> Iterator[dict]:
    for batch in batches:
        yield batch | {"images": batch["images"].pin_memory()} if "images" in batch else batch
