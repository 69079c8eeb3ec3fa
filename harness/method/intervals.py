"""95% intervals for the benchmark's numbers (docs/method.md section 4, "Intervals"). Pure numpy, no I/O.

- :func:`auroc_interval`: one AUROC (an ood-auroc, or id-auroc), Newcombe's (2006) score interval ("method 5"): the
  values ``theta`` with ``(A - theta)^2 <= z^2 V(theta)``, ``V`` the Hanley-McNeil variance at ``theta`` with both
  sample sizes replaced by ``N* = (m + n) / 2 - 1``.
- :func:`mean_auroc_interval`: the mean of several AUROCs that share their positives (the levels' ood-aurocs share
  every ID test image, and overlapping levels share OOD images): the same score interval, the variance of the mean at
  ``theta`` from each level's Newcombe variance and the correlations of the DeLong covariance matrix of the AUROCs
  (:func:`auroc_covariance`).
- :func:`wilson_interval`: an accuracy (id-acc), Wilson's score interval with continuity correction (Newcombe 1998).
- :func:`bootstrap_interval`: any other statistic, a seeded stratified percentile bootstrap.

Why a score interval: DeLong's variance is estimated at the AUROC itself, and with few negatives (or few wrong ID
predictions) near an AUROC of 1 it is often near 0, and exactly 0 at a perfect separation, so its interval covers far
too rarely there (docs/method.md has the measured table, ``benchmarks/interval_coverage.py`` prints it). A score
interval takes the variance at each candidate value instead: it stays inside [0, 1], is never of zero width, and at an
AUROC of exactly 1 it is the one-sided bound ``[low, 1]`` from the counts alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from statistics import NormalDist

import numpy as np

from harness.errors import HarnessError

CONFIDENCE = 0.95
AUROC_METHOD = "newcombe-score"
MEAN_AUROC_METHOD = "newcombe-score-mean-delong-correlation"
ACC_METHOD = "wilson-cc"
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


def newcombe_variance(theta, m: float, n: float):
    """Newcombe's (2006) variance of an AUROC at ``theta`` (elementwise) for ``m`` positives and ``n`` negatives:
    Hanley & McNeil's (1982) ``theta (1 - theta) [1 + (N* - 1)((1 - theta) / (2 - theta) + theta / (1 + theta))]
    / (m n)`` with both sizes replaced by ``N* = (m + n) / 2 - 1``. It is 0 at 0 and 1 only."""
    theta = np.asarray(theta, dtype=np.float64)
    spread = 1.0 + ((m + n) / 2.0 - 2.0) * ((1.0 - theta) / (2.0 - theta) + theta / (1.0 + theta))
    return theta * (1.0 - theta) * spread / (m * n)


def score_bounds(estimate, variance_at: Callable, confidence: float = CONFIDENCE, steps: int = 52):
    """The ends of the score interval ``{theta in [0, 1]: (estimate - theta)^2 <= z^2 variance_at(theta)}``, by
    bisection below and above ``estimate`` (elementwise over an array of estimates; ``variance_at`` maps an array of
    ``theta`` to their variances, 0 at 0 and 1). ``steps`` halvings give the ends to 2^-52."""
    z2 = _z(confidence) ** 2
    estimate = np.asarray(estimate, dtype=np.float64)

    def outside(theta):
        return (estimate - theta) ** 2 > z2 * variance_at(theta)

    below = [np.zeros_like(estimate), estimate.copy()]  # [outside, inside]
    above = [np.ones_like(estimate), estimate.copy()]
    for _ in range(steps):
        for ends in (below, above):
            mid = (ends[0] + ends[1]) / 2.0
            out = outside(mid)
            ends[0], ends[1] = np.where(out, mid, ends[0]), np.where(out, ends[1], mid)
    return below[0], above[0]


def _score_interval(estimate: float, variance_at: Callable, method: str, confidence: float) -> Interval:
    low, high = score_bounds(estimate, variance_at, confidence)
    return Interval(estimate, float(low), float(high), method, confidence)


def auroc_interval(positive: np.ndarray, negative: np.ndarray, confidence: float = CONFIDENCE) -> Interval:
    """The AUROC of ``positive`` against ``negative`` (average ranks, as :func:`metrics.auroc`, to the last bit) with
    Newcombe's score interval (:func:`newcombe_variance`). For ood-auroc: ID test scores against a level's OOD test
    scores; for id-auroc: the scores of correct against those of wrong ID predictions. Needs 2 of each."""
    pos, neg = _scores("positive scores", positive), _scores("negative scores", negative)
    estimate = _placements(pos, neg)[0]
    m, n = len(pos), len(neg)
    return _score_interval(estimate, lambda t: newcombe_variance(t, m, n), AUROC_METHOD, confidence)


def correlation(covariance: np.ndarray) -> np.ndarray:
    """The correlation matrix of a covariance matrix (over its last two axes); a pair with a variance of 0 (a perfect
    level) counts as correlated 1, the cautious choice for a mean."""
    sd = np.sqrt(np.maximum(np.diagonal(covariance, axis1=-2, axis2=-1), 0.0))
    outer = sd[..., :, None] * sd[..., None, :]
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = np.where(outer > 0, covariance / np.where(outer > 0, outer, 1.0), 1.0)
    return np.clip(rho, -1.0, 1.0)


def mean_variance_at(theta, rho: np.ndarray, m: int, counts: Sequence[int]):
    """The variance of the mean of ``L`` AUROCs at ``theta`` (elementwise): ``sum_ll' rho_ll' s_l s_l' / L^2`` with
    ``s_l`` the Newcombe standard error of level ``l`` (``m`` positives, ``counts[l]`` negatives) at ``theta`` and
    ``rho`` their correlation matrix (broadcast against ``theta``, shape ``theta.shape + (L, L)``)."""
    theta = np.asarray(theta, dtype=np.float64)
    s = np.sqrt(np.stack([newcombe_variance(theta, m, n) for n in counts], axis=-1))
    return np.einsum("...l,...lk,...k->...", s, rho, s) / len(counts) ** 2


def mean_auroc_interval(
    positive: np.ndarray, negative: np.ndarray, levels: Sequence[np.ndarray], confidence: float = CONFIDENCE
) -> Interval:
    """The mean of the levels' AUROCs (see :func:`auroc_covariance` for ``levels``) with its score interval: the
    variance of the mean at ``theta`` is :func:`mean_variance_at`, each level's Newcombe variance at ``theta``
    correlated as DeLong's covariance matrix says (the shared positives, and the shared negatives of overlapping
    levels, make the AUROCs covary, so the variances alone would understate it)."""
    aurocs, covariance = auroc_covariance(positive, negative, levels)
    counts = [len(index) for index in _level_indices(levels, len(np.asarray(negative).ravel()))]
    rho, m = correlation(covariance), len(np.asarray(positive).ravel())
    estimate = math.fsum(aurocs) / len(aurocs)
    return _score_interval(estimate, lambda t: mean_variance_at(t, rho, m, counts), MEAN_AUROC_METHOD, confidence)


def wilson_interval(successes: int, total: int, confidence: float = CONFIDENCE) -> Interval:
    """Wilson's score interval of a proportion with continuity correction (Newcombe 1998, method 4; id-acc:
    ``successes`` correct of ``total``): the proportions ``p`` with ``|p_hat - p| - 1 / (2n) <= z sqrt(p (1 - p) / n)``.
    It stays in [0, 1] and is never of zero width: with no failures it is ``[low, 1]``, with no successes
    ``[0, high]``."""
    if total <= 0 or not 0 <= successes <= total:
        raise HarnessError(f"a proportion needs 0 <= successes <= total and total > 0, got {successes} of {total}")
    z, n, p = _z(confidence), total, successes / total
    q, denominator = 1.0 - p, 2.0 * (n + z * z)
    low = (2 * n * p + z * z - 1 - z * math.sqrt(max(z * z - 2 - 1 / n + 4 * p * (n * q + 1), 0.0))) / denominator
    high = (2 * n * p + z * z + 1 + z * math.sqrt(max(z * z + 2 - 1 / n + 4 * p * (n * q - 1), 0.0))) / denominator
    low, high = (0.0 if successes == 0 else max(low, 0.0)), (1.0 if successes == total else min(high, 1.0))
    return Interval(p, low, high, ACC_METHOD, confidence)


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
