"""The check that a model answers each image on its own: after the passes, a secret random sample of the images it
answered is asked again, in fresh random batches of other sizes and other positions, and the logits must agree with
the first answers within the tolerance of the run's device and dtype.

A model whose answer to an image depends on the other images of its batch (their mean confidence, say, which differs
between mostly-ID and mostly-OOD batches) or on what it saw before disagrees with itself here, and the run fails with
one line before any record is written.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np
import torch

from harness.errors import HarnessError
from harness.method.scores import SplitScores
from harness.runtime.execution import Execution
from harness.runtime.interleave import derived

MIN_IMAGES, SHARE, MAX_IMAGES = 256, 0.01, 1024  # re-asked: 1% of the pass, at least 256, at most 1,024
# the largest difference allowed between two answers to an image, relative to the largest first logit (at least 1):
# float32 on the CPU sums in another order for another batch size (1e-6 seen); CUDA float32 may use TF32 matrix
# products; half-precision autocast rounds every layer to 8 (bfloat16) or 11 (float16) bits
TOLERANCES = {"cpu": 1e-4, "cuda": 1e-3, "autocast": 5e-2}


def tolerance(execution: Execution) -> float:
    """The tolerance of a run's device and dtype."""
    if execution.amp not in ("none", None):
        return TOLERANCES["autocast"]
    return TOLERANCES["cuda" if execution.device.type == "cuda" else "cpu"]


def sample_size(total: int) -> int:
    """How many of a pass's ``total`` images are re-asked."""
    return min(total, MAX_IMAGES, max(MIN_IMAGES, math.ceil(total * SHARE)))


class Asked:
    """The forward pass the re-check asks: for a sandboxed file, the file loaded anew in a sandbox of its own
    (:meth:`ChildForward.fresh`), loading in a thread from :meth:`start` on (called once the pass's loader workers are
    forked: a fork while that thread runs could copy a lock it holds), so that its loading overlaps the pass; else
    ``forward`` itself (a library model or the caller's own, in this process)."""

    def __init__(self, forward):
        self.forward, self.pool, self.loading = forward, None, None

    def start(self) -> None:
        if hasattr(self.forward, "fresh") and self.pool is None:
            self.pool = ThreadPoolExecutor(1, thread_name_prefix="cood-fresh")
            self.loading = self.pool.submit(self.forward.fresh)

    def get(self):
        if not hasattr(self.forward, "fresh"):
            return self.forward
        self.start()
        return self.loading.result()

    def close(self) -> None:
        """Wait for a fresh sandbox still loading, and end it."""
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            if self.loading.exception() is None:
                self.loading.result().close()


@contextmanager
def asked(forward) -> Iterator[Asked]:
    """:class:`Asked` for ``forward``, its fresh sandbox ended on leaving."""
    answering = Asked(forward)
    try:
        yield answering
    finally:
        answering.close()


def _logits(forward, images: torch.Tensor, seed: int) -> np.ndarray:
    """The model's logits of ``images``, the batch halved on the device's out-of-memory as the pass halves it."""
    try:
        return np.asarray(forward(images, seed, []).logits, dtype=np.float64)
    except torch.cuda.OutOfMemoryError:
        if len(images) == 1:
            raise
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    half = len(images) // 2
    return np.concatenate([_logits(forward, images[:half], seed), _logits(forward, images[half:], derived(seed, 1))])


class Recheck:
    """Keeps the images and first logits of a secret sample of a pass's rows (:meth:`kept`, :meth:`answered`), then
    re-asks them (:meth:`run`)."""

    def __init__(self, total: int, batch_size: int, seed: int, tol: float):
        self.rng = random.Random(derived(seed, "recheck"))
        self.chosen = set(self.rng.sample(range(total), sample_size(total)))
        self.batch_size, self.seed, self.tol, self.seen = batch_size, seed, tol, 0
        self.images: list[torch.Tensor] = []
        self.first: list[np.ndarray] = []

    def kept(self, batches: Iterator[dict]) -> Iterator[dict]:
        """``batches``, the images of the sampled rows copied aside as they pass (``"recheck"``: their rows)."""
        for batch in batches:
            if "error" not in batch:
                rows = [i for i in range(len(batch["keys"])) if self.seen + i in self.chosen]
                self.seen += len(batch["keys"])
                if rows:
                    batch["recheck"] = rows
                    self.images.append(batch["images"][rows].to("cpu", copy=True))
            yield batch

    def answered(self, batch: dict, scored: SplitScores) -> None:
        """Keep the first logits of a batch's sampled rows."""
        if "recheck" in batch:
            self.first.append(np.asarray(scored.logits[batch["recheck"]], dtype=np.float64))

    def _sizes(self, count: int) -> list[int]:
        """Fresh batch sizes for ``count`` images: one image alone, then sizes other than the pass's batch size."""
        low, high = max(2, self.batch_size // 4), max(2, self.batch_size - 1)
        sizes = [1]
        while sum(sizes) < count:
            size = self.rng.randint(low, high)
            sizes.append(size + 1 if size == self.batch_size else size)
        return sizes

    def run(self, forward, device: torch.device) -> dict:
        """Re-ask the sampled images and compare; what the record says of the check. A disagreement is one line."""
        if not self.images:
            return {"recheck_images": 0}
        start = time.perf_counter()
        images, first = torch.cat(self.images), np.concatenate(self.first)
        order = list(range(len(first)))
        self.rng.shuffle(order)
        again = np.empty_like(first)
        batches, at = 0, 0
        for size in self._sizes(len(order)):
            rows = order[at : at + size]
            at += len(rows)
            if not rows:
                break
            again[rows] = _logits(forward, images[rows].to(device), derived(self.seed, "recheck", batches))
            batches += 1
        scale = max(1.0, float(np.abs(first).max()))
        worst = np.abs(again - first).max(axis=1)
        differ = int(np.sum(worst > self.tol * scale))
        if differ:
            raise HarnessError(
                f"the model answered {differ} of {len(first)} images it was asked again, in batches of other sizes and "
                f"positions, otherwise than the first time (largest difference {worst.max():.3g}, allowed "
                f"{self.tol * scale:.3g}): an answer may depend on its image alone, not on the images beside it or "
                "on what came before; nothing is written"
            )
        return {
            "recheck_images": len(first),
            "recheck_batches": batches,
            "recheck_max_difference": float(worst.max()),
            "recheck_tolerance": self.tol * scale,
            "recheck_s": round(time.perf_counter() - start, 3),
            "recheck_process": "a fresh sandbox" if hasattr(forward, "fresh") else "the same process",
        }
