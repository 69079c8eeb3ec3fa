"""95% intervals for the benchmark's numbers (docs/method.md section 4, "Intervals"). Pure numpy, no I/O.

- :func:`auroc_interval`: one AUROC (an ood-auroc, or id-auroc), a score interval (Newcombe 2006): the values
  ``theta`` with ``(A - theta)^2 <= z^2 V(theta)``, ``V`` the exact variance of the Mann-Whitney statistic with each
  side's placement variance the equal-variance binormal model's at ``theta`` (:func:`binormal_component`), scaled by
  how that side's DeLong structural components spread against the model, shrunk to the model where they show little
  (:func:`component_ratio`, :func:`adapted_variance`).
- :func:`mean_auroc_interval`: the mean of several AUROCs that share their positives (the levels' ood-aurocs share
  every ID test image, and overlapping levels share OOD images): the same score interval, the variance of the mean at
  ``theta`` from each level's adapted variance and the correlations of the DeLong covariance matrix of the AUROCs
  (:func:`auroc_covariance`).
- :func:`accuracy_interval`: an accuracy (id-acc), the interval of Sterne's test with the mid-p value.
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
AUROC_METHOD = "binormal-score-adapted"
MEAN_AUROC_METHOD = "binormal-score-adapted-mean-delong-correlation"
ACC_METHOD = "sterne-midp"
BOOTSTRAP_METHOD = "stratified-bootstrap-percentile"
SHRINK_WEIGHT = 20.0  # the model's weight in a side's placement variance, in degrees of freedom (chosen by coverage)


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


def _level_parts(positive, negative, levels) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
    """Per level its AUROC, DeLong's covariance matrix of the AUROCs (:func:`auroc_covariance`), each level's side
    ratios (:func:`side_ratios`, shape ``(L, 2)``) and its number of negatives."""
    pos = _scores("positive scores", positive)
    neg = np.asarray(negative, dtype=np.float64).ravel()
    indices = _level_indices([np.ones(len(neg), bool)] if levels is None else levels, len(neg))
    used = np.unique(np.concatenate(indices))
    _scores("negative scores", neg[used])
    _, _, v01 = _placements(pos, neg[used])  # a negative's V01 depends on the positives only: once for all levels
    m = len(pos)
    aurocs, v10s = np.empty(len(indices)), np.empty((len(indices), m))
    spread, ratios = np.zeros((len(indices), len(used))), np.empty((len(indices), 2))
    for level, index in enumerate(indices):
        aurocs[level], v10s[level], _ = _placements(pos, neg[index])
        at, n = np.searchsorted(used, index), len(index)
        spread[level, at] = (v01[at] - aurocs[level]) / math.sqrt(n * (n - 1.0))
        ratios[level] = side_ratios(aurocs[level], v10s[level], v01[at])
    covariance = np.atleast_2d(np.cov(v10s, ddof=1)) / m + spread @ spread.T
    return aurocs, covariance, ratios, [len(index) for index in indices]


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
    aurocs, covariance, _, _ = _level_parts(positive, negative, levels)
    return aurocs, covariance


_ACKLAM_A = (
    -39.69683028665376,
    220.9460984245205,
    -275.9285104469687,
    138.357751867269,
    -30.66479806614716,
    2.506628277459239,
)
_ACKLAM_B = (-54.47609879822406, 161.5858368580409, -155.6989798598866, 66.80131188771972, -13.28068155288572)
_ACKLAM_C = (
    -0.007784894002430293,
    -0.3223964580411365,
    -2.400758277161838,
    -2.549732539343734,
    4.374664141464968,
    2.938163982698783,
)
_ACKLAM_D = (0.007784695709041462, 0.3224671290700398, 2.445134137142996, 3.754408661907416)
_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(32)


def normal_quantile(p):
    """The standard normal quantile, elementwise (Acklam's rational approximation, relative error under 1.2e-9)."""
    p = np.clip(np.asarray(p, dtype=np.float64), 1e-300, 1.0 - 1e-16)
    tail = np.minimum(p, 1.0 - p)
    r = np.sqrt(-2.0 * np.log(tail))
    c, d = _ACKLAM_C, _ACKLAM_D
    outer = (((((c[0] * r + c[1]) * r + c[2]) * r + c[3]) * r + c[4]) * r + c[5]) / (
        (((d[0] * r + d[1]) * r + d[2]) * r + d[3]) * r + 1.0
    )
    q = p - 0.5
    s = q * q
    a, b = _ACKLAM_A, _ACKLAM_B
    central = (
        (((((a[0] * s + a[1]) * s + a[2]) * s + a[3]) * s + a[4]) * s + a[5])
        * q
        / (((((b[0] * s + b[1]) * s + b[2]) * s + b[3]) * s + b[4]) * s + 1.0)
    )
    return np.where(tail < 0.02425, np.where(p < 0.5, outer, -outer), central)


def binormal_component(theta):
    """The variance of one image's placement value at AUROC ``theta`` (elementwise) under the equal-variance binormal
    model: ``P(X > Y1, X > Y2) - theta^2`` for ``X ~ N(d, 1)``, ``Y ~ N(0, 1)``, ``theta = Phi(d / sqrt 2)``, the same
    for a positive and a negative. By Plackett's identity it is ``int_0^(1/2) exp(-h^2 / (1 + r)) / (2 pi sqrt(1 -
    r^2)) dr`` with ``h = Phi^-1(theta)``, a positive integrand (no cancellation near 0 or 1), by
    32-point Gauss-Legendre. It is 0 at 0 and 1 only."""
    theta = np.asarray(theta, dtype=np.float64)
    h2 = normal_quantile(theta)[..., None] ** 2
    r = (_NODES + 1.0) / 4.0
    integrand = np.exp(-h2 / (1.0 + r)) / (2.0 * math.pi * np.sqrt(1.0 - r * r))
    return np.where((theta <= 0.0) | (theta >= 1.0), 0.0, integrand @ _WEIGHTS / 4.0)


def component_ratio(values, model, weight: float = SHRINK_WEIGHT):
    """How a side's placement values (last axis) spread against the binormal model's ``model`` (its
    :func:`binormal_component` at the AUROC): ``(nu S / model + weight) / (nu + weight)``, with ``S`` their sample
    variance (ddof 1) and ``nu = 2 / relvar`` its degrees of freedom, ``relvar = (kurtosis - (N - 3) / (N - 1)) / N``
    the relative variance of a sample variance. Few or lopsided values (a handful of mistakes) give few degrees of
    freedom, so the ratio leans on the model (1); none that differ (a perfect separation), or a model of 0, give 1."""
    values = np.asarray(values, dtype=np.float64)
    count = values.shape[-1]
    centred = values - values.mean(axis=-1, keepdims=True)
    second = np.mean(centred**2, axis=-1)
    spread = second > 0.0
    safe = np.where(spread, second, 1.0)
    kurtosis = np.mean(centred**4, axis=-1) / safe**2
    relvar = np.maximum(kurtosis - (count - 3.0) / (count - 1.0), 1e-12) / count
    nu = np.where(spread, 2.0 / relvar, 0.0)
    ratio = np.where(model > 0.0, second * count / (count - 1.0) / np.where(model > 0.0, model, 1.0), 1.0)
    return (nu * ratio + weight) / (nu + weight)


def adapted_variance(theta, m: int, n: int, ratios):
    """The variance of an AUROC at ``theta`` (elementwise) for ``m`` positives and ``n`` negatives: the exact variance
    of the Mann-Whitney statistic, ``[theta (1 - theta) + (n - 1) Var(V10) + (m - 1) Var(V01)] / (m n)``, with each
    side's placement variance the binormal model's at ``theta`` times that side's ratio (:func:`component_ratio`;
    ``ratios[..., 0]`` the positives', ``ratios[..., 1]`` the negatives')."""
    theta = np.asarray(theta, dtype=np.float64)
    ratios = np.asarray(ratios, dtype=np.float64)
    sides = (n - 1.0) * ratios[..., 0] + (m - 1.0) * ratios[..., 1]
    return (theta * (1.0 - theta) + sides * binormal_component(theta)) / (m * n)


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


def side_ratios(auroc, v10, v01):
    """Both sides' :func:`component_ratio` at the AUROC ``auroc`` (leading axes broadcast): ``[..., 0]`` the
    positives' (their V10), ``[..., 1]`` the negatives' (their V01)."""
    model = binormal_component(auroc)
    return np.stack([component_ratio(v10, model), component_ratio(v01, model)], axis=-1)


def auroc_interval(positive: np.ndarray, negative: np.ndarray, confidence: float = CONFIDENCE) -> Interval:
    """The AUROC of ``positive`` against ``negative`` (average ranks, as :func:`metrics.auroc`, to the last bit) with
    its data-adapted binormal score interval (:func:`adapted_variance`). For ood-auroc: ID test scores against a
    level's OOD test scores; for id-auroc: the scores of correct against those of wrong ID predictions. Needs 2 of
    each."""
    pos, neg = _scores("positive scores", positive), _scores("negative scores", negative)
    estimate, v10, v01 = _placements(pos, neg)
    m, n, ratios = len(pos), len(neg), side_ratios(estimate, v10, v01)
    return _score_interval(estimate, lambda t: adapted_variance(t, m, n, ratios), AUROC_METHOD, confidence)


def correlation(covariance: np.ndarray) -> np.ndarray:
    """The correlation matrix of a covariance matrix (over its last two axes); a pair with a variance of 0 (a perfect
    level) counts as correlated 1, the cautious choice for a mean."""
    sd = np.sqrt(np.maximum(np.diagonal(covariance, axis1=-2, axis2=-1), 0.0))
    outer = sd[..., :, None] * sd[..., None, :]
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = np.where(outer > 0, covariance / np.where(outer > 0, outer, 1.0), 1.0)
    return np.clip(rho, -1.0, 1.0)


def mean_variance_at(theta, rho: np.ndarray, m: int, counts: Sequence[int], ratios: np.ndarray):
    """The variance of the mean of ``L`` AUROCs at ``theta`` (elementwise): ``sum_ll' rho_ll' s_l s_l' / L^2`` with
    ``s_l`` level ``l``'s :func:`adapted_variance` at ``theta`` (``m`` positives, ``counts[l]`` negatives, its side
    ratios ``ratios[..., l, :]``) and ``rho`` their correlation matrix (leading axes broadcast against ``theta``)."""
    theta = np.asarray(theta, dtype=np.float64)
    s = np.sqrt(np.stack([adapted_variance(theta, m, n, ratios[..., k, :]) for k, n in enumerate(counts)], axis=-1))
    return np.einsum("...l,...lk,...k->...", s, rho, s) / len(counts) ** 2


def mean_auroc_interval(
    positive: np.ndarray, negative: np.ndarray, levels: Sequence[np.ndarray], confidence: float = CONFIDENCE
) -> Interval:
    """The mean of the levels' AUROCs (see :func:`auroc_covariance` for ``levels``) with its score interval: the
    variance of the mean at ``theta`` is :func:`mean_variance_at`, each level's adapted variance at ``theta``
    correlated as DeLong's covariance matrix says (the shared positives, and the shared negatives of overlapping
    levels, make the AUROCs covary, so the variances alone would understate it)."""
    aurocs, covariance, ratios, counts = _level_parts(positive, negative, levels)
    rho, m = correlation(covariance), len(np.asarray(positive).ravel())
    estimate = math.fsum(aurocs) / len(aurocs)
    variance = lambda t: mean_variance_at(t, rho, m, counts, ratios)  # noqa: E731
    return _score_interval(estimate, variance, MEAN_AUROC_METHOD, confidence)


def _log_choose(n: int) -> np.ndarray:
    """``log C(n, k)`` for ``k = 0..n``, as running sums of ``log((n - k + 1) / k)``."""
    steps = np.log(np.arange(n, 0, -1, dtype=np.float64)) - np.log(np.arange(1, n + 1, dtype=np.float64))
    return np.concatenate([[0.0], np.cumsum(steps)])


@dataclass(frozen=True)
class _Outcomes:
    """Binomial(n, p) outcomes ``first .. first + len(log_choose) - 1`` with their ``log C(n, k)``, and the one seen."""

    n: int
    first: int
    log_choose: np.ndarray
    seen: int

    def pmf(self, p: np.ndarray) -> np.ndarray:
        """Their probabilities, a row per proportion in ``p`` (in (0, 1))."""
        k = np.arange(self.first, self.first + len(self.log_choose))
        return np.exp(self.log_choose + k * np.log(p[:, None]) + (self.n - k) * np.log1p(-p[:, None]))

    def keeps(self, p: np.ndarray, alpha: float) -> np.ndarray:
        """Whether Sterne's test keeps each proportion in ``p``: its mid-p value, the mass of the outcomes less
        probable than the one seen plus half of those as probable (a relative 1e-7 counts as equal), is above
        ``alpha``; 256 proportions at a time."""
        kept = []
        for chunk in np.array_split(p, max(1, -(-len(p) // 256))):
            pmf = self.pmf(chunk)
            seen = pmf[:, self.seen - self.first : self.seen - self.first + 1]
            less, tied = pmf < seen * (1.0 - 1e-7), np.abs(pmf - seen) <= seen * 1e-7
            midp = np.sum(np.where(less, pmf, 0.0), axis=1) + 0.5 * np.sum(np.where(tied, pmf, 0.0), axis=1)
            kept.append(midp > alpha)
        return np.concatenate(kept)

    def window(self, low: float, high: float) -> _Outcomes:
        """The outcomes that are not negligible (beyond 40 standard deviations and 60 more, under 1e-150) at any
        proportion in [low, high]."""
        reach = 40.0 * math.sqrt(self.n / 4.0) + 60.0
        first = max(self.first, math.floor(self.n * low - reach))
        last = min(self.first + len(self.log_choose) - 1, math.ceil(self.n * high + reach))
        return _Outcomes(self.n, first, self.log_choose[first - self.first : last - self.first + 1], self.seen)


def _bisect(inside: float, outside: float, keeps: Callable[[float], bool]) -> float:
    """Up to 52 halvings between a kept and a refused proportion (fewer where they are adjacent floats); the refused
    end."""
    for _ in range(52):
        mid = (inside + outside) / 2.0
        if mid in (inside, outside):
            break
        inside, outside = (mid, outside) if keeps(mid) else (inside, mid)
    return outside


def _midp_end(outcomes: _Outcomes, end: float, alpha: float, grid: int) -> float:
    """The end of the mid-p interval toward ``end`` (0 or 1): where the stretch of proportions the test keeps around
    the estimate ends. Past the point where the binomial's tail beyond the outcome seen is under 1e-12 it keeps none;
    before it, the candidates are ``grid`` evenly spaced proportions and, on both sides, each point where another
    outcome's probability crosses the seen one's (where the mid-p value jumps); then halvings from the last kept
    candidate toward the first refused one."""
    seen, estimate, toward = outcomes.seen, outcomes.seen / outcomes.n, 1.0 if end > 0.5 else -1.0

    def tail(p: float) -> float:
        pmf = outcomes.pmf(np.array([p]))[0]
        return float(pmf[: seen - outcomes.first + 1].sum() if toward > 0 else pmf[seen - outcomes.first :].sum())

    far = _bisect(estimate, end, lambda p: tail(p) >= 1e-12)
    near = outcomes.window(min(estimate, far), max(estimate, far))
    others = np.arange(near.first, near.first + len(near.log_choose))
    gap = others[(others - seen) * toward > 0] - seen  # the outcomes past the seen one, that way
    logit = (near.log_choose[seen - near.first] - near.log_choose[seen + gap - near.first]) / gap
    sides = [logit + side * 2e-7 / np.abs(gap) for side in (-1.0, 1.0)]  # each side, past the 1e-7 that is a tie
    crossings = [0.5 + 0.5 * np.tanh(side / 2.0) for side in sides]  # the logistic, without overflow
    candidates = np.concatenate([estimate + (far - estimate) * np.arange(1, grid) / grid, *crossings])
    candidates = np.unique(candidates[((candidates - estimate) * toward > 0) & ((far - candidates) * toward > 0)])
    candidates = candidates if toward > 0 else candidates[::-1]  # nearest the estimate first
    kept = near.keeps(candidates, alpha)
    first_out = len(candidates) if kept.all() else int(np.argmin(kept))
    inside = candidates[first_out - 1] if first_out > 0 else estimate
    outside = candidates[first_out] if first_out < len(candidates) else far
    return float(_bisect(inside, outside, lambda p: bool(near.keeps(np.array([p]), alpha)[0])))


def accuracy_interval(successes: int, total: int, confidence: float = CONFIDENCE, grid: int = 256) -> Interval:
    """An accuracy's interval (id-acc: ``successes`` correct of ``total``): the stretch of proportions around the
    estimate that Sterne's test with the mid-p value keeps (Sterne 1954; Lancaster 1961; Fay 2010's ``minlike`` with
    ``midp``). Sterne's test keeps the most probable outcomes first, and the mid-p value stops where their mass is
    nearest the confidence, so at a true proportion the interval covers about as near 95% as the binomial's steps
    allow (docs/method.md, "Measured coverage"). The ends are 0 with no successes and 1 with no failures, never both
    (:func:`_midp_end`)."""
    if total <= 0 or not 0 <= successes <= total:
        raise HarnessError(f"a proportion needs 0 <= successes <= total and total > 0, got {successes} of {total}")
    _z(confidence)
    outcomes, alpha = _Outcomes(total, 0, _log_choose(total), successes), 1.0 - confidence
    low = _midp_end(outcomes, 0.0, alpha, grid) if successes > 0 else 0.0
    high = _midp_end(outcomes, 1.0, alpha, grid) if successes < total else 1.0
    return Interval(successes / total, low, high, ACC_METHOD, confidence)


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
