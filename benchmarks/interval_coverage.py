"""The simulated coverage of every 95% interval a record carries, and of the bootstrap (figures, not a test).

One line per cell: the interval, the data, the sample sizes, the true value, the share of replicates whose interval
holds it, the share of zero width, and whether the coverage is within 93-97% ("ok"; "ok one-sided" where it is
above 97% but each replicate's interval reaches 0 or 1 more often than not, so that only one tail can miss).

- **ood-auroc / id-auroc** (one AUROC, ``auroc_interval``): binormal scores, positives ~ N(d, 1), negatives ~ N(0, 1)
  with ``d = sqrt(2) Phi^-1(A)`` for the true AUROC ``A``; ``cont`` as drawn, ``round`` rounded to halves (ties
  within and across), ``top`` clipped so that a third of all scores tie at the top (a saturated softmax). The true
  AUROC of the rounded and clipped scores is computed from their distributions (a tie counts 1/2).
- **mean ood-auroc** (``mean_auroc_interval``): 5 levels sharing the positives, each with its own negatives, the
  gaps ``d, 0.9 d, ..., 0.6 d``.
- **id-acc** (``accuracy_interval``): Binomial(n, p), its exact coverage (a sum over every outcome); where no interval
  can cover 93-97% (the binomial's steps jump over the band), the line says so and names the nearest coverages.
- **bootstrap** (``bootstrap_interval``, in no record): AURC at 2% error and the ECE of a calibrated model, n = 500.

    python benchmarks/interval_coverage.py [--replicates 2000] [--bootstrap-replicates 200] [--seed 0]
"""

from __future__ import annotations

import argparse
import itertools
import math
import time

import numpy as np
from scipy import integrate, optimize
from scipy.stats import binom, norm

from harness.method.intervals import (
    accuracy_interval,
    adapted_variance,
    bootstrap_interval,
    correlation,
    mean_variance_at,
    score_bounds,
    side_ratios,
)
from harness.method.selective import aurc, ece

SIZES = [(20, 20), (20, 200), (200, 20), (200, 200), (20, 2000), (2000, 20), (2000, 2000), (1770, 30), (30, 1770)]
AUROCS = [0.5, 0.7, 0.9, 0.95, 0.99, 0.999]
KINDS = ["cont", "round", "top"]
LEVEL_GAPS = np.array([1.0, 0.9, 0.8, 0.7, 0.6])
ACC_SIZES = [20, 50, 200, 2000]
ACCURACIES = [0.5, 0.9, 0.99, 0.999]
STEP = 0.5  # the rounding of the "round" scores


def placements(pos: np.ndarray, neg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per replicate (rows), DeLong's V10 (share of negatives below each positive) and V01 (share of positives above
    each negative), a tie 1/2: all rows at once, each shifted past the one before so that one sort serves them all."""
    (reps, m), n = pos.shape, neg.shape[1]
    low = min(pos.min(), neg.min())
    shift = (np.arange(reps) * (max(pos.max(), neg.max()) - low + 1.0))[:, None]
    p, q = pos - low + shift, neg - low + shift
    sorted_neg, sorted_pos = np.sort(q, axis=None), np.sort(p, axis=None)

    def count(sorted_values, values, per_row):
        ties = np.searchsorted(sorted_values, values.ravel(), "left") + np.searchsorted(
            sorted_values, values.ravel(), "right"
        )
        return ties.reshape(values.shape) / 2.0 - (np.arange(reps) * per_row)[:, None]

    return count(sorted_neg, p, n) / n, 1.0 - count(sorted_pos, q, m) / m


def _top_clip(d: float, m: int, n: int) -> float:
    return optimize.brentq(lambda c: (m * norm.sf(c - d) + n * norm.sf(c)) / (m + n) - 1.0 / 3.0, -12.0, 16.0)


def true_auroc(kind: str, d: float, m: int, n: int) -> float:
    """P(X > Y) + P(X = Y) / 2 for X ~ N(d, 1), Y ~ N(0, 1) as the kind transforms them."""
    if kind == "cont":
        return float(norm.cdf(d / math.sqrt(2.0)))
    if kind == "round":
        k = np.arange(-60, 80) * STEP
        px = norm.cdf(k + STEP / 2 - d) - norm.cdf(k - STEP / 2 - d)
        py = norm.cdf(k + STEP / 2) - norm.cdf(k - STEP / 2)
        return float(np.sum(px * (np.cumsum(py) - py / 2.0)))
    c = _top_clip(d, m, n)
    below = integrate.quad(lambda y: norm.pdf(y) * norm.sf(y - d), -np.inf, c)[0]
    return below + 0.5 * norm.sf(c - d) * norm.sf(c)


def draw(rng, kind: str, d: float, m: int, n: int, reps: int) -> tuple[np.ndarray, np.ndarray]:
    pos, neg = rng.normal(d, 1.0, (reps, m)), rng.normal(0.0, 1.0, (reps, n))
    if kind == "round":
        return np.round(pos / STEP), np.round(neg / STEP)
    if kind == "top":
        c = _top_clip(d, m, n)
        return np.minimum(pos, c), np.minimum(neg, c)
    return pos, neg


def verdict(covered: np.ndarray, low: np.ndarray, high: np.ndarray) -> tuple[float, float, str]:
    coverage, zero = float(covered.mean()), float(np.mean(high - low <= 0.0))
    one_sided = np.mean((low <= 0.0) | (high >= 1.0)) > 0.5
    if 0.93 <= coverage <= 0.97:
        return coverage, zero, "ok"
    return coverage, zero, "ok one-sided" if coverage > 0.97 and one_sided else "OUT"


def auroc_bounds(pos: np.ndarray, neg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``auroc_interval`` of every replicate (row) at once."""
    v10, v01 = placements(pos, neg)
    m, n, estimate = pos.shape[1], neg.shape[1], v10.mean(axis=1)
    ratios = side_ratios(estimate, v10, v01)
    return score_bounds(estimate, lambda t: adapted_variance(t, m, n, ratios))


def mean_bounds(pos: np.ndarray, negs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``mean_auroc_interval`` of every replicate at once, for disjoint levels (one array of negatives each) sharing
    the positives: DeLong's covariance is S10 across levels plus S01 on the diagonal."""
    parts = [placements(pos, neg) for neg in negs]
    m, counts = pos.shape[1], [neg.shape[1] for neg in negs]
    v10 = np.stack([part[0] for part in parts], axis=1)  # replicates, levels, positives
    centred = v10 - v10.mean(axis=2, keepdims=True)
    cov = np.einsum("rlm,rkm->rlk", centred, centred) / (m - 1) / m
    for level, (_, v01) in enumerate(parts):
        cov[:, level, level] += v01.var(axis=1, ddof=1) / counts[level]
    rho, aurocs = correlation(cov), v10.mean(axis=2)
    ratios = np.stack([side_ratios(aurocs[:, k], v10[:, k], v01) for k, (_, v01) in enumerate(parts)], axis=1)
    return score_bounds(aurocs.mean(axis=1), lambda t: mean_variance_at(t, rho, m, counts, ratios))


def auroc_cells(rng, reps: int, sizes, aurocs, kinds):
    for kind in kinds:
        for m, n in sizes:
            for target in aurocs:
                d = math.sqrt(2.0) * norm.ppf(target)
                truth = true_auroc(kind, d, m, n)
                low, high = auroc_bounds(*draw(rng, kind, d, m, n, reps))
                yield ("auroc", kind, f"{m}/{n}", target, truth, *verdict((low <= truth) & (truth <= high), low, high))


def mean_cells(rng, reps: int, sizes, aurocs):
    """5 disjoint levels of ``n`` negatives each, sharing the ``m`` positives, the gaps ``d, 0.9 d, ..., 0.6 d``."""
    for m, n in sizes:
        for target in aurocs:
            gaps = math.sqrt(2.0) * norm.ppf(target) * LEVEL_GAPS
            truth = float(np.mean(norm.cdf(gaps / math.sqrt(2.0))))
            pos = rng.normal(0.0, 1.0, (reps, m))
            low, high = mean_bounds(pos, [rng.normal(-g, 1.0, (reps, n)) for g in gaps])
            covered = (low <= truth) & (truth <= high)
            yield ("mean-auroc", "cont", f"{m}/{n}x5", target, truth, *verdict(covered, low, high))


def attainable(pmf: np.ndarray) -> tuple[float, float] | None:
    """None where some interval (one stretch of outcomes covered) can cover 93-97%; else the nearest coverages below
    and above that any can: the masses of the stretches of outcomes, the binomial's steps."""
    cumulative = np.concatenate([[0.0], np.cumsum(pmf)])
    masses = (cumulative[None, :] - cumulative[:, None]).ravel()
    if np.any((masses >= 0.93) & (masses <= 0.97)):
        return None
    return float(masses[masses < 0.93].max()), float(masses[masses > 0.97].min())


def accuracy_cells(sizes, accuracies):
    """The exact coverage (binomial sums over every outcome, no replicates needed) of ``accuracy_interval``."""
    for n in sizes:
        ends = np.array([(found.low, found.high) for found in (accuracy_interval(k, n) for k in range(n + 1))])
        for p in accuracies:
            pmf = binom.pmf(np.arange(n + 1), n, p)
            coverage = float(pmf[(ends[:, 0] <= p) & (p <= ends[:, 1])].sum())
            zero = float(pmf[ends[:, 1] - ends[:, 0] <= 0.0].sum())
            word, steps = "ok" if 0.93 <= coverage <= 0.97 else "OUT", attainable(pmf)
            if word == "OUT" and steps is not None:
                word = f"no interval can: {steps[0]:.3f} or {steps[1]:.3f}"
            yield ("accuracy", "binomial-exact", str(n), p, p, coverage, zero, word)


def _bootstrap_cell(rng, reps: int, name: str, statistic, sample, truth: float):
    covered, lows, highs = np.zeros(reps, bool), np.empty(reps), np.empty(reps)
    for r in range(reps):
        conf, correct = sample(rng, 500)
        interval = bootstrap_interval(statistic, conf, correct, strata=correct, seed=r)
        lows[r], highs[r] = interval.low, interval.high
        covered[r] = interval.low <= truth <= interval.high
    return ("bootstrap", name, "500", truth, truth, *verdict(covered, lows, highs))


def _selective(rng, n: int):
    """2% error; the kappa of a correct prediction ~ N(2, 1), of a wrong one ~ N(0, 1)."""
    correct = rng.random(n) >= 0.02
    return rng.normal(2.0 * correct, 1.0), correct


def _calibrated(rng, n: int):
    conf = rng.uniform(0.5, 1.0, n)
    return conf, rng.random(n) < conf


def bootstrap_cells(rng, reps: int):
    """AURC's true value from 2,000,000 draws; a calibrated model's ECE is 0."""
    yield _bootstrap_cell(
        rng, reps, "aurc@2%err", aurc, _selective, aurc(*_selective(np.random.default_rng(1), 2_000_000))
    )
    yield _bootstrap_cell(rng, reps, "ece-calibrated", ece, _calibrated, 0.0)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=2000)
    parser.add_argument("--bootstrap-replicates", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng, start = np.random.default_rng(args.seed), time.perf_counter()
    cells = itertools.chain(
        auroc_cells(rng, args.replicates, SIZES, AUROCS, KINDS),
        mean_cells(rng, args.replicates, SIZES, AUROCS),
        accuracy_cells(ACC_SIZES, ACCURACIES),
        bootstrap_cells(rng, args.bootstrap_replicates),
    )
    print(f"{'interval':<11}{'data':<15}{'sizes':<12}{'target':>7}{'truth':>8}{'cover':>7}{'zero':>6}  verdict")
    count = out = impossible = zero_width = 0
    for name, kind, sizes, target, truth, coverage, zero, word in cells:
        print(
            f"{name:<11}{kind:<15}{sizes:<12}{target:>7g}{truth:>8.4f}{coverage:>7.3f}{zero:>6.2f}  {word}", flush=True
        )
        count, out, zero_width = count + 1, out + (word == "OUT"), zero_width + (zero > 0)
        impossible += word.startswith("no interval can")
    print(
        f"{count} cells, {out} outside 93-97% where an interval can cover it, {impossible} where none can, "
        f"{zero_width} with an interval of zero width ({time.perf_counter() - start:.0f} s)"
    )


if __name__ == "__main__":
    main()
