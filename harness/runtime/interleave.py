"""The secret order a run streams its images in: every evaluation split's rows through the model in one random
interleaving, so that a batch's position, its size and its neighbours say nothing of which rows are ID and which OOD.

The order comes from a per-run seed drawn from the operating system (:func:`new_order_seed`) and written into the
records once the run is done; a rerun given that seed streams the same batches. Three steps, each seeded by it:

1. the shards of all the splits in a random order (:func:`secret_order`);
2. each reader mixes its shards row by row (:func:`merged`): every next row comes from a split drawn in proportion to
   the rows that split has left in the reader (so the splits' rows are spread evenly over the whole pass, whatever
   their shards' sizes), then from one of that split's open shards (a few, or up to ``MAX_OPEN`` small ones, opened
   in the secret order) drawn in proportion to the rows it has left; the rows go out in chunks of rows of many
   shards;
3. a mixing buffer of several batches' rows, from which each batch is drawn at random (:class:`Mixer`); only the
   last batch of the pass is short.

A batch's ID share is then distributed as that of a random draw of the pass's rows (``benchmarks/batch_share.py``
measures it). Written by hand: the shuffles of webdataset and torch shuffle one stream's samples, not several splits'
shards with the row bookkeeping the score cache needs.
"""

from __future__ import annotations

import hashlib
import random
import secrets
from collections.abc import Callable, Iterable, Iterator

import numpy as np
import torch

OPEN_SHARDS = 4  # shards of one split each reader keeps open, at least
OPEN_ROWS = 4096  # rows left in the open shards of one split, beyond OPEN_SHARDS of them, it opens more shards to reach
MAX_OPEN = 64  # shards of one split open at once in a reader, at most
READ_ROWS = 16  # rows an open shard is read (and decoded) at a time: a reader holds one such chunk per open shard
MIXED_BATCHES = 8  # batches' worth of rows the mixing buffer holds before it draws a batch


def new_order_seed() -> int:
    """A fresh order seed from the operating system's randomness."""
    return secrets.randbits(63)


def derived(order_seed: int, *parts) -> int:
    """A 63-bit seed derived from ``order_seed`` and ``parts`` (a reader's, a batch's)."""
    text = "/".join(str(p) for p in (order_seed, *parts))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF


def row_seeds(order_seed: int, keys) -> np.ndarray:
    """Each row's seed for the seeded kappas (MC-dropout's masks), from the run's secret order seed and the row's key
    alone: the same in any batch, the pass's and the re-check's, and nothing the child can tell a row by."""
    return np.array([derived(order_seed, "row", key) for key in keys], dtype=np.int64)


def secret_order(shards: list, order_seed: int) -> list:
    """``shards`` (of every split alike) in the run's random order."""
    order = list(shards)
    random.Random(derived(order_seed, "shards")).shuffle(order)
    return order


class _Lane:
    """One split's shards in a reader: those waiting to be opened (in the secret order) and those open, each open one
    as ``[rows left, its chunks, its chunk being read, the next row of that chunk]``; ``weight``: the rows left of
    them all, ``open_weight``: those of the open ones (a shard counts at least 1 until its chunks end)."""

    def __init__(self):
        self.waiting: list[tuple[int, Callable[[], Iterator[dict]]]] = []
        self.live: list[list] = []
        self.weight = self.open_weight = 0

    def opened(self) -> None:
        """Open waiting shards until ``OPEN_SHARDS`` are open and their rows left reach ``OPEN_ROWS``, or
        ``MAX_OPEN`` are open (or none waits): small per-class shards many at once, so that a batch holds few rows of
        one class."""
        while self.waiting and (
            len(self.live) < OPEN_SHARDS or (len(self.live) < MAX_OPEN and self.open_weight < OPEN_ROWS)
        ):
            rows, start = self.waiting.pop()
            self.live.append([rows, start(), None, 0])
            self.open_weight += max(rows, 1)

    def pick(self, rng: random.Random) -> int:
        """Open shards as :meth:`opened` says, then draw one of the open ones in proportion to the rows it has left."""
        self.opened()
        at = rng.randrange(self.open_weight)
        pick = 0
        while at >= max(self.live[pick][0], 1):
            at -= max(self.live[pick][0], 1)
            pick += 1
        return pick


def _lanes(opened: list[tuple[str, int, Callable[[], Iterator[dict]]]]) -> list[_Lane]:
    """The lanes of ``opened``'s shards (see :func:`merged`), each with its shards waiting in ``opened``'s order."""
    by_name: dict[str, _Lane] = {}
    for name, rows, start in opened:
        lane = by_name.setdefault(name, _Lane())
        lane.waiting.append((rows, start))
        lane.weight += max(rows, 1)
    for lane in by_name.values():
        lane.waiting.reverse()  # popped from the end: in ``opened``'s order
    return list(by_name.values())


def merged(
    opened: list[tuple[str, int, Callable[[], Iterator[dict]]]], seed: int, chunk_rows: int, chunks: int | None = None
) -> Iterator[dict]:
    """The rows of several shards mixed row by row, in chunks of rows of many shards (see :func:`rows_chunk`).
    ``opened``: per shard, its lane (its split), its number of rows and a function that opens its stream of chunks
    (dicts with ``"shard"``, ``"keys"`` and their rows' tensors or ``"data"``; an ``"error"`` chunk ends the whole
    stream). Each next row comes from a lane drawn in proportion to the rows it has left, open shards and waiting ones,
    then from one of the lane's open shards drawn in proportion to the rows it has left: a lane's rows are spread
    evenly over the whole stream however large its shards. A lane's shards are opened in ``opened``'s order as others
    end, at least ``OPEN_SHARDS`` open, more while they have fewer than ``OPEN_ROWS`` rows left, at most ``MAX_OPEN``
    (so at most ``MAX_OPEN`` times the lanes, each holding one chunk). The rows go out in ``chunks`` chunks of sizes
    as equal as may be (default: as few as hold at most ``chunk_rows`` rows each); rows beyond those the shards said
    they hold go out ``chunk_rows`` at a time."""
    rng = random.Random(seed)
    lanes = _lanes(opened)
    total = sum(lane.weight for lane in lanes)
    sizes = _sizes(sum(rows for _, rows, _ in opened), chunk_rows, chunks)
    taken: list[tuple[dict, int]] = []
    size = next(sizes)
    while lanes:
        at = rng.randrange(total)
        for lane in lanes:
            if at < lane.weight:
                break
            at -= lane.weight
        pick = lane.pick(rng)
        shard = lane.live[pick]
        if shard[2] is None or shard[3] == len(shard[2]["keys"]):
            chunk = next(shard[1], None)
            if chunk is None:  # the shard has ended: the row is drawn again among the others
                weight = max(shard[0], 1)
                del lane.live[pick]
                lane.weight, lane.open_weight, total = lane.weight - weight, lane.open_weight - weight, total - weight
                if not lane.live and not lane.waiting:
                    lanes.remove(lane)
                continue
            if "error" in chunk:
                yield chunk
                return
            shard[2], shard[3] = chunk, 0
            continue  # an empty chunk is passed over at the next draw
        taken.append((shard[2], shard[3]))
        shard[3] += 1
        if shard[0] > 1:
            lane.weight, lane.open_weight, total = lane.weight - 1, lane.open_weight - 1, total - 1
        shard[0] -= 1
        if len(taken) == size:
            yield rows_chunk(taken)
            taken, size = [], next(sizes)
    if taken:
        yield rows_chunk(taken)


def _sizes(rows: int, chunk_rows: int, chunks: int | None) -> Iterator[int]:
    """The sizes of the chunks ``rows`` rows go out in (see :func:`merged`), none empty."""
    count = chunks if chunks is not None else -(-rows // chunk_rows)
    for i in range(count):
        if (size := (i + 1) * rows // count - i * rows // count) > 0:
            yield size
    while True:
        yield chunk_rows


def row_shard(chunk: dict, i: int) -> str:
    """The shard of a chunk's row ``i``."""
    return chunk["rows"][i] if "rows" in chunk else chunk["shard"]


def rows_chunk(rows: list[tuple[dict, int]]) -> dict:
    """One chunk of ``rows`` (each a chunk and a row of it), in their order: their keys, their tensors, their images'
    bytes (``"data"``) where they have them, each row's shard under ``"rows"``, and under ``"shards"`` the runs of
    rows of one shard (path, rows) as a shard's chunks have them."""
    first = rows[0][0]
    paths = [row_shard(chunk, i) for chunk, i in rows]
    runs: list[list] = []
    for path in paths:
        if runs and runs[-1][0] == path:
            runs[-1][1] += 1
        else:
            runs.append([path, 1])
    out = {"shard": paths[0], "shards": [tuple(run) for run in runs], "keys": [c["keys"][i] for c, i in rows]}
    out |= gathered(rows, [name for name in ("labels", "pixels", "images") if name in first])
    if "data" in first:
        out["data"] = [chunk["data"][i] for chunk, i in rows]
    return out | {"rows": paths}


class Mixer:
    """Batches drawn at random from a buffer of chunks' rows: each batch of ``batch_size`` rows is drawn once the
    buffer holds ``MIXED_BATCHES`` batches' worth (or the chunks have run out). A batch carries its rows' keys,
    labels, images (``"pixels"`` or ``"images"``, as the chunks do) and, under ``"rows"``, each row's shard path (the
    keys stay in this process)."""

    def __init__(self, batch_size: int, seed: int):
        self.batch_size, self.rng = batch_size, random.Random(derived(seed, "mixer"))

    def batches(self, chunks: Iterator[dict]) -> Iterator[dict]:
        """The batches of ``chunks`` (closed when the batches are)."""
        buffer: list[tuple[dict, int]] = []
        try:
            for chunk in chunks:
                if "error" in chunk:
                    yield chunk
                    return
                buffer += [(chunk, i) for i in range(len(chunk["keys"]))]
                while len(buffer) >= self.batch_size * MIXED_BATCHES:
                    yield self._draw(buffer)
        finally:
            getattr(chunks, "close", lambda: None)()
        self.rng.shuffle(buffer)
        while buffer:
            yield self._draw(buffer)

    def _draw(self, buffer: list) -> dict:
        """One batch of rows drawn from ``buffer`` (taken out of it)."""
        size = min(self.batch_size, len(buffer))
        for i in range(size):  # a partial Fisher-Yates shuffle: the batch's rows end up at the buffer's end
            j = self.rng.randrange(len(buffer) - i)
            buffer[j], buffer[-1 - i] = buffer[-1 - i], buffer[j]
        rows = buffer[-size:]
        del buffer[-size:]
        field = "pixels" if "pixels" in rows[0][0] else "images"
        return {
            "keys": [chunk["keys"][i] for chunk, i in rows],
            **gathered(rows, ("labels", field)),
            "rows": [row_shard(chunk, i) for chunk, i in rows],
        }


def gathered(rows: list[tuple[dict, int]], names: Iterable[str]) -> dict[str, torch.Tensor]:
    """The tensors ``names`` of ``rows`` (each a chunk and a row of it), in their order: one index per chunk, not one
    per row, then one to put the rows in order."""
    by_chunk: dict[int, tuple[dict, list[int], list[int]]] = {}
    for at, (chunk, i) in enumerate(rows):
        entry = by_chunk.get(id(chunk))
        if entry is None:
            entry = by_chunk[id(chunk)] = (chunk, [], [])
        entry[1].append(i)
        entry[2].append(at)
    places = np.fromiter((at for _, _, ats in by_chunk.values() for at in ats), np.int64, len(rows))
    order = np.empty_like(places)
    order[places] = np.arange(len(rows))
    return {name: _gathered([(chunk[name], picked) for chunk, picked, _ in by_chunk.values()], order) for name in names}


def _gathered(parts: list[tuple[torch.Tensor, list[int]]], order: np.ndarray) -> torch.Tensor:
    """The rows ``picked`` of each tensor of ``parts``, one after the other, then taken in ``order`` (torch's
    ``index_select``, which lets go of the GIL while it copies: the harness's other thread feeds the model)."""
    device = parts[0][0].device
    taken = [tensor.index_select(0, torch.tensor(picked, device=device)) for tensor, picked in parts]
    return torch.cat(taken).index_select(0, torch.from_numpy(order).to(device))
