"""The intervals: DeLong's variance against its O(n^2) definition, the AUROC against scikit-learn, the score intervals
against their closed forms, and the coverage of the 95% intervals measured by simulation (1,000 seeded draws each:
nominal 95% must land in 93-97%; on the hard cells of benchmarks/interval_coverage.py, at least 90% of 300)."""

import math
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.special import ndtri, owens_t
from scipy.stats import binom, rankdata
from sklearn.metrics import roc_auc_score

from glyph_fixtures import load_example
from harness.errors import HarnessError
from harness.method.intervals import (
    accuracy_interval,
    auroc_covariance,
    auroc_interval,
    binormal_component,
    bootstrap_interval,
    mean_auroc_interval,
    midranks,
    normal_quantile,
)
from harness.method.metrics import auroc

PHI = NormalDist().cdf
DRAWS = 1000


def slow_delong(positive, negatives):
    """DeLong et al. (1988) from the definition: psi(x, y) = 1 if x > y, 1/2 if equal; structural components V10 (per
    positive, the mean of psi over a level's negatives) and V01 (per negative, over the positives); the covariance of
    AUROCs that share the positives and have disjoint negatives is S10[l, l'] / m + [l = l'] S01_l / n_l."""
    x = np.asarray(positive, float)
    psis = [(x[:, None] > y[None, :]) + 0.5 * (x[:, None] == y[None, :]) for y in negatives]
    aurocs = np.array([psi.mean() for psi in psis])
    v10 = np.array([psi.mean(axis=1) for psi in psis])
    m = len(x)
    cov = np.cov(v10, ddof=1).reshape(len(psis), len(psis)) / m
    for level, psi in enumerate(psis):
        cov[level, level] += psi.mean(axis=0).var(ddof=1) / psi.shape[1]
    return aurocs, cov


@pytest.mark.parametrize("seed", range(6))
def test_delong_against_its_definition_and_scikit_learn_with_ties(seed):
    rng = np.random.default_rng(seed)
    pos = rng.integers(0, 15, size=rng.integers(3, 300)) / 4.0  # coarse values: many ties, within and across
    negs = [rng.integers(-4, 10, size=rng.integers(3, 300)) / 4.0 for _ in range(3)]
    blocks = np.split(np.arange(sum(map(len, negs))), np.cumsum([len(n) for n in negs])[:-1])
    aurocs, cov = auroc_covariance(pos, np.concatenate(negs), blocks)
    want_aurocs, want_cov = slow_delong(pos, negs)
    np.testing.assert_allclose(aurocs, want_aurocs, rtol=0, atol=1e-12)
    np.testing.assert_allclose(cov, want_cov, rtol=1e-10, atol=1e-15)
    assert np.all(np.linalg.eigvalsh(cov) > 0)
    for level, neg in enumerate(negs):
        y = np.r_[np.ones(len(pos)), np.zeros(len(neg))]
        assert aurocs[level] == pytest.approx(roc_auc_score(y, np.r_[pos, neg]), abs=1e-12)
        assert aurocs[level] == auroc(pos, neg)  # the same number as the records' ood-auroc, to the bit
        single = auroc_interval(pos, neg)
        assert single.estimate == auroc(pos, neg)
        assert single.low <= single.estimate <= single.high


def test_midranks_are_scipys_average_ranks():
    values = np.random.default_rng(3).integers(0, 20, 500).astype(float)
    np.testing.assert_array_equal(midranks(values), rankdata(values, method="average"))


def binormal_model(t):
    """P(X > Y1, X > Y2) - t^2 under the equal-variance binormal model, from Owen's T (scipy)."""
    h = ndtri(t)
    return t - 2.0 * owens_t(h, 1.0 / math.sqrt(3.0)) - t * t


def test_normal_quantile_and_binormal_component_against_scipy():
    p = np.array([1e-12, 1e-4, 0.01, 0.3, 0.7, 0.99, 0.9999])
    np.testing.assert_allclose(normal_quantile(p), ndtri(p), rtol=2e-9)
    t = np.array([1e-6, 0.001, 0.1, 0.5, 0.8, 0.95, 0.999])
    np.testing.assert_allclose(binormal_component(t), binormal_model(t), rtol=1e-7)
    assert binormal_component(0.5) == pytest.approx(1 / 3 - 1 / 4, rel=1e-8)  # iid: X is the largest of 3 w.p. 1/3
    np.testing.assert_array_equal(binormal_component(np.array([0.0, 1.0])), [0.0, 0.0])


def test_hand_computed_delong_variance_and_score_interval():
    # pos (3, 2), neg (1, 2): V10 = (1, 3/4), V01 = (1, 3/4); var = 1/32 / 2 + 1/32 / 2 = 1/32
    aurocs, cov = auroc_covariance([3.0, 2.0], [1.0, 2.0])
    assert aurocs[0] == 0.875 and cov[0, 0] == pytest.approx(1 / 32)
    # each side: S = 1/32 (ddof 1), kurtosis 1, so relvar = (1 + 1) / 2 and nu = 2; ratio (2 S / M(0.875) + 20) / 22;
    # V(t) = [t (1 - t) + (1 + 1) ratio M(t)] / 4, the ends solve (0.875 - t)^2 = z^2 V(t)
    z2 = NormalDist().inv_cdf(0.975) ** 2
    ratio = (2 * (1 / 32) / binormal_model(0.875) + 20) / 22

    def gap(t, estimate=0.875, r=ratio):
        return (estimate - t) ** 2 - z2 * (t * (1 - t) + 2 * r * binormal_model(t)) / 4

    roots = [brentq(gap, 1e-9, 0.875), brentq(gap, 0.875, 1 - 1e-12)]
    interval = auroc_interval([3.0, 2.0], [1.0, 2.0])
    assert [interval.low, interval.high] == pytest.approx(roots, abs=1e-9)
    assert interval.method == "binormal-score-adapted" and interval.confidence == 0.95
    # a perfect separation: no spread on either side, so both ratios are 1: the one-sided bound from the counts
    perfect = auroc_interval([2.0, 3.0], [0.0, 1.0])
    assert (perfect.estimate, perfect.high) == (1.0, 1.0)
    assert perfect.low == pytest.approx(brentq(lambda t: gap(t, 1.0, 1.0), 1e-9, 1 - 1e-12), abs=1e-9)
    assert 0.3 < perfect.low < 0.7


def coverage_of_auroc(mu, m, n, seed):
    """Binormal scores, ID ~ N(mu, 1) against OOD ~ N(0, 1): the true AUROC is Phi(mu / sqrt 2)."""
    rng, truth = np.random.default_rng(seed), PHI(mu / math.sqrt(2.0))
    score = wald = 0
    for _ in range(DRAWS):
        x, y = rng.normal(mu, 1.0, m), rng.normal(0.0, 1.0, n)
        interval = auroc_interval(x, y)
        score += interval.low <= truth <= interval.high
        (a,), ((var,),) = auroc_covariance(x, y)
        wald += abs(a - truth) <= 1.959964 * math.sqrt(var)
    return score / DRAWS, wald / DRAWS


@pytest.mark.parametrize("mu", [1.2, 2.5])  # true AUROC 0.80 and 0.96
def test_auroc_interval_covers_95_percent(mu):
    score, wald = coverage_of_auroc(mu, m=100, n=150, seed=11)
    assert 0.93 <= score <= 0.97, score
    if mu == 2.5:  # near 1 the symmetric interval on the AUROC itself covers too rarely: why a score interval
        assert wald < score - 0.01, (wald, score)


def overlapping_levels(rng, mu, m, pool, width, num_levels=5, slope=1.5):
    """ID ~ N(mu, 1); each OOD sample has a position u ~ U(0, 1) and a score ~ N(slope u, 1); level l holds the OOD
    samples with u in [start_l, start_l + width), windows that overlap when width > 1 / num_levels. Returns the
    samples, the levels' masks and the true mean AUROC (the levels' AUROCs integrated over u)."""
    starts = np.linspace(0.0, 1.0 - width, num_levels)
    x, u = rng.normal(mu, 1.0, m), rng.random(pool)
    y = rng.normal(slope * u, 1.0)
    return x, y, [(u >= s) & (u < s + width) for s in starts], starts


def true_mean_auroc(mu, starts, width, slope=1.5):
    grid = (np.arange(4000) + 0.5) / 4000
    phi = np.vectorize(PHI)((mu - slope * grid) / math.sqrt(2.0))
    return float(np.mean([phi[(grid >= s) & (grid < s + width)].mean() for s in starts]))


@pytest.mark.parametrize(
    ("mu", "m", "pool", "width", "seed"),
    [
        (1.5, 100, 500, 0.2, 21),  # disjoint levels: they covary through the shared ID samples only
        (1.5, 300, 300, 0.6, 22),  # heavily overlapping levels: they also share OOD samples
    ],
)
def test_mean_over_levels_interval_covers_95_percent(mu, m, pool, width, seed):
    rng = np.random.default_rng(seed)
    truth = None
    full = variances_only = disjoint = 0
    for _ in range(DRAWS):
        x, y, levels, starts = overlapping_levels(rng, mu, m, pool, width)
        truth = true_mean_auroc(mu, starts, width) if truth is None else truth
        interval = mean_auroc_interval(x, y, levels)
        full += interval.low <= truth <= interval.high
        aurocs, cov = auroc_covariance(x, y, levels)
        variances_only += abs(aurocs.mean() - truth) <= 1.959964 * math.sqrt(np.trace(cov)) / len(aurocs)
        # the same levels as if no two shared an OOD sample: each level's negatives copied apart
        copies = [y[level] for level in levels]
        apart = np.split(np.arange(sum(map(len, copies))), np.cumsum([len(c) for c in copies])[:-1])
        _, cov_apart = auroc_covariance(x, np.concatenate(copies), apart)
        disjoint += abs(aurocs.mean() - truth) <= 1.959964 * math.sqrt(cov_apart.sum()) / len(aurocs)
        if width * 5 <= 1:  # disjoint levels: copying their negatives apart changes nothing
            np.testing.assert_allclose(cov_apart, cov, rtol=1e-12, atol=1e-18)
    assert 0.93 <= full / DRAWS <= 0.97, full / DRAWS
    assert variances_only / DRAWS < 0.85, variances_only / DRAWS  # ignoring the covariance is far off: it matters
    if width * 5 > 1:  # and where levels overlap, so does the covariance through the shared OOD samples
        assert disjoint / DRAWS < 0.9, disjoint / DRAWS


def test_overlapping_levels_share_their_negatives_in_the_covariance():
    rng = np.random.default_rng(5)
    x, y = rng.normal(1.0, 1.0, 50), rng.normal(0.0, 1.0, 60)
    first, second = np.arange(0, 40), np.arange(20, 60)
    _, cov = auroc_covariance(x, y, [first, second])
    # the negatives' part of the cross term, from its definition over the 20 shared samples
    psi = (x[:, None] > y[None, :]) + 0.5 * (x[:, None] == y[None, :])
    v01, a = psi.mean(axis=0), [psi[:, first].mean(), psi[:, second].mean()]
    shared = np.arange(20, 40)
    cross = np.sum((v01[shared] - a[0]) * (v01[shared] - a[1])) / math.sqrt(40 * 39 * 40 * 39)
    v10 = np.array([psi[:, first].mean(axis=1), psi[:, second].mean(axis=1)])
    assert cov[0, 1] == pytest.approx(np.cov(v10, ddof=1)[0, 1] / 50 + cross, rel=1e-12)
    assert cov[0, 1] == cov[1, 0]
    # masks and indices name the same levels
    masks = [np.isin(np.arange(60), first), np.isin(np.arange(60), second)]
    np.testing.assert_array_equal(auroc_covariance(x, y, masks)[1], cov)
    # one level: the mean's interval is the AUROC's
    one, single = mean_auroc_interval(x, y, [np.arange(60)]), auroc_interval(x, y)
    assert one.estimate == single.estimate
    assert (one.low, one.high) == pytest.approx((single.low, single.high), abs=1e-12)


def midp_value(k: int, n: int, p):
    """Sterne's mid-p value of ``k`` of ``n`` at each ``p``, from scipy's binomial pmf: the mass of the outcomes less
    probable than ``k`` and half of those as probable."""
    pmf = binom.pmf(np.arange(n + 1), n, np.asarray(p, dtype=float)[..., None])
    seen = pmf[..., k : k + 1]
    less, tied = pmf < seen * (1 - 1e-7), np.abs(pmf - seen) <= seen * 1e-7
    return np.sum(np.where(less, pmf, 0.0), axis=-1) + 0.5 * np.sum(np.where(tied, pmf, 0.0), axis=-1)


@pytest.mark.parametrize(("k", "n"), [(0, 10), (1, 10), (7, 10), (10, 10), (80, 100), (761, 1000), (39_012, 50_000)])
def test_the_accuracy_interval_ends_where_sternes_mid_p_test_turns(k, n):
    interval = accuracy_interval(k, n)
    assert interval.estimate == k / n and interval.method == "sterne-midp"
    assert interval.low < k / n < interval.high or interval.low < k / n == interval.high == 1.0 or k == 0
    for end, inward in ((interval.low, 1.0), (interval.high, -1.0)):
        if end in (0.0, 1.0):
            assert end == (0.0 if inward > 0 else 1.0) and (k == 0 if inward > 0 else k == n)
            continue
        step = inward * 1e-7 * min(end, 1 - end)  # past the 1e-7 of the pmf that counts as a tie
        assert midp_value(k, n, end - step) <= 0.05 < midp_value(k, n, end + step)


def test_the_accuracy_interval_is_the_stretch_the_test_keeps_around_the_estimate():
    """Against a brute-force scan of a fine grid: every proportion inside is kept, and the first ones outside are
    refused."""
    grid = np.linspace(1e-6, 1 - 1e-6, 20_001)
    for k in range(21):
        interval = accuracy_interval(k, 20)
        inside = grid[(grid > interval.low) & (grid < interval.high)]
        assert np.all(midp_value(k, 20, inside) > 0.05), k
        below, above = grid[grid < interval.low], grid[grid > interval.high]
        assert interval.low == 0.0 or midp_value(k, 20, below.max()) <= 0.05, k
        assert interval.high == 1.0 or midp_value(k, 20, above.min()) <= 0.05, k


def test_bootstrap_is_seeded_stratified_and_agrees_with_the_score_interval():
    rng = np.random.default_rng(7)
    scores = np.r_[rng.normal(1.5, 1.0, 300), rng.normal(0.0, 1.0, 200)]
    is_id = np.r_[np.ones(300, bool), np.zeros(200, bool)]
    seen = []

    def statistic(s, flags):
        seen.append(int(flags.sum()))
        return auroc(s[flags], s[~flags])

    first = bootstrap_interval(statistic, scores, is_id, strata=is_id, resamples=400, seed=3)
    assert set(seen) == {300}  # every resample keeps the stratum sizes
    again = bootstrap_interval(statistic, scores, is_id, strata=is_id, resamples=400, seed=3)
    other = bootstrap_interval(statistic, scores, is_id, strata=is_id, resamples=400, seed=4)
    assert first == again and first != other
    assert first.estimate == auroc(scores[is_id], scores[~is_id])
    assert first.method == "stratified-bootstrap-percentile"
    score = auroc_interval(scores[is_id], scores[~is_id])
    assert first.high - first.low == pytest.approx(score.high - score.low, rel=0.15)
    assert first.low == pytest.approx(score.low, abs=0.01) and first.high == pytest.approx(score.high, abs=0.01)


def test_bad_inputs_are_refused():
    with pytest.raises(HarnessError, match="at least 2"):
        auroc_interval([1.0], [0.0, 1.0])
    with pytest.raises(HarnessError, match="NaN"):
        auroc_interval([1.0, np.nan], [0.0, 1.0])
    with pytest.raises(HarnessError, match="twice"):
        auroc_covariance([1.0, 2.0], [0.0, 1.0, 2.0], [np.array([0, 0, 1])])
    with pytest.raises(HarnessError, match="mask"):
        auroc_covariance([1.0, 2.0], [0.0, 1.0, 2.0], [np.array([True, False])])
    with pytest.raises(HarnessError, match="successes"):
        accuracy_interval(11, 10)
    with pytest.raises(HarnessError, match="one length"):
        bootstrap_interval(np.mean, np.ones(3), np.ones(4))


def coverage_script():
    return load_example(Path(__file__).resolve().parents[1] / "benchmarks" / "interval_coverage.py")


def test_intervals_cover_the_hard_cells_and_are_never_of_zero_width():
    """300 replicates of the cells where DeLong's interval failed: few wrong ID predictions (1,770/30), small samples
    near an AUROC of 1 (30/30 at 0.999, mostly perfect separations), ties at the top; and accuracy near 1, exactly."""
    cov = coverage_script()
    rng = np.random.default_rng(0)
    cells = [
        *cov.auroc_cells(rng, 300, [(1770, 30), (30, 30)], [0.999], ["cont", "top"]),
        *cov.mean_cells(rng, 300, [(1770, 30)], [0.99]),
    ]
    for name, kind, sizes, _, truth, coverage, zero, _ in cells:
        assert coverage >= 0.9 and zero == 0.0, (name, kind, sizes, truth, coverage, zero)
    # id-acc, exactly: in 93-97% wherever the binomial's steps let any interval be, and said where they do not
    accuracy = {
        (n, p): (coverage, word) for _, _, n, p, _, coverage, _, word in cov.accuracy_cells([20, 200], [0.9, 0.99])
    }
    assert accuracy.pop(("20", 0.99)) == (pytest.approx(0.9831, abs=1e-4), "no interval can: 0.818 or 0.983")
    assert all(0.93 <= coverage <= 0.97 and word == "ok" for coverage, word in accuracy.values()), accuracy
    # the script's vectorised intervals are the library's, replicate by replicate (ties, a perfect separation)
    pos, neg = np.round(rng.normal(2.0, 1.0, (4, 40))), np.round(rng.normal(0.0, 1.0, (4, 30)))
    pos[0] += 10.0
    for r, (low, high) in enumerate(zip(*cov.auroc_bounds(pos, neg))):
        want = auroc_interval(pos[r], neg[r])
        assert (low, high) == pytest.approx((want.low, want.high), abs=1e-12)
    negs = [neg, neg[:, :20] - 1.0]
    for r, (low, high) in enumerate(zip(*cov.mean_bounds(pos, negs))):
        want = mean_auroc_interval(pos[r], np.r_[negs[0][r], negs[1][r]], [np.arange(30), np.arange(30, 50)])
        assert (low, high) == pytest.approx((want.low, want.high), abs=1e-12)
    perfect = auroc_interval(np.arange(30.0) + 30, np.arange(30.0))
    assert perfect.estimate == perfect.high == 1.0 and perfect.low < 0.97
