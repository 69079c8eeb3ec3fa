"""The secret order a run streams its images in: every evaluation split's rows through the model in one random
interleaving, so that a batch's position, its size and its neighbours say nothing of which rows are ID and which OOD.

The order comes from a per-run seed drawn from the operating system (:func:`new_order_seed`) and written into the
records once the run is done; a rerun given that seed streams the same batches. Three steps, each seeded by it:

1. the shards of all the splits in a random order (:func:`secret_order`);
2. a few of them open at once, their chunks drawn in proportion to the rows each has left
   (:func:`merged`: a large shard is spread over the whole pass, not read in one stretch);
3. a mixing buffer of several batches' rows, from which each batch is drawn at random (:class:`Mixer`); only the
   last batch of the pass is short.

Written by hand: the shuffles of webdataset and torch shuffle one stream's samples, not several splits' shards with
the row bookkeeping the score cache needs.
"""

from __future__ import annotations

import hashlib
import random
import secrets
from collections.abc import Callable, Iterator

import torch

OPEN_SHARDS = 8  # shards read at once by each reader
MIXED_BATCHES = 8  # batches' worth of rows the mixing buffer holds before it draws a batch


def new_order_seed() -> int:
    """A fresh order seed from the operating system's randomness."""
    return secrets.randbits(63)


def derived(order_seed: int, *parts) -> int:
    """A 63-bit seed derived from ``order_seed`` and ``parts`` (a reader's, a batch's)."""
    text = "/".join(str(p) for p in (order_seed, *parts))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF


def secret_order(shards: list, order_seed: int) -> list:
    """``shards`` (of every split alike) in the run's random order."""
    order = list(shards)
    random.Random(derived(order_seed, "shards")).shuffle(order)
    return order


def merged(opened: list[tuple[int, Callable[[], Iterator[dict]]]], seed: int) -> Iterator[dict]:
    """The chunks of several shards, ``OPEN_SHARDS`` of them open at once, each next chunk taken from an open shard
    drawn in proportion to the rows it has left. ``opened``: per shard, its number of rows and a function that opens
    its stream of chunks (dicts with ``"keys"``; an ``"error"`` chunk ends the whole stream)."""
    rng = random.Random(seed)
    waiting = list(reversed(opened))
    live: list[list] = []  # [rows left, chunks]
    while waiting or live:
        while waiting and len(live) < OPEN_SHARDS:
            rows, start = waiting.pop()
            live.append([rows, start()])
        pick = rng.choices(range(len(live)), weights=[max(rows, 1) for rows, _ in live])[0]
        chunk = next(live[pick][1], None)
        if chunk is None:
            live.pop(pick)
            continue
        yield chunk
        if "error" in chunk:
            return
        live[pick][0] -= len(chunk["keys"])


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
            "labels": gathered(rows, "labels"),
            field: gathered(rows, field),
            "rows": [chunk["shard"] for chunk, _ in rows],
        }


def gathered(rows: list[tuple[dict, int]], name: str) -> torch.Tensor:
    """The tensor ``name`` of ``rows`` (each a chunk and a row of it), in their order: one index per chunk, not one
    per row."""
    by_chunk: dict[int, tuple[dict, list[int], list[int]]] = {}
    for at, (chunk, i) in enumerate(rows):
        _, picked, places = by_chunk.setdefault(id(chunk), (chunk, [], []))
        picked.append(i)
        places.append(at)
    parts = [chunk[name][torch.tensor(picked)] for chunk, picked, _ in by_chunk.values()]
    places = torch.tensor([at for _, _, ats in by_chunk.values() for at in ats], device=parts[0].device)
    out = torch.empty((len(rows), *parts[0].shape[1:]), dtype=parts[0].dtype, device=parts[0].device)
    out[places] = torch.cat(parts)
    return out
