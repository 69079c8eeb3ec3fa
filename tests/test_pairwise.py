"""All pairs at once (harness/method/pairwise.py): each pair's paired standard error and test are
:func:`compare_entries`'s, on entries with other levels, identical and rank-identical sides, perfect separations and
too few mistakes; the id-acc difference is McNemar's paired test; rank ranges follow the tests."""

import math

import numpy as np
import pytest

from harness.method.paired import compare_entries
from harness.method.pairwise import pairwise, rank_ranges
from test_paired import draw, table


def entries() -> list[dict]:
    """Six entries of one benchmark: two correlated draws (other levels), one rank-identical to the first (a
    monotone transform), one identical to the second, one that separates every level perfectly with 1 wrong ID
    prediction (no id-auroc), and one with fewer levels."""
    a, b, _ = draw(np.random.default_rng(11), m=60, classes=12, per_class=5)
    perfect = {**a, "score": np.where(np.asarray(a["split"]) == "id_test", 10.0, 0.0) + np.arange(len(a["key"])) * 1e-3}
    perfect["correct"] = [True] * 59 + [False] + [None] * (len(a["key"]) - 60)
    short = {**b, "levels": [[lv for lv in v if lv < 2] for v in b["levels"]]}
    return [a, b, {**a, "score": np.exp(a["score"])}, dict(b), perfect, short]


def test_every_pair_is_compare_entries_s_comparison():
    tables = entries()
    found = pairwise(tables)
    assert list(found.values) == ["mean", "id_acc", "id_auroc", "l0", "l1", "l2"]
    for i, ta in enumerate(tables):
        for j, tb in enumerate(tables):
            c = compare_entries(ta, tb)
            expected = {"mean": c.mean_ood_auroc, "id_acc": c.id_acc, "id_auroc": c.id_auroc}
            expected.update({f"l{k}": d for k, d in enumerate(c.levels)})
            for key in found.values:
                d, want = found.difference(key, i, j), expected.get(key)
                if want is None:
                    assert d is None, (key, i, j)
                    continue
                assert d.estimate == want.estimate and (d.a, d.b) == (want.a, want.b)
                assert d.se == pytest.approx(want.se, rel=1e-9, abs=1e-15), (key, i, j)
                assert (d.low, d.high) == pytest.approx((want.low, want.high), rel=1e-9, abs=1e-12)
                assert found.different(key, i, j) == want.different(), (key, i, j)
    assert found.se["mean"][1, 3] == 0.0 and found.se["mean"][0, 2] > 0.0  # identical; rank-identical
    assert math.isnan(found.values["l2"][5]) and math.isnan(found.values["id_auroc"][4])


def test_the_id_acc_difference_is_mcnemars_test():
    """Same images: the paired variance is McNemar's, (b + c - (b - c)^2 / n) / n^2 times n / (n - 1)."""
    rng = np.random.default_rng(12)
    m = 200
    right_a = rng.random(m) < 0.8
    right_b = np.where(rng.random(m) < 0.8, right_a, rng.random(m) < 0.7)
    scores = rng.normal(size=m + 20)
    ta = table(scores[:m], right_a, scores[m:], [[0]] * 20)
    tb = table(scores[:m], right_b, scores[m:], [[0]] * 20)
    d = compare_entries(ta, tb).id_acc
    b, c = int(np.sum(right_a & ~right_b)), int(np.sum(~right_a & right_b))
    assert d.estimate == pytest.approx((b - c) / m, abs=1e-15)
    assert d.se**2 == pytest.approx((b + c - (b - c) ** 2 / m) / m**2 * m / (m - 1), rel=1e-12)
    everyone = table(scores[:m], np.ones(m, bool), scores[m:], [[0]] * 20)
    same = compare_entries(everyone, {**everyone, "score": scores * 2}).id_acc
    assert (same.estimate, same.se, same.p_value) == (0.0, 0.0, 1.0)  # right on the same images: McNemar's 0
    one_wrong = table(scores[:m], np.r_[False, np.ones(m - 1, bool)], scores[m:], [[0]] * 20)
    near = compare_entries(everyone, one_wrong).id_acc
    assert near.floored and near.estimate == pytest.approx(1 / m) and near.p_value > 0.3  # all right: a floor


def test_rank_ranges_follow_the_paired_tests():
    values = [0.9, 0.8, 0.79, float("nan"), 0.5]
    apart = {(0, 1), (0, 2), (0, 4), (1, 4), (2, 4)}
    test = lambda i, j: (min(i, j), max(i, j)) in apart  # noqa: E731
    assert rank_ranges(values, test) == [(1, 1), (2, 3), (2, 3), None, (4, 4)]
    assert rank_ranges(values, test, higher_is_better=False) == [(4, 4), (2, 3), (2, 3), None, (1, 1)]
    assert rank_ranges(values, lambda i, j: False) == [(1, 4), (1, 4), (1, 4), None, (1, 4)]
    assert pairwise([]).values == {}
