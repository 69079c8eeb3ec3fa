"""The ID set's selective-prediction and calibration metrics against hand-computed values, the companion paper's
loops (rewritten here), exhaustive tie orders, and scikit-learn."""

import itertools
import math

import numpy as np
import pytest
from sklearn.metrics import brier_score_loss, log_loss

from harness.errors import HarnessError
from harness.method.selective import (
    aurc,
    brier,
    coverage_at_accuracy,
    e_aurc,
    ece,
    nll,
    optimal_aurc,
    risk_coverage,
    selective_metrics,
)


def paper_aurc(confidence, correct):
    """The companion paper's loop: in decreasing confidence, AURC = the mean over i of (errors in the first i) / i."""
    order = sorted(range(len(confidence)), key=lambda i: -confidence[i])  # stable: ties in input order
    total, errors = 0.0, 0
    for kept, i in enumerate(order, start=1):
        errors += not correct[i]
        total += errors / kept
    return total / len(order)


def model(seed, n=2000, classes=10, decimals=None):
    """A synthetic classifier: softmax probabilities, labels, correctness, max probability (rounded to make ties)."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, classes)) * rng.uniform(0.5, 6.0, size=(n, 1))
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    right = rng.random(n) < probs.max(axis=1) ** 0.7  # right more often than the probability says, more so if sure
    labels = np.where(right, probs.argmax(axis=1), (probs.argmax(axis=1) + rng.integers(1, classes, n)) % classes)
    conf = probs.max(axis=1) if decimals is None else probs.max(axis=1).round(decimals)
    return probs, labels, probs.argmax(axis=1) == labels, conf


def test_hand_computed_aurc_e_aurc_and_sac():
    conf, correct = [0.9, 0.8, 0.7, 0.6], [True, False, True, True]
    assert aurc(conf, correct) == pytest.approx((0 + 1 / 2 + 1 / 3 + 1 / 4) / 4)
    assert optimal_aurc(correct) == pytest.approx(0.25 + 0.75 * math.log(0.75))
    assert optimal_aurc(correct, discrete=True) == pytest.approx((1 / 4) / 4)  # only i = 4 is at risk: 1/4
    assert e_aurc(conf, correct) == pytest.approx(aurc(conf, correct) - optimal_aurc(correct))
    coverage, risk = risk_coverage(conf, correct)
    np.testing.assert_allclose(coverage, [0.25, 0.5, 0.75, 1.0])
    np.testing.assert_allclose(risk, [0, 1 / 2, 1 / 3, 1 / 4])
    # selective accuracies 1, 1/2, 2/3, 3/4 at coverages 1/4 .. 1
    assert coverage_at_accuracy(conf, correct, 0.95) == 0.25
    assert coverage_at_accuracy(conf, correct, 0.7) == 1.0
    assert coverage_at_accuracy(conf, correct, 2 / 3) == 1.0
    assert coverage_at_accuracy([0.9, 0.8], [False, False], 0.5) == 0.0
    # 19 right of 20 is exactly 95%, whatever 0.95 * 20 is in binary
    assert coverage_at_accuracy(np.arange(20.0), np.arange(20) != 0, 0.95) == 1.0


@pytest.mark.parametrize("seed", range(4))
def test_aurc_is_the_papers_loop_and_the_mean_risk_of_the_curve_without_ties(seed):
    _, _, correct, conf = model(seed, n=1500)
    assert len(np.unique(conf)) == len(conf)
    want = paper_aurc(conf.tolist(), correct.tolist())
    assert aurc(conf, correct) == pytest.approx(want, abs=1e-12)
    coverage, risk = risk_coverage(conf, correct)
    np.testing.assert_allclose(coverage, np.arange(1, len(conf) + 1) / len(conf))
    assert aurc(conf, correct) == pytest.approx(risk.mean(), abs=1e-12)
    assert aurc(np.log(conf), correct) == aurc(conf, correct)  # the order is all that counts: a ranking score serves


def test_aurc_with_ties_is_the_mean_over_every_order_of_the_tied_samples():
    conf = [0.9, 0.5, 0.5, 0.5, 0.2, 0.2, 0.9]
    correct = [True, False, True, False, True, False, False]
    orders = list(itertools.permutations(range(len(conf))))  # every input order: each tie order equally often
    want = np.mean([paper_aurc([conf[i] for i in o], [correct[i] for i in o]) for o in orders])
    assert aurc(conf, correct) == pytest.approx(want, abs=1e-12)
    rng = np.random.default_rng(0)
    shuffled = rng.permutation(len(conf))
    assert aurc(np.array(conf)[shuffled], np.array(correct)[shuffled]) == aurc(conf, correct)


def test_optimal_aurc_is_the_aurc_of_a_perfect_ranking():
    _, _, correct, conf = model(3)
    perfect = correct + conf  # every correct prediction above every wrong one
    assert aurc(perfect, correct) == pytest.approx(optimal_aurc(correct, discrete=True), abs=1e-12)
    gap = optimal_aurc(correct, discrete=True) - optimal_aurc(correct)
    assert 0 < gap < 1 / (2 * correct.sum())
    assert e_aurc(conf, correct) > e_aurc(perfect, correct) > 0
    assert optimal_aurc([False, False]) == 1.0 == optimal_aurc([False, False], discrete=True)
    assert optimal_aurc([True, True]) == 0.0 == optimal_aurc([True, True], discrete=True)


def brute_force_sac(conf, correct, target):
    best = 0.0
    for threshold in set(conf.tolist()):
        kept = conf >= threshold
        if correct[kept].sum() >= target * kept.sum() - 1e-9:
            best = max(best, kept.mean())
    return best


@pytest.mark.parametrize("decimals", [None, 2])
def test_sac_against_brute_force_over_thresholds(decimals):
    _, _, correct, conf = model(5, n=800, decimals=decimals)
    for target in (0.8, 0.9, 0.95, 0.99):
        assert coverage_at_accuracy(conf, correct, target) == brute_force_sac(conf, correct, target)
    assert coverage_at_accuracy(conf, correct, 0.5) == 1.0  # accuracy 0.7 overall


def loop_ece(conf, correct, bins=15):
    """Equal-width ECE bin by bin: bin b holds (b/bins, (b+1)/bins], and the first one 0 too."""
    total = 0.0
    for b in range(bins):
        inside = [i for i, c in enumerate(conf) if b / bins < c <= (b + 1) / bins or (b == 0 and c == 0.0)]
        if inside:
            accuracy = sum(correct[i] for i in inside) / len(inside)
            confidence = sum(conf[i] for i in inside) / len(inside)
            total += len(inside) / len(conf) * abs(accuracy - confidence)
    return total


def loop_ece_mass(conf, correct, bins=15):
    """Equal-mass ECE of distinct confidences: sorted, bin b: ranks ceil(b n / bins) .. ceil((b+1) n / bins) - 1."""
    order = sorted(range(len(conf)), key=lambda i: conf[i])
    n, total = len(conf), 0.0
    for b in range(bins):
        inside = order[math.ceil(b * n / bins) : math.ceil((b + 1) * n / bins)]
        if inside:
            total += abs(sum(correct[i] - conf[i] for i in inside)) / n
    return total


def test_hand_computed_ece():
    # 0.2 = 3/15 closes bin 2; 0.9 lies in bin 13, 0.95 in bin 14: every bin holds one sample
    assert ece([0.2, 0.9, 0.95], [False, True, False]) == pytest.approx((0.2 + 0.1 + 0.95) / 3)
    # one bin: |accuracy - mean confidence|
    assert ece([0.2, 0.9, 0.95], [False, True, False], bins=1) == pytest.approx(abs(1 / 3 - 2.05 / 3))
    # equal mass, 3 bins of one sample each
    assert ece([0.2, 0.9, 0.95], [False, True, False], bins=3, binning="mass") == pytest.approx(1.25 / 3)


@pytest.mark.parametrize("seed", range(3))
def test_ece_against_bin_by_bin_loops(seed):
    _, _, correct, conf = model(seed, n=3000)
    on_edges = np.arange(16) / 15  # confidences on the edges, 0 and 1 included
    conf_edges = np.r_[conf, on_edges]
    correct_edges = np.r_[correct, np.arange(16) % 2 == 0]
    assert ece(conf_edges, correct_edges) == pytest.approx(
        loop_ece(conf_edges.tolist(), correct_edges.tolist()), abs=1e-12
    )
    conf_list, correct_list = conf.tolist(), correct.tolist()
    assert ece(conf, correct, binning="mass") == pytest.approx(loop_ece_mass(conf_list, correct_list), abs=1e-12)
    for bins in (1, 7, 40):
        assert ece(conf, correct, bins=bins) == pytest.approx(loop_ece(conf_list, correct_list, bins), abs=1e-12)


def test_equal_mass_keeps_ties_together_whatever_the_order():
    _, _, correct, conf = model(9, n=1000, decimals=1)
    rng = np.random.default_rng(1)
    values = {ece(conf[p], correct[p], binning="mass") for p in (rng.permutation(1000) for _ in range(5))}
    assert len(values) == 1
    values = {ece(conf[p], correct[p], binning="width") for p in (rng.permutation(1000) for _ in range(5))}
    assert len(values) == 1


@pytest.mark.parametrize("seed", range(3))
def test_nll_and_brier_against_scikit_learn(seed):
    probs, labels, correct, conf = model(seed, n=1500)
    classes = list(range(probs.shape[1]))
    assert nll(probs, labels) == pytest.approx(log_loss(labels, probs, labels=classes), rel=1e-12)
    assert brier(probs, labels) == pytest.approx(
        brier_score_loss(labels, probs, labels=classes, scale_by_half=False), rel=1e-12
    )
    assert nll(conf, correct) == pytest.approx(log_loss(correct, conf), rel=1e-12)
    assert brier(conf, correct) == pytest.approx(brier_score_loss(correct, conf), rel=1e-12)
    # saturated probabilities are clipped as scikit-learn clips them
    saturated, flags = np.array([1.0, 0.0, 1.0, 0.5]), np.array([False, True, True, True])
    assert nll(saturated, flags) == pytest.approx(log_loss(flags, saturated), rel=1e-12)
    onehot = np.eye(3)[[0, 1, 2]]
    assert nll(onehot, np.array([0, 2, 2])) == pytest.approx(log_loss([0, 2, 2], onehot, labels=[0, 1, 2]), rel=1e-12)


def test_selective_metrics_names_every_number():
    probs, _, correct, conf = model(2)
    ranking = np.log(conf)
    metrics = selective_metrics(ranking, correct, conf)
    assert set(metrics) == {"aurc", "e_aurc", "sac_95", "sac_99", "ece", "ece_mass", "nll", "brier"}
    assert metrics["aurc"] == aurc(conf, correct)
    assert metrics["sac_95"] == coverage_at_accuracy(conf, correct, 0.95)
    assert metrics["ece"] == ece(conf, correct) and metrics["ece_mass"] == ece(conf, correct, binning="mass")
    assert metrics["brier"] == brier(conf, correct)
    assert set(selective_metrics(-ranking, correct)) == {"aurc", "e_aurc", "sac_95", "sac_99"}
    assert 0 < metrics["sac_99"] < metrics["sac_95"] < 1


def test_bad_inputs_are_refused():
    with pytest.raises(HarnessError, match="probability"):
        ece([0.5, 1.5], [True, False])
    with pytest.raises(HarnessError, match="binning"):
        ece([0.5], [True], binning="quantile")
    with pytest.raises(HarnessError, match="NaN"):
        aurc([0.5, np.nan], [True, False])
    with pytest.raises(HarnessError, match="flags"):
        aurc([0.5, 0.4], [True])
    with pytest.raises(HarnessError, match="sum to 1"):
        nll(np.array([[0.5, 0.6]]), np.array([0]))
    with pytest.raises(HarnessError, match="integers"):
        brier(np.array([[0.5, 0.5]]), np.array([0.0]))
    with pytest.raises(HarnessError, match="target"):
        coverage_at_accuracy([0.5], [True], 1.5)


def test_a_runs_records_carry_the_selective_metrics_of_its_id_test_scores(tiny_glyphs):
    from harness import evaluate

    result = evaluate(
        "examples/glyph_cnn.py",
        benchmark=tiny_glyphs,
        kappas=["softmax", "max_logit"],
        progress=False,
        trust_submission=True,
    )
    id_test = result.scores["id_test"]
    correct = id_test.preds == id_test.labels
    rate = 1 - correct.mean()
    for record in result.records:
        kappa, measured = record["kappa"]["name"], record["id"]
        scores = id_test.scores[kappa]
        if len(np.unique(scores)) == len(scores):  # no ties: the paper's loop is the number
            assert measured["aurc"] == pytest.approx(paper_aurc(scores, correct), abs=1e-12)
        assert measured["e_aurc"] == pytest.approx(measured["aurc"] - (rate + (1 - rate) * math.log(1 - rate)))
        for target in (0.95, 0.99):
            assert measured[f"sac_{round(target * 100)}"] == brute_force_sac(scores, correct, target)
        rows = result.per_level[result.per_level["confidence function"] == kappa]
        assert rows["id-aurc"].tolist() == [measured["aurc"]] * len(rows)  # per_level.csv, beside id-acc
    assert any(len(np.unique(id_test.scores[k])) == len(id_test) for k in ("softmax", "max_logit"))
