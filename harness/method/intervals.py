"""95% intervals for the benchmark's numbers (docs/method.md section 4, "Intervals"). Pure numpy, no I/O.

- :func:`auroc_interval`: one AUROC (an ood-auroc, or id-auroc), DeLong's variance by the O(n log n) midrank algorithm
  of Sun & Xu (2014), the interval taken on the logit scale.
- :func:`mean_auroc_interval`: the mean of several AUROCs that share their positives (the levels' ood-aurocs share
  every ID test image, and overlapping levels share OOD images): the variance of the mean from the DeLong covariance
  matrix of the AUROCs (:func:`auroc_covariance`), not from their variances alone.
- :func:`wilson_interval`: an accuracy (id-acc), Wilson's score interval.
- :func:`bootstrap_interval`: any other statistic, a seeded stratified percentile bootstrap.

Why the logit scale: an AUROC lives in [0, 1] and the good ones sit near 1, where its sampling distribution is skewed
and a symmetric interval ``A +- z se`` both spills over 1 and covers too rarely. ``logit(A)`` is unbounded and close
to normal; the interval ``logit(A) +- z se / (A (1 - A))`` (the delta method) mapped back is asymmetric, stays inside
(0, 1) and covers close to the nominal rate near 1 too (Pepe 2003; Qin & Hotilovac 2008). An AUROC of
exactly 0 or 1 has a DeLong variance of 0 and its interval is the point itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from statistics import NormalDist

import numpy as np

from harness.errors import HarnessError

CONFIDENCE = 0.95
DELONG_METHOD = "delong-logit"
WILSON_METHOD = "wilson"
BOOTSTRAP_METHOD = "stratified-bootstrap-percentile"


@dataclass(frozen=True)
class Interval:
    """A point estimate and its two-sided interval at ``confidence``; ``method`` names how it was computed."""

    estimate: float
    low: float
    high: float
    method: str
    confidence: float = CONFIDENCE

    def as_dict(self) -> dict:
        return asdict(self)


def _z(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise HarnessError(f"confidence must lie strictly between 0 and 1, got {confidence}")
    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


def _scores(name: str, values) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64).ravel()
    if len(values) < 2:
        raise HarnessError(f"{name}: a variance needs at least 2 samples, got {len(values)}")
    if not np.all(np.isfinite(values)):
        raise HarnessError(f"{name} contains {int(np.sum(~np.isfinite(values)))} NaN or infinite values")
    return values


def midranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks with tied values sharing their average rank (scipy's ``rankdata(method="average")``)."""
    values = np.asarray(values, dtype=np.float64)
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    starts = np.r_[0, np.flatnonzero(ordered[1:] != ordered[:-1]) + 1]
    ends = np.r_[starts[1:], len(values)]
    ranks = np.empty(len(values))
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    return ranks


def _placements(pos: np.ndarray, neg: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """Sun & Xu's structural components: the AUROC, per positive the share of negatives below it (V10), per negative
    the share of positives above it (V01); a tie counts 1/2. The AUROC is computed as :func:`metrics.auroc` does."""
    m, n = len(pos), len(neg)
    pooled = midranks(np.concatenate([pos, neg]))
    auc = (math.fsum(pooled[:m]) - m * (m + 1) / 2.0) / (m * n)
    v10 = (pooled[:m] - midranks(pos)) / n
    v01 = 1.0 - (pooled[m:] - midranks(neg)) / m
    return auc, v10, v01


def _level_indices(levels, num_negatives: int) -> list[np.ndarray]:
    indices = []
    for level, selection in enumerate(levels):
        selection = np.asarray(selection)
        if selection.dtype == bool:
            if selection.shape != (num_negatives,):
                raise HarnessError(f"level {level}: a mask of {selection.size} flags for {num_negatives} negatives")
            selection = np.flatnonzero(selection)
        selection = np.asarray(selection, dtype=np.int64).ravel()
        if len(np.unique(selection)) != len(selection):
            raise HarnessError(f"level {level} names a negative twice")
        if len(selection) and (selection.min() < 0 or selection.max() >= num_negatives):
            raise HarnessError(f"level {level} names a negative outside 0..{num_negatives - 1}")
        if len(selection) < 2:
            raise HarnessError(f"level {level}: a variance needs at least 2 negatives, got {len(selection)}")
        indices.append(selection)
    if not indices:
        raise HarnessError("no levels given")
    return indices


def auroc_covariance(
    positive: np.ndarray, negative: np.ndarray, levels: Sequence[np.ndarray] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The AUROCs of ``positive`` against each level's negatives, and DeLong's estimate of their covariance matrix.

    ``levels``: per level, a boolean mask over ``negative`` or the indices of its negatives (default: one level, all
    of them). Every level shares the positives, so the AUROCs covary through them:
    ``cov[l, l'] = S10[l, l'] / m`` with ``S10`` the sample covariance (ddof 1) of the positives' placement values
    against level ``l`` and level ``l'`` (DeLong, DeLong & Clarke-Pearson 1988). Levels that share negatives (windows
    that overlap) covary through those too, by the same structural components:
    ``sum over shared j of (V01_j - A_l)(V01_j - A_l') / sqrt(n_l (n_l - 1) n_l' (n_l' - 1))``; on the diagonal this
    is DeLong's ``S01 / n``, and for disjoint levels it is 0. O((m + n) log(m + n)) per level.
    """
    pos = _scores("positive scores", positive)
    neg = np.asarray(negative, dtype=np.float64).ravel()
    indices = _level_indices([np.ones(len(neg), bool)] if levels is None else levels, len(neg))
    used = np.unique(np.concatenate(indices))
    _scores("negative scores", neg[used])
    _, _, v01 = _placements(pos, neg[used])  # a negative's V01 depends on the positives only: once for all levels
    m = len(pos)
    aurocs, v10s = np.empty(len(indices)), np.empty((len(indices), m))
    spread = np.zeros((len(indices), len(used)))
    for level, index in enumerate(indices):
        aurocs[level], v10s[level], _ = _placements(pos, neg[index])
        at, n = np.searchsorted(used, index), len(index)
        spread[level, at] = (v01[at] - aurocs[level]) / math.sqrt(n * (n - 1.0))
    covariance = np.atleast_2d(np.cov(v10s, ddof=1)) / m + spread @ spread.T
    return aurocs, covariance


def _expit(t: float) -> float:
    return 1.0 / (1.0 + math.exp(-t)) if t >= 0.0 else math.exp(t) / (1.0 + math.exp(t))  # no overflow either way


def _logit_interval(estimate: float, variance: float, confidence: float) -> Interval:
    z = _z(confidence)
    if estimate <= 0.0 or estimate >= 1.0 or variance <= 0.0:
        return Interval(estimate, estimate, estimate, DELONG_METHOD, confidence)
    centre = math.log(estimate / (1.0 - estimate))
    half = z * math.sqrt(variance) / (estimate * (1.0 - estimate))
    low, high = _expit(centre - half), _expit(centre + half)
    return Interval(estimate, min(max(low, 0.0), 1.0), min(max(high, 0.0), 1.0), DELONG_METHOD, confidence)


def auroc_interval(positive: np.ndarray, negative: np.ndarray, confidence: float = CONFIDENCE) -> Interval:
    """The AUROC of ``positive`` against ``negative`` (average ranks, as :func:`metrics.auroc`, to the last bit) with
    DeLong's interval on the logit scale. For ood-auroc: ID test scores against a level's OOD test scores; for
    id-auroc: the scores of correct against those of wrong ID predictions. Needs 2 of each."""
    aurocs, covariance = auroc_covariance(positive, negative)
    return _logit_interval(float(aurocs[0]), float(covariance[0, 0]), confidence)


def mean_auroc_interval(
    positive: np.ndarray, negative: np.ndarray, levels: Sequence[np.ndarray], confidence: float = CONFIDENCE
) -> Interval:
    """The mean of the levels' AUROCs (see :func:`auroc_covariance` for ``levels``) with its interval: the variance of
    the mean is ``1' C 1 / L^2`` with ``C`` the DeLong covariance matrix of the levels' AUROCs (the shared positives
    make them covary, so the variances alone would understate it), the interval on the logit scale."""
    aurocs, covariance = auroc_covariance(positive, negative, levels)
    weights = np.full(len(aurocs), 1.0 / len(aurocs))
    return _logit_interval(math.fsum(aurocs) / len(aurocs), float(weights @ covariance @ weights), confidence)


def wilson_interval(successes: int, total: int, confidence: float = CONFIDENCE) -> Interval:
    """Wilson's score interval of a proportion (id-acc: ``successes`` correct of ``total``): the proportions ``p`` with
    ``|p_hat - p| <= z sqrt(p (1 - p) / n)``. Unlike ``p_hat +- z se`` it stays in [0, 1] and keeps its width at 0 or
    ``n`` successes."""
    if total <= 0 or not 0 <= successes <= total:
        raise HarnessError(f"a proportion needs 0 <= successes <= total and total > 0, got {successes} of {total}")
    z, p = _z(confidence), successes / total
    scale = 1.0 + z * z / total
    centre = (p + z * z / (2.0 * total)) / scale
    half = z / scale * math.sqrt(p * (1.0 - p) / total + z * z / (4.0 * total * total))
    return Interval(p, max(centre - half, 0.0), min(centre + half, 1.0), WILSON_METHOD, confidence)


def bootstrap_interval(
    statistic: Callable[..., float],
    *arrays: np.ndarray,
    strata: np.ndarray | None = None,
    resamples: int = 1000,
    seed: int = 0,
    confidence: float = CONFIDENCE,
) -> Interval:
    """Percentile bootstrap interval of ``statistic(*arrays)``, for the numbers that have no closed-form variance.

    Each resample draws rows (the same rows of every array) with replacement *within each stratum*, keeping every
    stratum's size (e.g. strata = correct/wrong, or the ID class); ``strata=None`` is one stratum. The draws come from
    ``numpy.random.default_rng(seed)``, one call per resample, so the same data in the same row order and the same
    seed give the same interval on every machine. ``estimate`` is the statistic on the data itself.
    """
    _z(confidence)
    if not arrays:
        raise HarnessError("bootstrap_interval needs at least one array")
    arrays = tuple(np.asarray(a) for a in arrays)
    size = len(arrays[0])
    if size == 0 or any(len(a) != size for a in arrays):
        raise HarnessError(f"bootstrap arrays must be non-empty and of one length, got {[len(a) for a in arrays]}")
    if resamples < 2:
        raise HarnessError(f"a bootstrap needs at least 2 resamples, got {resamples}")
    labels = np.zeros(size, np.int64) if strata is None else np.asarray(strata).ravel()
    if len(labels) != size:
        raise HarnessError(f"{len(labels)} stratum labels for {size} rows")
    _, stratum, counts = np.unique(labels, return_inverse=True, return_counts=True)
    by_stratum = np.argsort(stratum, kind="stable")  # the rows of stratum 0, then stratum 1, ...
    start = np.r_[0, np.cumsum(counts)[:-1]][stratum[by_stratum]]  # per position: where its stratum starts
    length = counts[stratum[by_stratum]]
    rng = np.random.default_rng(seed)
    values = np.empty(resamples)
    for r in range(resamples):
        rows = by_stratum[start + rng.integers(0, length)]
        values[r] = statistic(*(a[rows] for a in arrays))
    if not np.all(np.isfinite(values)):
        raise HarnessError(f"the statistic was not finite on {int(np.sum(~np.isfinite(values)))} resamples")
    alpha = 1.0 - confidence
    low, high = np.quantile(values, [alpha / 2.0, 1.0 - alpha / 2.0])
    return Interval(float(statistic(*arrays)), float(low), float(high), BOOTSTRAP_METHOD, confidence)
