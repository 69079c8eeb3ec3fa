"""Every pair of many entries of one benchmark at once (docs/method.md, "Paired comparisons"). Pure numpy, no I/O.

:func:`pairwise` gives what :func:`paired.compare_entries` gives for each pair, for the values a board ranks by
(``mean``, ``id_acc``, ``id_auroc``, each level ``l0``, ``l1``, ...), as each entry's value and an ``n x n`` matrix
of paired standard errors: the estimate of a pair is the difference of the two values, its interval and p-value
follow from the standard error (:meth:`Pairwise.difference`). It computes each entry's influences once per value and
the covariances of all pairs as one matrix product (a board of ``n`` entries costs ``n`` AUROCs a value, not
``n^2 / 2`` comparisons); :func:`rank_ranges` turns the tests into the range of ranks each entry's data allow.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from harness.errors import HarnessError
from harness.method.intervals import CONFIDENCE, _z
from harness.method.paired import (
    ALPHA,
    METHOD,
    Auroc,
    Difference,
    _id_auroc,
    auroc_influence,
    entry_from_table,
    p_value,
    share_influence,
)

SUMMARY_KEYS = ("mean", "id_acc", "id_auroc")  # then the levels, ``l0``, ``l1``, ...


@dataclass(frozen=True)
class Pairwise:
    """Per value key, each entry's value (NaN where it has none: a level it lacks, an id-auroc with too few
    mistakes) and the paired standard error of each pair's difference (symmetric, NaN where either has no value)."""

    values: dict[str, np.ndarray]
    se: dict[str, np.ndarray]
    confidence: float = CONFIDENCE

    def difference(self, key: str, i: int, j: int) -> Difference | None:
        """Entry ``i`` minus entry ``j`` on ``key``, as :func:`paired.compare_entries` gives it (without the unpaired
        standard error and the shared count, which it does not compute); None where either has no value."""
        a, b, se = self.values[key][i], self.values[key][j], self.se[key][i, j]
        if not (np.isfinite(a) and np.isfinite(b)):
            return None
        estimate, half = float(a - b), _z(self.confidence) * float(se)
        return Difference(
            estimate=estimate,
            a=float(a),
            b=float(b),
            se=float(se),
            low=max(estimate - half, -1.0),
            high=min(estimate + half, 1.0),
            p_value=p_value(estimate, float(se)),
            unpaired_se=math.nan,
            shared=-1,
            floored=False,
            method=METHOD,
            confidence=self.confidence,
        )

    def different(self, key: str, i: int, j: int, alpha: float = ALPHA) -> bool:
        """The paired test of ``i`` against ``j`` on ``key`` rejects "no difference" at ``alpha``; False where
        either has no value."""
        found = self.difference(key, i, j)
        return found is not None and found.p_value < alpha


@dataclass
class _Side:
    """One entry's estimate for one key: its value, the mean influence of its AUROCs (or share), a digest of what it
    uses (images, roles, scores: equal digests are identical sides), a digest of the influences, and its count
    floors (of the AUROCs without variance, and of all), weighted as :func:`paired.difference` weighs them."""

    value: float
    influence: np.ndarray
    same: str
    same_influence: str
    floor_degenerate: float
    floor_all: float


class _Sides:
    """The :class:`_Side` of a mean of AUROCs, gathered one AUROC at a time, so a level's influences need not be
    kept for the mean (the sums run in the order :func:`paired.difference` sums them, to the same bits)."""

    def __init__(self):
        self.values, self.floors, self.degenerate = [], [], []
        self.influence, self.digest = None, hashlib.sha256()

    def add(self, auroc: Auroc) -> None:
        self.values.append(auroc.value)
        self.floors.append(auroc.floor)
        self.degenerate.append(auroc.degenerate)
        self.influence = auroc.influence if self.influence is None else self.influence + auroc.influence
        self.digest.update(auroc.signature.tobytes() + b"|")

    def side(self) -> _Side:
        count = len(self.values)
        weight, influence = 1.0 / count**2, self.influence / count
        return _Side(
            value=math.fsum(self.values) / count,
            influence=influence,
            same=self.digest.hexdigest(),
            same_influence=hashlib.sha256(influence.tobytes()).hexdigest(),
            floor_degenerate=math.fsum(weight * f for f, d in zip(self.floors, self.degenerate) if d),
            floor_all=math.fsum(weight * f for f in self.floors),
        )


def _side(auroc: Auroc) -> _Side:
    one = _Sides()
    one.add(auroc)
    return one.side()


def _standard_errors(sides: list[_Side | None], size: int) -> tuple[np.ndarray, np.ndarray]:
    """The values and the paired standard errors of all pairs, as :func:`paired.difference` computes each one: the
    sum of squared differences of influences (from the Gram matrix), plus both sides' floors; 0 for identical sides;
    the floors of all their AUROCs where that sum is 0 for sides that are not identical."""
    n = len(sides)
    rows = np.zeros((n, size))
    for i, s in enumerate(sides):
        if s is not None:
            rows[i] = s.influence
    norms = np.einsum("ij,ij->i", rows, rows)
    paired = np.maximum(norms[:, None] + norms[None, :] - 2.0 * (rows @ rows.T), 0.0)

    def column(attr, empty):
        return np.array([empty if s is None else getattr(s, attr) for s in sides])

    def equal(attr):  # pairs whose digests ``attr`` are equal
        codes = np.unique(column(attr, ""), return_inverse=True)[1]
        return codes[:, None] == codes[None, :]

    low, every = column("floor_degenerate", 0.0), column("floor_all", 0.0)
    variance = np.where(equal("same_influence"), 0.0, paired) + low[:, None] + low[None, :]
    variance = np.where(variance == 0.0, every[:, None] + every[None, :], variance)
    variance[equal("same")] = 0.0
    present = np.array([s is not None for s in sides])
    variance[~(present[:, None] & present[None, :])] = np.nan
    return column("value", np.nan).astype(np.float64), np.sqrt(variance)


def pairwise(tables: Sequence[Mapping], confidence: float = CONFIDENCE) -> Pairwise:
    """All pairs of the entries whose per-image score tables are ``tables`` (the per-image file's columns), on
    ``mean``, ``id_acc``, ``id_auroc`` and each level; images are matched by split and key. Each level's AUROCs are
    computed once and kept only while that level's products are formed."""
    entries = [entry_from_table(t, f"entry {i + 1}") for i, t in enumerate(tables)]
    if not entries:
        return Pairwise({}, {}, confidence)
    id_keys = np.unique(np.concatenate([e.id_keys for e in entries]))
    ood_keys = np.unique(np.concatenate([e.ood_keys for e in entries]))
    for i, e in enumerate(entries):
        if len(np.intersect1d(e.id_keys, entries[0].id_keys)) == 0:
            raise HarnessError(f"entry {i + 1} shares no ID test image with entry 1: they are not of one benchmark")
    size = len(id_keys) + len(ood_keys)
    id_at = [np.searchsorted(id_keys, e.id_keys) for e in entries]
    ood_at = [len(id_keys) + np.searchsorted(ood_keys, e.ood_keys) for e in entries]
    values, se = {}, {}
    means = [_Sides() for _ in entries]
    for level in range(max(len(e.level_rows) for e in entries)):
        sides = []
        for i, e in enumerate(entries):
            if level >= len(e.level_rows):
                sides.append(None)
                continue
            rows = e.level_rows[level]
            if len(rows) < 2 or len(e.id_scores) < 2:
                raise HarnessError(f"entry {i + 1}: level {level} needs at least 2 ID and 2 OOD test images")
            auroc = auroc_influence(id_at[i], e.id_scores, ood_at[i][rows], e.ood_scores[rows], size, confidence)
            means[i].add(auroc)
            sides.append(_side(auroc))
        values[f"l{level}"], se[f"l{level}"] = _standard_errors(sides, size)
    values["mean"], se["mean"] = _standard_errors([m.side() for m in means], size)
    shares = [_side(share_influence(at, e.correct, size, confidence)) for at, e in zip(id_at, entries)]
    values["id_acc"], se["id_acc"] = _standard_errors(shares, size)
    id_aurocs = [_id_auroc(e, at, size, f"entry {i + 1}", confidence) for i, (e, at) in enumerate(zip(entries, id_at))]
    id_sides = [None if isinstance(a, str) else _side(a) for a in id_aurocs]
    values["id_auroc"], se["id_auroc"] = _standard_errors(id_sides, size)
    order = [*SUMMARY_KEYS, *(k for k in values if k not in SUMMARY_KEYS)]
    return Pairwise({k: values[k] for k in order}, {k: se[k] for k in order}, confidence)


def rank_ranges(values: Sequence[float], different, higher_is_better: bool = True) -> list[tuple[int, int] | None]:
    """Per entry, the range of ranks its paired tests allow among the entries with a value (as Chatbot Arena shows
    one): ``1 +`` the number shown better than it, up to the count less the number shown worse. ``different(i, j)``
    is the paired test; None for an entry without a value."""
    v = np.asarray(values, dtype=np.float64)
    valued = [i for i in range(len(v)) if np.isfinite(v[i])]
    out: list[tuple[int, int] | None] = [None] * len(v)
    for i in valued:
        others = [j for j in valued if j != i and different(i, j)]
        better = sum(1 for j in others if (v[j] > v[i]) == higher_is_better and v[j] != v[i])
        worse = sum(1 for j in others if (v[j] < v[i]) == higher_is_better and v[j] != v[i])
        out[i] = (1 + better, len(valued) - worse)
    return out
