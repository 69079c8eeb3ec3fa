"""Streaming benchmark shards into batches for the model.

A split's shards are packed in manifest order into groups that fill a batch (:func:`shard_groups`: per-class shards
of 50 images still give the model full batches), divided among DataLoader workers, or read by a background thread
when there are none (and, under torchrun, among ranks by the caller). Each shard is fetched (a Hub shard is downloaded
on first use), checked against the manifest's size and sha256, and decoded by the run's decoder
(:mod:`harness.decoding`) in the workers, or in this process for a GPU decoder. A batch's content depends only on the
manifest and the batch size, which keeps stochastic kappas and resumed runs reproducible whatever the number of
workers."""

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
from harness.decoded_cache import MAX_ENTRY_BYTES, DecodedCache
from harness.decoding import joined


def _collate(shard: str, examples: list, decode: Callable | None, field: str) -> dict:
    """One batch of ``(key, bytes, label)`` examples: the images' bytes under ``"data"`` without ``decode``, else
    ``decode(datas, wheres)`` under ``field``."""
    keys, datas, labels = zip(*examples)
    batch = {"shard": shard, "shards": [(shard, len(keys))], "keys": list(keys), "labels": torch.tensor(labels, dtype=torch.int64)}
    if decode is None:
        return batch | {"data": list(datas)}
    return batch | {field: decode(list(datas), wheres(batch))}


def _chunks(examples: Iterator[tuple], batch_size: int) -> Iterator[list]:
    """A shard's examples in lists of at most ``batch_size``."""
    batch: list = []
    for example in examples:
        batch.append(example)
        if len(batch) == batch_size:
            yield batch
            batch = []
    if batch:
        yield batch


class ShardStream(torch.utils.data.IterableDataset):
    """Batches ``{"shard", "shards", "keys", "images", "labels"}`` of the given groups of shards (:func:`shard_groups`;
    ``"shards"``: each shard's path and number of samples in the batch, in order), or ``{"shard", "error"}`` when a
    shard is missing, corrupt or holds an unreadable sample (the consumer raises it). In place of ``"images"``: the
    images' bytes, ``"data"``, when ``decode`` is None, and their uint8 model inputs before normalising, ``"pixels"``,
    for a decoder with ``pixels`` (the consumer normalises them: see :func:`shard_batches`). With a ``decoded`` cache
    (:mod:`harness.decoded_cache`, for such a decoder), a shard decoded before is read from it, and one decoded now is
    kept in it."""

    def __init__(self, benchmark: Benchmark, groups: list[list[dict]], decode: Callable | None, label_of: dict[str, int],
                 batch_size: int, verify: bool = True, decoded: DecodedCache | None = None):
        super().__init__()
        self.benchmark, self.groups = benchmark, groups
        self.label_of, self.batch_size, self.verify, self.decoded = label_of, batch_size, verify, decoded
        self.field = "pixels" if hasattr(decode, "pixels") else "images"
        self.decode_into = getattr(decode, "pixels", decode)  # what fills ``field``
        self._class_ids: dict[bytes, str] = {}

    def _example(self, shard: dict, sample: dict) -> tuple:
        key = sample.get("__key__")
        try:
            record, data = sample["json"], sample[self.benchmark.image_ext]
            class_id = self._class_ids.get(record) or self._class_id(record)
            label = self.label_of.get(class_id)
        except Exception as exc:  # any undecodable sample is reported with its shard and key
            raise BenchmarkError(f"corrupt shard {shard['path']}: sample {key} cannot be decoded ({type(exc).__name__}: {exc})") from None
        if label is None:
            raise BenchmarkError(f"shard {shard['path']}: sample {key} has class '{class_id}', which is not in this split")
        return key, data, label

    def _class_id(self, record: bytes) -> str:
        """A sample's class from its JSON record, kept for the next sample with the same record (one per class in the
        builder's shards; at most 4,096 kept, as other benchmarks' records may differ per sample)."""
        if len(self._class_ids) >= 4096:
            self._class_ids.clear()
        self._class_ids[record] = json.loads(record)["class_id"]
        return self._class_ids[record]

    def _kept(self, shard: dict, arrays: dict) -> Iterator[dict]:
        """A shard's batches from its decoded images."""
        keys, labels, pixels = list(arrays["keys"]), torch.from_numpy(arrays["labels"]), torch.from_numpy(arrays["images"])
        for start in range(0, len(keys), self.batch_size):
            part = slice(start, start + self.batch_size)
            yield {"shard": shard["path"], "shards": [(shard["path"], len(keys[part]))], "keys": keys[part], "labels": labels[part],
                   "pixels": pixels[part]}

    def _keeping(self, shard: dict, batches: Iterator[dict]) -> Iterator[dict]:
        """A shard's batches, decoded now, its pixels kept in the decoded cache once the shard is whole (unless they
        take more than ``MAX_ENTRY_BYTES``)."""
        parts, held = [], 0
        for batch in batches:
            held += batch["pixels"].numel()
            if held <= MAX_ENTRY_BYTES:
                parts.append((batch["keys"], batch["labels"], batch["pixels"]))
            yield batch
        if held <= MAX_ENTRY_BYTES:
            self.decoded.save(shard, [k for keys, _, _ in parts for k in keys], joined([p[1] for p in parts]).numpy(),
                              joined([p[2] for p in parts]).numpy())

    def _batches(self, shard: dict) -> Iterator[dict]:
        """A shard's batches (through the decoded cache when there is one); raises BenchmarkError."""
        kept = self.decoded.load(shard) if self.decoded is not None else None
        if kept is not None:
            yield from self._kept(shard, kept)
            return
        path = self.benchmark.shard_path(shard)
        self.benchmark.check_shard(shard, path, deep=self.verify)
        examples = (self._example(shard, sample) for sample in read_shard(path))
        batches = (_collate(shard["path"], chunk, self.decode_into, self.field) for chunk in _chunks(examples, self.batch_size))
        yield from self._keeping(shard, batches) if self.decoded is not None else batches

    def __iter__(self) -> Iterator[dict]:
        worker = torch.utils.data.get_worker_info()
        mine = self.groups if worker is None else self.groups[worker.id :: worker.num_workers]
        for group in mine:
            shard = group[0]
            try:
                if len(group) == 1:
                    yield from self._batches(shard)
                else:  # small shards: together they fill one batch
                    parts = []
                    for shard in group:
                        parts += list(self._batches(shard))
                    yield _joined(parts)
            except BenchmarkError as exc:
                yield {"shard": shard["path"], "error": str(exc)}
                return


def _joined(parts: list[dict]) -> dict:
    """One batch of the batches of several shards, in order."""
    batch = {"shard": ", ".join(p["shard"] for p in parts), "shards": [s for p in parts for s in p["shards"]],
             "keys": [k for p in parts for k in p["keys"]], "labels": joined([p["labels"] for p in parts])}
    field = next(f for f in ("data", "pixels", "images") if f in parts[0])
    if field == "data":
        return batch | {"data": [d for p in parts for d in p["data"]]}
    return batch | {field: joined([p[field] for p in parts])}


def wheres(batch: dict) -> list[str]:
    """Where each sample of a batch comes from, for error messages: ``"<shard>: sample <key>"``."""
    paths = [path for path, count in batch["shards"] for _ in range(count)]
    return [f"{path}: sample {key}" for path, key in zip(paths, batch["keys"])]


def shard_groups(shards: list[dict], batch_size: int) -> list[list[dict]]:
    """Shards in manifest order, consecutive small ones packed into groups of at most ``batch_size`` samples (a larger
    shard is a group alone). A batch depends only on the manifest and the batch size, whichever shards a resumed run
    still needs and however many workers or ranks share them, so the model sees full batches on per-class shards."""
    groups: list[list[dict]] = []
    size = 0
    for shard in shards:
        if groups and size + shard["num_samples"] <= batch_size:
            groups[-1].append(shard)
            size += shard["num_samples"]
        else:
            groups.append([shard])
            size = shard["num_samples"]
    return groups


def _decoded(batches: Iterator[dict], decode: Callable) -> Iterator[dict]:
    """Decode batches of bytes here (a GPU decoder cannot run in the loader's worker processes)."""
    for batch in batches:
        if "data" in batch:
            data = batch.pop("data")
            try:
                batch["images"] = decode(data, wheres(batch))
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

    def put(item) -> bool:
        """Hand ``item`` over, unless the consumer has stopped (then False)."""
        while not stop.is_set():
            try:
                queue.put(item, timeout=0.1)
                return True
            except Full:
                continue
        return False

    def produce() -> None:
        try:
            for batch in batches:
                if not put(batch):
                    return
            put(done)
        except BaseException as exc:  # re-raised in the consumer
            put(exc)

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
    every core; workers would take cores from it); beside a GPU, every core this process may use but one, shared with
    the other ranks on the host under torchrun (``LOCAL_WORLD_SIZE``)."""
    if device.type == "cpu":
        return 0
    return max(1, len(os.sched_getaffinity(0)) // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1"))) - 1)


def shard_batches(benchmark: Benchmark, groups: list[list[dict]], decoder, label_of: dict[str, int], batch_size: int = 256,
                  workers: int = 2, verify: bool = True, pin_memory: bool = False,
                  decoded: DecodedCache | None = None) -> Iterator[dict]:
    """Batches of ``groups`` of shards (see :class:`ShardStream`), read in ``workers`` processes (0: in a background
    thread of this one) and decoded by ``decoder`` (:mod:`harness.decoding`): in the workers on the CPU, here on a
    GPU; through the ``decoded`` image cache when given and the decoder decodes on the CPU. A decoder's uint8 pixels
    are normalised here, in the consumer's thread: the reading thread or workers run no multi-threaded torch op
    beside the model's, and carry a quarter of the bytes."""
    if not groups:
        return iter(())
    in_stream = decoder.device.type == "cpu"
    decoded = decoded if in_stream and hasattr(decoder, "pixels") else None
    stream = ShardStream(benchmark, groups, decoder if in_stream else None, label_of, batch_size, verify, decoded)
    workers = max(0, min(workers, len(groups)))
    if workers:
        batches = iter(torch.utils.data.DataLoader(stream, batch_size=None, num_workers=workers, pin_memory=pin_memory))
        batches = batches if in_stream else prefetched(_decoded(batches, decoder))
    else:
        batches = iter(stream) if in_stream else _decoded(iter(stream), decoder)
        batches = prefetched(_pinned(batches) if pin_memory and in_stream else batches)
    return _normalized(batches, decoder) if stream.field == "pixels" else batches


def _normalized(batches: Iterator[dict], decoder) -> Iterator[dict]:
    for batch in batches:
        yield batch | {"images": decoder.normalize(batch.pop("pixels"))} if "pixels" in batch else batch


def _pinned(batches: Iterator[dict]) -> Iterator[dict]:
    for batch in batches:
        field = next((f for f in ("pixels", "images") if f in batch), None)
        yield batch | {field: batch[field].pin_memory()} if field else batch
