"""Paired comparisons of two entries (harness/method/paired.py): DeLong's variance of a difference of correlated
AUROCs where the entries share images and roles, coverage of the paired interval where they share only part (other
levels, other partitions of the ID images), and no false certainty at an AUROC of 1."""

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.errors import HarnessError
from harness.method.intervals import auroc_covariance
from harness.method.paired import compare_entries, count_floor
from leaderboard.per_image import SCHEMA

PHI = lambda x: 0.5 * math.erfc(-x / math.sqrt(2.0))  # noqa: E731


def table(id_scores, correct, ood_scores, levels) -> dict:
    """A per-image table (the file's columns): ID test rows, then OOD test rows with ``levels`` (per row, a list)."""
    m, n = len(id_scores), len(ood_scores)
    return {
        "key": [f"id{i:05d}" for i in range(m)] + [f"ood{j:05d}" for j in range(n)],
        "split": ["id_test"] * m + ["ood_test"] * n,
        "score": np.r_[id_scores, ood_scores].astype(np.float64),
        "correct": [bool(c) for c in correct] + [None] * n,
        "levels": [[] for _ in range(m)] + [list(v) for v in levels],
    }


def direct_delong(pos_a, neg_a, pos_b, neg_b) -> float:
    """DeLong's variance of A_a - A_b on the same positives and negatives, from the O(m n) kernel (a tie counts
    1/2): ``c' (S10 / m + S01 / n) c`` with ``c = (1, -1)`` (DeLong et al. 1988; pROC's roc.test)."""
    psi = lambda p, n: (p[:, None] > n[None, :]) + 0.5 * (p[:, None] == n[None, :])  # noqa: E731
    ka, kb = psi(pos_a, neg_a), psi(pos_b, neg_b)
    v10, v01 = np.stack([ka.mean(1), kb.mean(1)]), np.stack([ka.mean(0), kb.mean(0)])
    s = np.cov(v10) / len(pos_a) + np.cov(v01) / len(neg_a)
    return float(s[0, 0] + s[1, 1] - 2 * s[0, 1])


def test_same_images_and_roles_give_delongs_variance_of_a_correlated_difference():
    rng = np.random.default_rng(3)
    m, n = 23, 17
    shared = rng.normal(size=m + n)
    a = np.round(shared + np.r_[np.full(m, 0.8), np.zeros(n)] + 0.5 * rng.normal(size=m + n), 1)  # ties
    b = np.round(shared + np.r_[np.full(m, 0.5), np.zeros(n)] + 0.7 * rng.normal(size=m + n), 1)
    correct = rng.random(m) < 0.6
    levels = [[0, 1]] * 9 + [[1]] * 8  # level 1 holds every OOD row, level 0 the first 9
    c = compare_entries(table(a[:m], correct, a[m:], levels), table(b[:m], correct, b[m:], levels))
    for level, rows in ((0, slice(0, 9)), (1, slice(0, n))):
        expected = direct_delong(a[:m], a[m:][rows], b[:m], b[m:][rows])
        assert c.levels[level].se ** 2 == pytest.approx(expected, rel=1e-12)
    expected = direct_delong(a[:m][correct], a[:m][~correct], b[:m][correct], b[:m][~correct])
    assert c.id_auroc.se**2 == pytest.approx(expected, rel=1e-12)
    assert c.id_auroc.shared == m and c.levels[0].shared == m + 9 and not c.id_auroc.floored
    _, covariance = auroc_covariance(a[:m], a[m:], [np.arange(9), np.arange(n)])  # the mean's variance
    itself = compare_entries(table(a[:m], correct, a[m:], levels), table(a[:m], correct, a[m:], levels))
    assert itself.mean_ood_auroc.unpaired_se**2 / 2 == pytest.approx(covariance.mean(), rel=1e-12)
    assert c.levels[0].different() == (c.levels[0].p_value < 0.05) and c.levels[0].different(alpha=1.0)


def draw(rng, m: int = 150, classes: int = 12, per_class: int = 15) -> tuple[dict, dict, dict]:
    """Two correlated entries with known true AUROCs: their scores share an image effect (correlation 0.6), their ID
    predictions' correctness agrees on 70% of the images, and B's 3 levels hold other OOD classes than A's (each
    level shares half its classes with one of A's). Returns both tables and, per entry, the true level AUROCs and
    id-auroc (scores are binormal given the class and the correctness, with unit variance)."""
    mu, kappa, delta = {"a": 1.2, "b": 1.0}, {"a": 1.0, "b": 1.4}, np.linspace(-1.0, 1.0, classes)
    cls = np.repeat(np.arange(classes), per_class)
    level_of = {"a": np.arange(classes) // 4, "b": ((np.arange(classes) + 2) % classes) // 4}
    image = rng.normal(0.0, math.sqrt(0.6), m + len(cls))
    right_a = rng.random(m) < 0.8
    right = {"a": right_a, "b": np.where(rng.random(m) < 0.7, right_a, rng.random(m) < 0.7)}
    share_right = {"a": 0.8, "b": 0.7 * 0.8 + 0.3 * 0.7}
    tables, truth = {}, {}
    for e in "ab":
        noise = rng.normal(0.0, math.sqrt(0.4), m + len(cls))
        ids = mu[e] + kappa[e] * right[e] + image[:m] + noise[:m]
        tables[e] = table(ids, right[e], delta[cls] + image[m:] + noise[m:], [[lv] for lv in level_of[e][cls]])
        p, root2 = share_right[e], math.sqrt(2.0)
        by_class = np.array(
            [p * PHI((mu[e] + kappa[e] - d) / root2) + (1 - p) * PHI((mu[e] - d) / root2) for d in delta]
        )
        truth[e] = [by_class[level_of[e] == lv].mean() for lv in range(3)] + [PHI(kappa[e] / root2)]
    return tables["a"], tables["b"], truth


def test_the_paired_interval_covers_where_entries_share_part_of_their_images():
    """300 draws of two entries with different levels and partitions: each level's difference, the mean's and the
    id-auroc's paired 95% intervals cover the true difference in 92-98% of them, and the paired standard error of
    the mean is well below the unpaired one."""
    rng = np.random.default_rng(0)
    hits, ratios = {"level": [], "mean": [], "id": []}, []
    for _ in range(300):
        a, b, truth = draw(rng)
        c = compare_entries(a, b)
        true = [ta - tb for ta, tb in zip(truth["a"], truth["b"])]
        hits["level"] += [d.low <= t <= d.high for d, t in zip(c.levels, true[:3])]
        hits["mean"].append(c.mean_ood_auroc.low <= np.mean(true[:3]) <= c.mean_ood_auroc.high)
        hits["id"].append(c.id_auroc.low <= true[3] <= c.id_auroc.high)
        ratios.append(c.mean_ood_auroc.unpaired_se / c.mean_ood_auroc.se)
    for name, hit in hits.items():
        assert 0.92 <= np.mean(hit) <= 0.98, (name, np.mean(hit))
    assert np.median(ratios) > 1.3


def test_identical_entries_differ_by_exactly_zero():
    a, _, _ = draw(np.random.default_rng(1), m=40, classes=12, per_class=4)
    c = compare_entries(a, pd.DataFrame(a))
    for d in [*c.levels, c.mean_ood_auroc, c.id_auroc]:
        assert (d.estimate, d.se, d.low, d.high, d.p_value, d.floored) == (0.0, 0.0, 0.0, 0.0, 1.0, False)
        assert d.unpaired_se > 0


def test_an_auroc_of_one_on_both_sides_is_no_certainty():
    """Both entries separate perfectly, with other scores: the difference is 0 with the count floors' width, not a
    point; one side perfect: its floor joins the other's DeLong variance."""
    rng = np.random.default_rng(2)
    m, n = 30, 20
    ids, oods = rng.normal(5.0, 1.0, m), rng.normal(0.0, 1.0, n)
    correct = np.r_[np.ones(25, bool), np.zeros(5, bool)]
    levels = [[0]] * n
    c = compare_entries(table(ids, correct, oods, levels), table(ids * 2.0 + 1.0, correct, oods * 3.0, levels))
    floor = count_floor(m, n)
    level = c.levels[0]
    assert (level.a, level.b, level.estimate, level.p_value, level.floored) == (1.0, 1.0, 0.0, 1.0, True)
    assert level.se == pytest.approx(math.sqrt(2 * floor), rel=1e-12) and level.high - level.low > 0.05
    assert 0.0 < floor < variance_at_half(m, n)
    worse = table(ids, correct, np.r_[oods[:-2], 6.0, 7.0], levels)  # two OOD images above most ID ones
    one = compare_entries(table(ids, correct, oods, levels), worse).levels[0]
    alone = compare_entries(worse, worse).levels[0].unpaired_se ** 2 / 2
    assert one.floored and one.se**2 == pytest.approx(floor + alone, rel=1e-12) and one.estimate > 0


def variance_at_half(m: int, n: int) -> float:
    """The perfect-separation variance at an AUROC of 1/2, where it is largest."""
    from harness.method.paired import perfect_variance

    return float(perfect_variance(0.5, m, n))


def test_rank_identical_entries_are_not_certain_either():
    """Scores that order every image alike (a monotone transform) differ by 0, but only identical scores give a
    zero-width interval."""
    a, _, _ = draw(np.random.default_rng(4), m=40, classes=12, per_class=4)
    b = {**a, "score": np.exp(a["score"])}
    d = compare_entries(a, b).mean_ood_auroc
    assert d.estimate == 0.0 and d.p_value == 1.0 and d.floored and d.high > 0.0 > d.low


def test_images_only_one_entry_saw_add_only_to_its_variance():
    """B lacks A's first OOD images: those images' influence counts once, in A's variance, and the level's shared
    images are the others."""
    a, b, _ = draw(np.random.default_rng(5), m=60, classes=12, per_class=6)
    ood = [i for i, s in enumerate(b["split"]) if s == "ood_test"]
    keep = [i for i in range(len(b["key"])) if i not in ood[:6]]  # class 0: in level 0 of both
    cut = {k: [v[i] for i in keep] if isinstance(v, list) else v[keep] for k, v in b.items()}
    c = compare_entries(a, cut)
    assert c.levels[0].shared == 60 + 6 and c.levels[2].shared == 60 + 12
    assert c.num_levels == (3, 3)


def test_bad_tables_are_refused_in_one_line():
    a, _, _ = draw(np.random.default_rng(6), m=20, classes=12, per_class=3)
    with pytest.raises(HarnessError, match="lacks the column"):
        compare_entries({k: v for k, v in a.items() if k != "levels"}, a)
    with pytest.raises(HarnessError, match="share no ID test image"):
        compare_entries(a, {**a, "key": [f"x{k}" for k in a["key"]]})
    with pytest.raises(HarnessError, match="'correct' value"):
        compare_entries(a, {**a, "correct": [None] * len(a["key"])})
    with pytest.raises(HarnessError, match="NaN"):
        compare_entries(a, {**a, "score": np.r_[np.nan, a["score"][1:]]})


def width_script():
    from glyph_fixtures import load_example

    return load_example(Path(__file__).resolve().parents[1] / "benchmarks" / "paired_width.py")


def test_the_width_script_prints_paired_and_unpaired_widths(tmp_path, capsys):
    module = width_script()
    a, b, _ = draw(np.random.default_rng(7))
    for name, t in (("a", a), ("b", b)):
        pd.DataFrame(t).to_parquet(tmp_path / f"{name}.parquet")
    assert module.main([str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")]) == 0
    printed = capsys.readouterr().out
    mean = compare_entries(a, b).mean_ood_auroc
    line = next(row for row in printed.splitlines() if row.strip().startswith("mean ood-auroc"))
    assert f"{mean.unpaired_se / mean.se:.4g}" in line.split() and f"{mean.se:.4g}" in line.split()
    assert module.main([str(tmp_path / "a.parquet"), str(tmp_path / "missing.parquet")]) == 2


@pytest.mark.slow
def test_a_runs_tables_give_its_records_aurocs_bit_for_bit(tiny_glyphs):
    """The width script's tables of a real run (the run's per-image files' tables, from its split scores): the
    comparison's sides are the run's level ood-aurocs, mean and id-auroc, to the last bit."""
    from glyph_fixtures import CNN
    from harness.run import evaluate

    module = width_script()
    run = evaluate(CNN, benchmark=tiny_glyphs, kappas=["softmax", "entropy"], device="cpu", progress=False)
    tables = module.tables_from_evaluation(run)
    assert list(tables["softmax"].columns) == SCHEMA.names  # the per-image file's columns
    c = compare_entries(tables["softmax"], tables["entropy"])
    soft, ent = (next(r for r in run.results if r.kappa == k) for k in ("softmax", "entropy"))
    assert [d.a for d in c.levels] == [row["ood_auroc"] for row in soft.rows]
    assert [d.b for d in c.levels] == [row["ood_auroc"] for row in ent.rows]
    assert c.mean_ood_auroc.a == pytest.approx(soft.mean_ood_auroc, abs=1e-15)
    assert (c.id_auroc.a, c.id_auroc.b) == (soft.id["auroc"], ent.id["auroc"])
    assert c.mean_ood_auroc.se < c.mean_ood_auroc.unpaired_se
