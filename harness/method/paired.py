"""Paired comparisons of two entries of one benchmark (docs/method.md, "Paired comparisons"). Pure numpy, no I/O.

:func:`compare_entries` takes two entries' per-image score tables (the per-image file's columns: a pandas DataFrame or
a mapping of column name to array) and gives, for the difference A - B, each level's ood-auroc (level ``l`` of A
against level ``l`` of B), the mean ood-auroc over the levels and the id-auroc, each as a :class:`Difference`: the
estimate, its paired standard error, a 95% interval, a two-sided p-value, and the unpaired standard error beside it.

The covariance counts exactly what the two entries share. Every AUROC is written as a sum over images of each image's
influence (DeLong's structural components, as in DeLong, DeLong & Clarke-Pearson 1988 and Hanley & McNeil 1982): a
positive's ``(V10 - A) / sqrt(m (m - 1))``, a negative's ``(V01 - A) / sqrt(n (n - 1))``, 0 for an image the AUROC
does not use. The variance of ``A_a - A_b`` is the sum over all images of the squared difference of the two
influences: an image both used adds its covariance, one only one entry saw adds to that entry's variance alone. For
id-auroc an image may be a positive (right) for one model and a negative (wrong) for the other; its influence on each
AUROC is the placement term of its role over that role's sample size, so no common partition is needed. With the same
images in the same roles this is DeLong's variance of a difference of correlated AUROCs (Sun & Xu 2014; pROC's
``roc.test``), to rounding.

An AUROC whose influences are all 0 (every placement equals it: a perfect separation, or all scores tied) has no
variance estimate; it counts with the floor from its counts, the interval's variance at the lower end of the score
interval of an AUROC of 1 (:func:`count_floor`), as a term of its own. A difference has a zero-width interval and
p = 1 only when the two sides use the same images in the same roles with identical scores. The interval is DeLong's
(Wald): near an AUROC of 1 with few images on one side it is too narrow (docs/method.md has the measured coverage).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from functools import lru_cache

import numpy as np

from harness.errors import HarnessError
from harness.method.intervals import CONFIDENCE, _placements, _z, adapted_variance, score_bounds

ID_SPLIT, OOD_SPLIT = "id_test", "ood_test"  # the splits a record's test numbers come from
METHOD = "delong-paired-wald"
ALPHA = 0.05  # the paired test's level on a board: a row is shown different from the row above when p < ALPHA
COLUMNS = ("key", "split", "score", "correct", "levels")
TINY = 1e-12  # an influence below this is 0 (placements equal to the AUROC up to rounding)


@dataclass(frozen=True)
class Difference:
    """``a - b`` of one AUROC of two entries: the paired standard error, the interval ``estimate -+ z se`` (inside
    [-1, 1]), the two-sided p-value, the unpaired standard error (the two variances summed), the images both sides
    used (``shared``) and whether a side's variance is its count floor (``floored``)."""

    estimate: float
    a: float
    b: float
    se: float
    low: float
    high: float
    p_value: float
    unpaired_se: float
    shared: int
    floored: bool
    method: str = METHOD
    confidence: float = CONFIDENCE

    def as_dict(self) -> dict:
        return asdict(self)

    def different(self, alpha: float = ALPHA) -> bool:
        """The paired test rejects "no difference" at ``alpha`` (two-sided)."""
        return self.p_value < alpha


@dataclass(frozen=True)
class Comparison:
    """Entry A against entry B: per common level, the mean over each entry's own levels, id-acc (the paired test of
    two accuracies on shared images, McNemar's in Wald form), and id-auroc (None, with ``id_auroc_missing`` saying
    why, where either entry has fewer than 2 right or 2 wrong ID predictions)."""

    levels: list[Difference]
    mean_ood_auroc: Difference
    id_acc: Difference
    id_auroc: Difference | None
    num_levels: tuple[int, int]
    id_auroc_missing: str | None = None

    def as_dict(self) -> dict:
        return {
            "levels": [d.as_dict() for d in self.levels],
            "mean_ood_auroc": self.mean_ood_auroc.as_dict(),
            "id_acc": self.id_acc.as_dict(),
            "id_auroc": None if self.id_auroc is None else self.id_auroc.as_dict(),
            "num_levels": list(self.num_levels),
            "id_auroc_missing": self.id_auroc_missing,
        }


@dataclass(frozen=True)
class Entry:
    """One entry's test rows: ID keys, scores and correctness; OOD keys, scores and per level its rows."""

    id_keys: np.ndarray
    id_scores: np.ndarray
    correct: np.ndarray
    ood_keys: np.ndarray
    ood_scores: np.ndarray
    level_rows: list[np.ndarray]


@dataclass(frozen=True)
class Auroc:
    """One AUROC as a sum of per-image influences over the union of both entries' images, with its count floor;
    ``signature``: per image it uses (by place), its role (1 positive, 0 negative) and score."""

    value: float
    influence: np.ndarray
    signature: np.ndarray
    counts: tuple[int, int]  # positives, negatives
    confidence: float = CONFIDENCE

    @property
    def floor(self) -> float:
        """The variance this AUROC counts where its data give none (:func:`count_floor`)."""
        return count_floor(*self.counts, self.confidence)

    @property
    def degenerate(self) -> bool:
        """Every influence is 0: the data give this AUROC no variance."""
        return not np.any(np.abs(self.influence) > TINY)

    @property
    def places(self) -> np.ndarray:
        return self.signature[0].astype(np.int64)


@dataclass(frozen=True)
class Share(Auroc):
    """The share of right ID predictions (id-acc) as a sum of per-image influences, ``(c_i - p) / sqrt(n (n - 1))``
    (so that their sum of squares is ``p (1 - p) / (n - 1)``); ``counts``: right, wrong."""

    @property
    def floor(self) -> float:
        """The variance where every prediction is right (or every one wrong): Wilson's at its one-sided bound, the
        ``p`` with ``(1 - p)^2 = z^2 p (1 - p) / n``, so ``-+ z sqrt(floor)`` is as wide as that bound."""
        n, z = sum(self.counts), _z(self.confidence)
        return z**2 / (n + z**2) ** 2


def share_influence(at, correct, size: int, confidence: float = CONFIDENCE) -> Share:
    """The share of right predictions among ``correct`` (at places ``at`` of ``size`` images) and each image's
    influence on it. Needs 2 images."""
    n = len(correct)
    values = np.asarray(correct, np.float64)
    value = math.fsum(values) / n
    influence = np.zeros(size)
    influence[at] = (values - value) / math.sqrt(n * (n - 1.0))
    order = np.argsort(at, kind="stable")
    signature = np.stack([np.asarray(at, np.float64), values, np.zeros(n)])[:, order]
    right = int(values.sum())
    return Share(value, influence, signature, (right, n - right), confidence)


def _correct(values: np.ndarray, name: str) -> np.ndarray:
    if not all(isinstance(c, (bool, np.bool_)) for c in values):
        raise HarnessError(f"{name}: every ID test row needs a 'correct' value of true or false")
    return values.astype(bool)


def _level_rows(levels: np.ndarray, name: str) -> list[np.ndarray]:
    """Per level, the OOD rows whose ``levels`` list holds it."""
    lists = [np.asarray(v, dtype=np.int64).ravel() for v in levels]
    flat = np.concatenate([np.zeros(0, np.int64), *lists])
    rows = np.repeat(np.arange(len(lists)), [len(v) for v in lists])
    if not len(flat):
        raise HarnessError(f"{name}: no OOD test row belongs to a level")
    if flat.min() < 0:
        raise HarnessError(f"{name}: a level below 0 ({int(flat.min())})")
    return [np.unique(rows[flat == level]) for level in range(int(flat.max()) + 1)]


def entry_from_table(table: Mapping, name: str = "entry") -> Entry:
    """The test rows of a per-image score table (splits ``id_test`` and ``ood_test``; other splits are ignored)."""
    missing = [c for c in COLUMNS if c not in table]
    if missing:
        raise HarnessError(f"{name}: the per-image table lacks the column(s) {', '.join(missing)}")
    split = np.asarray(table["split"]).astype(str)
    keys = np.asarray(table["key"]).astype(str)
    scores = np.asarray(table["score"], dtype=np.float64)
    is_id, is_ood = split == ID_SPLIT, split == OOD_SPLIT
    if not is_id.any() or not is_ood.any():
        raise HarnessError(f"{name}: the per-image table has no '{ID_SPLIT}' or no '{OOD_SPLIT}' rows")
    test = is_id | is_ood
    if not np.all(np.isfinite(scores[test])):
        raise HarnessError(f"{name}: {int(np.sum(~np.isfinite(scores[test])))} test scores are NaN or infinite")
    for what, mask in (("ID", is_id), ("OOD", is_ood)):
        if len(np.unique(keys[mask])) != int(mask.sum()):
            raise HarnessError(f"{name}: an {what} test key occurs twice")
    correct = _correct(np.asarray(table["correct"], dtype=object)[is_id], name)
    level_rows = _level_rows(np.asarray(table["levels"], dtype=object)[is_ood], name)
    return Entry(keys[is_id], scores[is_id], correct, keys[is_ood], scores[is_ood], level_rows)


@lru_cache(maxsize=1024)
def count_floor(m: int, n: int, confidence: float = CONFIDENCE) -> float:
    """The variance an AUROC of ``m`` positives and ``n`` negatives counts when its data give none: the AUROC
    interval's variance (:func:`perfect_variance`) at ``low``, the lower end of the score interval of an AUROC of 1
    (there ``(1 - low)^2 = z^2 V(low)``, so ``-+ z sqrt(floor)`` is as wide as that one-sided bound)."""
    low = score_bounds(np.array([1.0]), lambda t: perfect_variance(t, m, n), confidence)[0]
    return float(perfect_variance(low, m, n)[0])


def perfect_variance(theta, m: int, n: int):
    """The AUROC interval's variance at ``theta`` where the data show no spread (a perfect separation): the binormal
    model's as it is (:func:`intervals.adapted_variance` with both sides' ratios 1)."""
    return adapted_variance(theta, m, n, np.ones(2))


def auroc_influence(pos_at, pos, neg_at, neg, size: int, confidence: float = CONFIDENCE) -> Auroc:
    """The AUROC of ``pos`` against ``neg`` (average ranks, bit for bit :func:`metrics.auroc`) and each of ``size``
    images' influence on it (``pos_at``, ``neg_at``: the places of the positives and negatives): the placement terms
    over the sample sizes, ``(V10_i - A) / sqrt(m (m - 1))`` and ``(V01_j - A) / sqrt(n (n - 1))``, so that their sum
    of squares is DeLong's ``S10 / m + S01 / n``. Needs 2 of each."""
    m, n = len(pos), len(neg)
    value, v10, v01 = _placements(np.asarray(pos, np.float64), np.asarray(neg, np.float64))
    influence = np.zeros(size)
    influence[pos_at] = (v10 - value) / math.sqrt(m * (m - 1.0))
    influence[neg_at] = (v01 - value) / math.sqrt(n * (n - 1.0))
    places = np.concatenate([pos_at, neg_at]).astype(np.float64)
    roles = np.r_[np.ones(m), np.zeros(n)]
    order = np.argsort(places, kind="stable")
    signature = np.stack([places, roles, np.concatenate([pos, neg])])[:, order]
    return Auroc(value, influence, signature, (m, n), confidence)


def _identical(side_a: list[Auroc], side_b: list[Auroc]) -> bool:
    """The two sides' AUROCs use the same images in the same roles with identical scores, one by one."""
    return len(side_a) == len(side_b) and all(np.array_equal(x.signature, y.signature) for x, y in zip(side_a, side_b))


def _used(side: list[Auroc]) -> np.ndarray:
    return np.unique(np.concatenate([s.places for s in side]))


def difference(side_a: list[Auroc], side_b: list[Auroc], confidence: float = CONFIDENCE) -> Difference:
    """The mean of ``side_a``'s AUROCs minus the mean of ``side_b``'s (one each for a level or id-auroc, the levels
    for the mean ood-auroc). Its variance: the sum over images of the squared difference of the two means'
    influences, plus each degenerate AUROC's count floor times its weight squared; 0 only for identical sides. Where
    that sum is 0 for sides that are not identical (they rank every image alike), the count floors of all of them."""
    mean_a = sum(s.influence for s in side_a) / len(side_a)
    mean_b = sum(s.influence for s in side_b) / len(side_b)
    weighted = [(1.0 / len(side_a) ** 2, s) for s in side_a] + [(1.0 / len(side_b) ** 2, s) for s in side_b]
    floors = math.fsum(w * s.floor for w, s in weighted if s.degenerate)
    identical, paired = _identical(side_a, side_b), math.fsum((mean_a - mean_b) ** 2)
    variance = 0.0 if identical else paired + floors
    if not identical and variance == 0.0:
        variance = math.fsum(w * s.floor for w, s in weighted)
    unpaired = math.fsum(mean_a**2) + math.fsum(mean_b**2) + floors
    a = math.fsum(s.value for s in side_a) / len(side_a)
    b = math.fsum(s.value for s in side_b) / len(side_b)
    estimate, se = a - b, math.sqrt(variance)
    half = _z(confidence) * se
    return Difference(
        estimate=estimate,
        a=a,
        b=b,
        se=se,
        low=max(estimate - half, -1.0),
        high=min(estimate + half, 1.0),
        p_value=p_value(estimate, se),
        unpaired_se=math.sqrt(unpaired),
        shared=len(np.intersect1d(_used(side_a), _used(side_b))),
        floored=not identical and (floors > 0.0 or paired == 0.0),
        method=METHOD,
        confidence=confidence,
    )


def p_value(estimate: float, se: float) -> float:
    """The two-sided p-value of "no difference" for ``estimate`` with standard error ``se``: 1 where ``se`` is 0."""
    return 1.0 if se == 0.0 else math.erfc(abs(estimate) / se / math.sqrt(2.0))


def _level_aurocs(entry: Entry, id_at, ood_at, size: int, name: str, confidence: float) -> list[Auroc]:
    aurocs = []
    for level, rows in enumerate(entry.level_rows):
        if len(rows) < 2 or len(entry.id_scores) < 2:
            raise HarnessError(f"{name}: level {level} needs at least 2 ID and 2 OOD test images, has {len(rows)} OOD")
        aurocs.append(auroc_influence(id_at, entry.id_scores, ood_at[rows], entry.ood_scores[rows], size, confidence))
    return aurocs


def _id_auroc(entry: Entry, id_at, size: int, name: str, confidence: float) -> Auroc | str:
    """The id-auroc (right against wrong ID predictions) with its influences, or why there is none."""
    right = entry.correct
    if right.sum() < 2 or (~right).sum() < 2:
        counts = f"{int(right.sum())} right and {int((~right).sum())} wrong"
        return f"{name} has {counts} ID predictions (id-auroc needs 2 of each)"
    scores = entry.id_scores
    return auroc_influence(id_at[right], scores[right], id_at[~right], scores[~right], size, confidence)


def compare_entries(table_a: Mapping, table_b: Mapping, confidence: float = CONFIDENCE) -> Comparison:
    """Entry A against entry B of one benchmark from their per-image score tables: each common level's ood-auroc
    (level ``l`` against level ``l``, whatever OOD classes each holds), the mean ood-auroc over each entry's own
    levels, and the id-auroc, as :class:`Difference` (A - B). Images are matched by their split and key."""
    a, b = entry_from_table(table_a, "entry A"), entry_from_table(table_b, "entry B")
    if not len(np.intersect1d(a.id_keys, b.id_keys)):
        raise HarnessError("the two entries share no ID test image: they are not entries of one benchmark")
    id_keys, ood_keys = np.union1d(a.id_keys, b.id_keys), np.union1d(a.ood_keys, b.ood_keys)
    size = len(id_keys) + len(ood_keys)
    sides = {}
    for name, entry in (("entry A", a), ("entry B", b)):
        id_at = np.searchsorted(id_keys, entry.id_keys)
        ood_at = len(id_keys) + np.searchsorted(ood_keys, entry.ood_keys)
        sides[name] = (
            _level_aurocs(entry, id_at, ood_at, size, name, confidence),
            _id_auroc(entry, id_at, size, name, confidence),
            share_influence(id_at, entry.correct, size, confidence),
        )
    (levels_a, id_a, acc_a), (levels_b, id_b, acc_b) = sides["entry A"], sides["entry B"]
    common = range(min(len(levels_a), len(levels_b)))
    missing = next((why for why in (id_a, id_b) if isinstance(why, str)), None)
    return Comparison(
        levels=[difference([levels_a[level]], [levels_b[level]], confidence) for level in common],
        mean_ood_auroc=difference(levels_a, levels_b, confidence),
        id_acc=difference([acc_a], [acc_b], confidence),
        id_auroc=None if missing else difference([id_a], [id_b], confidence),
        num_levels=(len(levels_a), len(levels_b)),
        id_auroc_missing=missing,
    )
