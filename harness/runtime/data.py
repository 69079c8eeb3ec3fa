"""Streaming benchmark shards for the model.

The evaluation passes read every split's shards together in the run's secret order: each reader (a DataLoader worker
that lives across a run's passes, :class:`Loader`, or a background thread when there are none) mixes its shards row by
row, a few shards of each split open at once (:func:`harness.runtime.interleave.merged`), and the consumer mixes the
readers' chunks into batches (:class:`harness.runtime.interleave.Mixer`). The fit split's layer pass reads a split's
shards in manifest order, packed into groups that fill a batch (:func:`shard_groups`). Under torchrun the caller
divides the shards among ranks. Each shard is fetched (a Hub shard is downloaded on first use), checked against the
manifest's size and sha256, and decoded by the run's decoder (:mod:`harness.runtime.decoding`) in the readers, or in
this process for a GPU decoder, on a CUDA stream of its own (:class:`DecodeLane`). A sample's class is its
``json.class_id``, in benchmarks of every format (the ``cls`` label of format 2 is for ``datasets`` and timm; the
harness labels classes itself), so those built before format 2 read as before."""

from __future__ import annotations

import gc
import json
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from queue import Full, Queue

import torch

from dataset_builder.benchmark import Benchmark
from dataset_builder.errors import BenchmarkError
from dataset_builder.shards import read_shard
from harness.config import EvalConfig
from harness.runtime.decoded_cache import MAX_ENTRY_BYTES, DecodedCache
from harness.runtime.decoding import joined
from harness.runtime.interleave import READ_ROWS, Mixer, derived, merged


def _collate(shard: str, examples: list, decode: Callable | None, field: str) -> dict:
    """One batch of ``(key, bytes, label)`` examples: the images' bytes under ``"data"`` without ``decode``, else
    ``decode(datas, wheres)`` under ``field``."""
    keys, datas, labels = zip(*examples)
    batch = {
        "shard": shard,
        "shards": [(shard, len(keys))],
        "keys": list(keys),
        "labels": torch.tensor(labels, dtype=torch.int64),
    }
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
    for a decoder with ``pixels`` (the consumer normalises them: see :class:`Loader`). With a ``decoded`` cache
    (:mod:`harness.runtime.decoded_cache`, for such a decoder), a shard decoded before is read from it, and one decoded
    now is kept in it. Read merged (an ``order_seed``), a chunk holds rows of many shards, each row's under
    ``"rows"``."""

    def __init__(
        self,
        benchmark: Benchmark,
        groups: list[list[dict]],
        decode: Callable | None,
        label_of: dict[str, int],
        batch_size: int,
        verify: bool = EvalConfig.verify,
        decoded: DecodedCache | None = None,
    ):
        super().__init__()
        self.benchmark, self.groups = benchmark, groups
        self.label_of, self.batch_size, self.verify, self.decoded = label_of, batch_size, verify, decoded
        self.field = "pixels" if hasattr(decode, "pixels") else "images"
        self.decode_into = getattr(decode, "pixels", decode)  # what fills ``field``
        self._class_ids: dict[bytes, str] = {}
        self.order_seed: int | None = None  # set: the groups' shards are read merged (see :meth:`_merged`)

    def _example(self, shard: dict, sample: dict) -> tuple:
        key = sample.get("__key__")
        try:
            record, data = sample["json"], sample[self.benchmark.image_ext]
            class_id = self._class_ids.get(record) or self._class_id(record)
            label = self.label_of.get(class_id)
        except Exception as exc:  # any undecodable sample is reported with its shard and key
            raise BenchmarkError(
                f"corrupt shard {shard['path']}: sample {key} cannot be decoded ({type(exc).__name__}: {exc})"
            ) from exc
        if label is None:
            raise BenchmarkError(
                f"shard {shard['path']}: sample {key} has class '{class_id}', which is not in this split"
            )
        return key, data, label

    def _class_id(self, record: bytes) -> str:
        """A sample's class from its JSON record, kept for the next sample with the same record (one per class in the
        builder's shards; at most 4,096 kept, as other benchmarks' records may differ per sample)."""
        if len(self._class_ids) >= 4096:
            self._class_ids.clear()
        self._class_ids[record] = json.loads(record)["class_id"]
        return self._class_ids[record]

    def _kept(self, shard: dict, arrays: dict, rows: int) -> Iterator[dict]:
        """A shard's chunks of ``rows`` from its decoded images."""
        keys, labels, pixels = (
            list(arrays["keys"]),
            torch.from_numpy(arrays["labels"]),
            torch.from_numpy(arrays["images"]),
        )
        for start in range(0, len(keys), rows):
            part = slice(start, start + rows)
            yield {
                "shard": shard["path"],
                "shards": [(shard["path"], len(keys[part]))],
                "keys": keys[part],
                "labels": labels[part],
                "pixels": pixels[part],
            }

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
            self.decoded.save(
                shard,
                [k for keys, _, _ in parts for k in keys],
                joined([p[1] for p in parts]).numpy(),
                joined([p[2] for p in parts]).numpy(),
            )

    def _batches(self, shard: dict, rows: int | None = None) -> Iterator[dict]:
        """A shard's batches, or chunks of ``rows`` (through the decoded cache when there is one); raises
        BenchmarkError."""
        rows = rows or self.batch_size
        kept = self.decoded.load(shard) if self.decoded is not None else None
        if kept is not None:
            yield from self._kept(shard, kept, rows)
            return
        path = self.benchmark.shard_path(shard)
        self.benchmark.check_shard(shard, path, deep=self.verify)
        examples = (self._example(shard, sample) for sample in read_shard(path))
        batches = (_collate(shard["path"], chunk, self.decode_into, self.field) for chunk in _chunks(examples, rows))
        yield from self._keeping(shard, batches) if self.decoded is not None else batches

    def _guarded(self, shard: dict, rows: int) -> Iterator[dict]:
        """A shard's chunks of ``rows``, ending in an error chunk where it is missing, corrupt or unreadable."""
        try:
            yield from self._batches(shard, rows)
        except BenchmarkError as exc:
            yield {"shard": shard["path"], "error": str(exc)}

    def _merged(self, shards: list[dict], reader: int, chunks: int) -> Iterator[dict]:
        """The rows of ``shards`` mixed row by row in the run's secret order (:func:`interleave.merged`; each split a
        lane), in ``chunks`` chunks; each shard is read ``READ_ROWS`` rows at a time."""
        opened = [
            (shard.get("split", ""), shard["num_samples"], lambda shard=shard: self._guarded(shard, READ_ROWS))
            for shard in shards
        ]
        return merged(opened, derived(self.order_seed, "reader", reader), self.batch_size, chunks)

    def read(self, reader: int, readers: int) -> Iterator[dict]:
        """The chunks of reader ``reader`` of ``readers``: its share of the groups (every ``readers``-th). Merged
        (with an ``order_seed``), every reader's rows go out in as many chunks as the largest share needs, so that
        readers read in turn (as a DataLoader's workers are) end together and each stretch of the pass holds their
        rows in proportion to their shares."""
        mine = self.groups[reader::readers]
        if self.order_seed is not None:
            rows = [sum(s["num_samples"] for group in self.groups[r::readers] for s in group) for r in range(readers)]
            chunks = max(-(-n // self.batch_size) for n in rows)
            yield from self._merged([shard for group in mine for shard in group], reader, chunks)
            return
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

    def __iter__(self) -> Iterator[dict]:
        worker = torch.utils.data.get_worker_info()
        return self.read(0, 1) if worker is None else self.read(worker.id, worker.num_workers)


def _joined(parts: list[dict]) -> dict:
    """One batch of the batches of several shards, in order."""
    batch = {
        "shard": parts[0]["shard"],
        "shards": [s for p in parts for s in p["shards"]],
        "keys": [k for p in parts for k in p["keys"]],
        "labels": joined([p["labels"] for p in parts]),
    }
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


class DecodeLane:
    """A GPU decoder's own CUDA stream, and the hand-over of its batches to the consumer's stream.

    ``torchvision.io.decode_jpeg(..., device="cuda")`` allocates its outputs on the calling thread's current stream and
    has nvJPEG write them on a stream of its own that waits for nothing of the caller's: memory freed on the host while
    kernels queued on the caller's stream still use it is handed out again at once by the caching allocator, and nvJPEG
    writes into it under those kernels (the forward pass of the previous batch, when both share a stream: NaN logits
    or, worse, finite garbage). So the decoder runs on a stream of its own on which nothing is queued when it starts a
    batch (:meth:`run` waits for it), and the consumer's stream waits for a batch's event and holds its tensor until
    its own queued work is done (:meth:`take`: ``record_stream``)."""

    def __init__(self, device: torch.device):
        self.stream = torch.cuda.Stream(device)

    def run(self, decode: Callable, *args) -> tuple[torch.Tensor, torch.cuda.Event]:
        """``decode(*args)`` on the lane's stream, and the event its batch is ready at."""
        with torch.cuda.stream(self.stream):
            self.stream.synchronize()  # no kernel of ours queued on memory nvJPEG may be given
            images = decode(*args)
            ready = torch.cuda.Event()
            ready.record(self.stream)
        return images, ready

    def take(self, images: torch.Tensor, ready: torch.cuda.Event) -> torch.Tensor:
        """``images`` for the consumer's current stream: its work waits for ``ready``; the memory is not reused
        before that work is done."""
        stream = torch.cuda.current_stream(images.device)
        stream.wait_event(ready)
        images.record_stream(stream)
        return images


def _decoded(batches: Iterator[dict], decode: Callable, lane) -> Iterator[dict]:
    """Decode batches of bytes here, on ``lane`` (a GPU decoder cannot run in the loader's worker processes); each
    batch's images come with the event they are ready at, under ``"ready"`` (see :func:`_taken`)."""
    for batch in batches:
        if "data" in batch:
            data = batch.pop("data")
            try:
                batch["images"], batch["ready"] = lane.run(decode, data, wheres(batch))
            except BenchmarkError as exc:
                batch = {"shard": batch["shard"], "error": str(exc)}
        yield batch
        if "error" in batch:
            return


def _taken(batches: Iterator[dict], lane) -> Iterator[dict]:
    """Batches decoded on ``lane``, handed to the consumer's stream (in the consumer's thread)."""
    for batch in batches:
        if "ready" in batch:
            batch["images"] = lane.take(batch["images"], batch.pop("ready"))
        yield batch


def prefetched(batches: Iterator[dict], depth: int = 2) -> Iterator[dict]:
    """``batches`` produced by a background thread, ``depth`` ahead: reading, decoding (Pillow and torchvision
    release the GIL) and the consumer's forward pass overlap. Stops the thread, and closes ``batches``, when the
    consumer stops early."""
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
        finally:
            getattr(batches, "close", lambda: None)()  # a loader's pass ends here, in the thread that read it

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


class _Passes(torch.utils.data.IterableDataset):
    """The dataset of persistent loader workers: at the start of each pass, each worker takes that pass's groups and
    labels from its own queue, and reads its share of them with its copy of ``stream``."""

    def __init__(self, stream: ShardStream, plans: list):
        super().__init__()
        self.stream, self.plans = stream, plans

    def __iter__(self) -> Iterator[dict]:
        plan = self.plans[torch.utils.data.get_worker_info().id].get()
        self.stream.groups, self.stream.label_of, self.stream.order_seed = plan
        return iter(self.stream)


@dataclass(frozen=True)
class Reading:
    """How a :class:`Loader` reads: rows per batch, worker processes (0: a background thread), whether each shard's
    sha256 is checked first, whether batches are pinned for a GPU."""

    batch_size: int = EvalConfig.batch_size
    workers: int = 2
    verify: bool = EvalConfig.verify
    pin_memory: bool = False


class Loader:
    """The reading side of a run (see :class:`ShardStream`): one pass after another over groups of shards, read in
    ``workers`` processes (0: in a background thread of this one) and decoded by ``decoder``
    (:mod:`harness.runtime.decoding`): in the workers on the CPU, here on a GPU (on its own stream:
    :class:`DecodeLane`); through the ``decoded`` image cache when given and the decoder decodes on the CPU. The worker
    processes start with
    the first pass and live across passes; a pass that stops early (an error, a consumer that stops) shuts them down,
    so the next pass starts clean, and :meth:`close` ends them. A decoder's uint8 pixels are normalised here, in the
    consumer's thread: the reading thread or workers run no multi-threaded torch op beside the model's, and carry a
    quarter of the bytes."""

    def __init__(
        self,
        benchmark: Benchmark,
        decoder,
        reading: Reading = Reading(),
        decoded: DecodedCache | None = None,
        lane=None,
    ):
        self.decoder, self.workers, self.pin_memory = decoder, max(0, reading.workers), reading.pin_memory
        self.in_stream = decoder.device.type == "cpu"
        decoded = decoded if self.in_stream and hasattr(decoder, "pixels") else None
        stream_decoder = decoder if self.in_stream else None
        self.stream = ShardStream(benchmark, [], stream_decoder, {}, reading.batch_size, reading.verify, decoded)
        self.lane = lane if lane is not None or self.in_stream else DecodeLane(decoder.device)
        self._loader, self._plans = None, []

    def batches(
        self, groups: list[list[dict]], label_of: dict[str, int], order_seed: int | None = None
    ) -> Iterator[dict]:
        """The batches of one pass over ``groups`` (see :class:`ShardStream`); close the iterator to stop early. With
        an ``order_seed``, each reader's shards are mixed row by row in the run's secret order (chunks of rows of many
        shards, which :class:`harness.runtime.interleave.Mixer` mixes into batches)."""
        if not groups:
            return (batch for batch in ())  # a generator: the caller may close it
        mixed = Mixer(self.stream.batch_size, order_seed).batches if order_seed is not None else iter
        if self.workers:
            batches = self._loaded(groups, label_of, order_seed)
            batches = (
                batches if self.in_stream else _taken(prefetched(_decoded(batches, self.decoder, self.lane)), self.lane)
            )
            batches = mixed(batches)
        else:
            self.stream.groups, self.stream.label_of, self.stream.order_seed = groups, label_of, order_seed
            if self.in_stream:  # mixed in the reading thread, beside the model's pass
                batches = mixed(iter(self.stream))
                batches = prefetched(_pinned(batches) if self.pin_memory else batches)
            else:
                batches = mixed(_taken(prefetched(_decoded(iter(self.stream), self.decoder, self.lane)), self.lane))
        return _normalized(batches, self.decoder) if self.stream.field == "pixels" else batches

    def _loaded(self, groups: list[list[dict]], label_of: dict[str, int], order_seed: int | None) -> Iterator[dict]:
        """One pass of the persistent worker processes (started on the first pass)."""
        if self._loader is None:
            context = torch.multiprocessing.get_context()
            self._plans = [context.SimpleQueue() for _ in range(self.workers)]
            self._loader = torch.utils.data.DataLoader(
                _Passes(self.stream, self._plans),
                batch_size=None,
                num_workers=self.workers,
                pin_memory=self.pin_memory,
                persistent_workers=True,
                multiprocessing_context=context,
            )
        for plan in self._plans:
            plan.put((groups, label_of, order_seed))
        whole = False
        try:
            yield from iter(self._loader)
            whole = True
        finally:
            if not whole:
                self.close()

    def close(self) -> None:
        """End the worker processes (the next pass starts new ones): a DataLoader ends its persistent workers when it
        is collected, which the collection here makes happen now."""
        plans, self._loader, self._plans = self._plans, None, []
        gc.collect()
        for plan in plans:
            plan.close()


def shard_batches(
    benchmark: Benchmark,
    groups: list[list[dict]],
    decoder,
    label_of: dict[str, int],
    reading: Reading = Reading(),
    decoded: DecodedCache | None = None,
) -> Iterator[dict]:
    """One pass of a :class:`Loader` of its own over ``groups``; its workers end with the pass."""
    loader = Loader(benchmark, decoder, replace(reading, workers=min(reading.workers, len(groups))), decoded)
    try:
        yield from loader.batches(groups, label_of)
    finally:
        loader.close()


def _normalized(batches: Iterator[dict], decoder) -> Iterator[dict]:
    for batch in batches:
        yield batch | {"images": decoder.normalize(batch.pop("pixels"))} if "pixels" in batch else batch


def _pinned(batches: Iterator[dict]) -> Iterator[dict]:
    for batch in batches:
        field = next((f for f in ("pixels", "images") if f in batch), None)
        yield batch | {field: batch[field].pin_memory()} if field else batch
