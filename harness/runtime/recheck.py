"""The check that a model answers each image on its own: after the pass, a secret random sample of the evaluation rows
(rows the pass scored, and rows of shards the score cache served) is asked again, in fresh random batches, by the file
loaded anew in a sandbox of its own once the run's sandbox has ended; everything the scores depend on must agree with
the first answers: the logits, the features, and every kappa's values, those computed in the model's process (the
file's own, ``odin``, pytorch-ood's gradient detectors) and those computed here from the logits and features.

A model whose answer to an image depends on the other images of its batch (their mean confidence, say, which differs
between mostly-ID and mostly-OOD batches), on what it saw before, or on another process still alive disagrees with
itself here, and the run fails with one line before any record is written (and its score cache entries are dropped).

The tolerance (:class:`Tolerance`) is fixed per device and dtype and the model cannot move it: per compared column, an
absolute part plus a relative part of the column's spread over the sampled images (its interquartile range and each
value's distance from its median: a common offset, added to every output, moves neither), plus a few units in the last
place of the dtype the values were stored in. A kappa whose values a model would inflate to widen its logits'
tolerance is itself compared on its own spread.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from harness.errors import HarnessError
from harness.method.scores import SplitScores
from harness.runtime.execution import Execution
from harness.runtime.inference import KappaSpec, score_batch_adaptive
from harness.runtime.interleave import derived

MIN_IMAGES, SHARE, MAX_IMAGES = 256, 0.01, 1024  # re-asked: 1% of the rows, at least 256, at most 1,024
STORED_ULPS = 4  # units in the last place of the stored dtype that two honest answers may differ by


@dataclass(frozen=True)
class Tolerance:
    """How far two answers to an image may differ, per value: ``absolute`` + ``relative`` x (the column's
    interquartile range over the sample + the value's distance from the column's median) + ``STORED_ULPS`` units in
    the last place of the dtype the value was stored in."""

    name: str
    absolute: float
    relative: float

    def allowed(self, first: np.ndarray, stored: np.dtype) -> np.ndarray:
        """The allowed difference of each value of ``first`` (rows by columns, or rows)."""
        low, middle, high = np.percentile(first, [25, 50, 75], axis=0)
        spread = (high - low) + np.abs(first - middle)
        return self.absolute + self.relative * spread + STORED_ULPS * np.finfo(stored).eps * np.abs(first)

    def record(self) -> dict:
        return {"device": self.name, "absolute": self.absolute, "relative_to_spread": self.relative}


# float32 on the CPU sums in another order for another batch size (1e-6 seen); CUDA float32 may use TF32 matrix
# products (10-bit mantissas); half-precision autocast rounds every layer to 8 (bfloat16) or 11 (float16) bits
TOLERANCES = {
    "cpu": Tolerance("cpu float32", 1e-5, 1e-4),
    "cuda": Tolerance("cuda float32", 1e-4, 2e-3),
    "autocast": Tolerance("autocast", 1e-3, 5e-2),
}


def tolerance(execution: Execution) -> Tolerance:
    """The tolerance of a run's device and dtype."""
    if execution.amp not in ("none", None):
        return TOLERANCES["autocast"]
    return TOLERANCES["cuda" if execution.device.type == "cuda" else "cpu"]


def sample_size(total: int) -> int:
    """How many of ``total`` evaluation rows are re-asked."""
    return min(total, MAX_IMAGES, max(MIN_IMAGES, math.ceil(total * SHARE)))


class Asked:
    """The forward pass the re-check asks (:meth:`get`): for a sandboxed file, the file loaded anew in a sandbox of its
    own (:meth:`ChildForward.fresh`) after the run's sandbox has ended with its every process, so that nothing of the
    run's is alive beside it, handed the fitted state of the kappas computed there; else ``forward`` itself (a
    library model or the caller's own, in this process)."""

    def __init__(self, forward):
        self.forward, self.fresh = forward, None

    def get(self, kappas: list[KappaSpec]):
        if not hasattr(self.forward, "fresh"):
            return self.forward
        self.forward.close()
        self.fresh = self.forward.fresh()
        self.fresh.load_states([k for k in kappas if k.in_model and k.needs_fit])
        return self.fresh

    def close(self) -> None:
        if self.fresh is not None:
            self.fresh.close()


@contextmanager
def asked(forward) -> Iterator[Asked]:
    """:class:`Asked` for ``forward``, its fresh sandbox ended on leaving."""
    answering = Asked(forward)
    try:
        yield answering
    finally:
        answering.close()


@dataclass
class Kept:
    """Sampled rows' images, labels and seeds, with the first answers they were given."""

    images: torch.Tensor
    labels: torch.Tensor
    seeds: np.ndarray
    first: SplitScores


class Recheck:
    """Draws a secret sample of a pass's rows and of rows the score cache served (:meth:`choose`), keeps their images
    and first answers as they pass (:meth:`kept`, :meth:`answered`, :meth:`add`), then re-asks them (:meth:`run`)."""

    def __init__(self, batch_size: int, seed: int, tol: Tolerance, kappas: list[KappaSpec], feature_dtype: str):
        self.rng = random.Random(derived(seed, "recheck"))
        self.batch_size, self.tol, self.feature_dtype = batch_size, tol, feature_dtype
        self.kappas = kappas
        self.chosen: set[int] = set()
        self.seen = 0
        self.parts: list[Kept] = []

    def choose(self, passed: int, served: int) -> int:
        """Sample the rows to re-ask among ``passed`` rows of the pass and ``served`` rows from the score cache, in
        proportion; the number of served rows to add (:meth:`add`)."""
        total = passed + served
        count = sample_size(total) if total else 0
        from_pass = round(count * passed / total) if total else 0
        self.chosen = set(self.rng.sample(range(passed), from_pass))
        return count - from_pass

    def kept(self, batches: Iterator[dict]) -> Iterator[dict]:
        """``batches``, the images of the sampled rows copied aside as they pass (``"recheck"``: their rows)."""
        for batch in batches:
            if "error" not in batch:
                rows = [i for i in range(len(batch["keys"])) if self.seen + i in self.chosen]
                self.seen += len(batch["keys"])
                if rows:
                    batch["recheck"] = rows
            yield batch

    def answered(self, batch: dict, scored: SplitScores) -> None:
        """Keep the images and first answers of a batch's sampled rows."""
        if "recheck" in batch:
            rows = batch["recheck"]
            self.add(batch["images"][rows], batch["labels"][rows], batch["seeds"][rows], scored.take(np.asarray(rows)))

    def add(self, images: torch.Tensor, labels: torch.Tensor, seeds: np.ndarray, first: SplitScores) -> None:
        """Rows to re-ask, with their seeds and first answers (the pass's, or the score cache's)."""
        self.parts.append(Kept(images.to("cpu", copy=True), labels.to("cpu", copy=True), np.array(seeds), first))

    def pick(self, rows: int, count: int) -> list[int]:
        """``count`` of ``rows`` served rows, drawn by the re-check's secret generator."""
        return sorted(self.rng.sample(range(rows), min(count, rows)))

    def run(self, forward, num_classes: int) -> dict:
        """Re-ask the sampled images and compare every value; what the record says of the check. A disagreement is
        one line."""
        if not self.parts:
            return {"recheck_images": 0}
        again, batches = self._again(forward, num_classes)
        compared, worst, differ = [], 0.0, {}
        for name, first, second, stored in self._pairs(again):
            excess = np.abs(second - first) / self.tol.allowed(first, stored)
            rows = excess.max(axis=1) if excess.ndim == 2 else excess
            compared.append(name)
            worst = max(worst, float(rows.max()))
            for key in self._keys_of(name)[rows > 1].tolist():
                differ.setdefault(key, name)
        count = sum(len(part.first) for part in self.parts)
        if differ:
            what = ", ".join(dict.fromkeys(differ.values()))
            raise HarnessError(
                f"the model answered {len(differ)} of {count} images it was asked again, in other batches by the file "
                f"loaded anew, otherwise than the first time ({what} beyond the {self.tol.name} tolerance, up to "
                f"{worst:.3g} times it): an answer may depend on its image alone, not on the images beside it or on "
                "what came before; nothing is written"
            )
        return {
            "recheck_images": count,
            "recheck_batches": batches,
            "recheck_compared": compared,
            "recheck_worst_share": round(worst, 6),
            "recheck_tolerance": self.tol.record(),
            "recheck_process": "a fresh sandbox" if hasattr(forward, "sandbox") else "the same process",
        }

    def _again(self, forward, num_classes: int) -> tuple[SplitScores, int]:
        """Every sampled row asked again, in shuffled batches of the pass's size, sorted by key."""
        keys = np.concatenate([part.first.keys for part in self.parts])
        images = torch.cat([part.images for part in self.parts])
        labels = torch.cat([part.labels for part in self.parts])
        seeds = np.concatenate([part.seeds for part in self.parts])
        order = list(range(len(keys)))
        self.rng.shuffle(order)
        parts = []
        for at in range(0, len(order), self.batch_size):
            rows = order[at : at + self.batch_size]
            batch = {"keys": list(keys[rows]), "images": images[rows], "labels": labels[rows], "seeds": seeds[rows]}
            parts.append(score_batch_adaptive(forward, batch, num_classes, self.kappas, True, self.feature_dtype))
        return SplitScores.concat(parts), len(parts)

    def _keys_of(self, name: str) -> np.ndarray:
        return np.concatenate([part.first.keys for part in self.parts if _field(part.first, name) is not None])

    def _pairs(self, again: SplitScores) -> Iterator[tuple[str, np.ndarray, np.ndarray, np.dtype]]:
        """``(what, first answers, answers again, stored dtype)`` of every value the scores depend on that the first
        answers hold: logits, features, each kappa's ranking scores and reported values."""
        names = ["logits", "features"] + [f"{part} of kappa '{k.name}'" for k in self.kappas for part in PARTS]
        for name in names:
            firsts = [_field(part.first, name) for part in self.parts]
            if all(f is None for f in firsts):
                continue
            first = np.concatenate([f for f in firsts if f is not None]).astype(np.float64)
            rows = np.searchsorted(again.keys, self._keys_of(name))
            second = np.asarray(_field(again, name), dtype=np.float64)[rows]
            stored = np.dtype(self.feature_dtype if name == "features" else np.float32)
            yield name, first, second, stored


PARTS = ("scores", "values")


def _field(scores: SplitScores, name: str) -> np.ndarray | None:
    """A compared field of ``scores`` by its name in :meth:`Recheck._pairs`, or None where it is not held."""
    if name in ("logits", "features"):
        return getattr(scores, name)
    part, kappa = name.split(" of kappa ")
    held = scores.scores if part == "scores" else scores.confs
    return held.get(kappa.strip("'"))
