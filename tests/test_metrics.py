"""Detection metrics against hand-computed values and scikit-learn."""

import math

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve

from harness.errors import HarnessError
from harness.method.metrics import auroc, average_precision, fpr_at_tpr, id_metrics, level_metrics


def test_auroc_hand_computed_with_ties():
    # pairs (pos, neg): (3,1) win, (3,2) win, (2,1) win, (2,2) tie -> (3 + 0.5) / 4
    assert auroc([3.0, 2.0], [1.0, 2.0]) == 0.875
    assert auroc([1.0], [1.0]) == 0.5
    assert auroc([0.0, 0.0], [1.0]) == 0.0


def test_fpr_at_95_hand_computed():
    pos = np.arange(20, dtype=float)  # keep 95% of 20 = 19 positives: threshold 1.0
    neg = np.array([0.5, 1.0, 3.0, -2.0])  # accepted: 1.0 and 3.0
    assert fpr_at_tpr(pos, neg, 0.95) == 0.5


def test_average_precision_hand_computed():
    # ranking: 0.9 (pos), 0.8 (neg), 0.7 (pos): AP = 1/2 * 1 + 1/2 * 2/3
    assert average_precision([0.9, 0.7], [0.8]) == pytest.approx(0.5 + 1 / 3)


@pytest.mark.parametrize("seed", range(8))
def test_agreement_with_scikit_learn_on_random_data_with_ties(seed):
    rng = np.random.default_rng(seed)
    pos = rng.integers(0, 12, size=rng.integers(5, 400)).astype(float) / 4
    neg = rng.integers(-3, 9, size=rng.integers(5, 400)).astype(float) / 4
    y = np.r_[np.ones(len(pos)), np.zeros(len(neg))]
    scores = np.r_[pos, neg]
    assert auroc(pos, neg) == pytest.approx(roc_auc_score(y, scores), abs=1e-12)
    assert average_precision(pos, neg) == pytest.approx(average_precision_score(y, scores), abs=1e-12)
    assert average_precision(-neg, -pos) == pytest.approx(average_precision_score(1 - y, -scores), abs=1e-12)
    fpr, tpr, _ = roc_curve(y, scores, drop_intermediate=False)
    assert fpr_at_tpr(pos, neg, 0.95) == pytest.approx(fpr[np.searchsorted(tpr, 0.95 - 1e-12)], abs=1e-12)


def test_auroc_is_independent_of_sample_order():
    rng = np.random.default_rng(1)
    pos, neg = rng.normal(size=1000).round(1), rng.normal(-0.5, size=999).round(1)
    assert auroc(pos, neg) == auroc(rng.permutation(pos), rng.permutation(neg))


def test_level_and_id_metrics():
    metrics = level_metrics(np.array([3.0, 2.0]), np.array([1.0, 2.0]), np.array([0.9, 0.8]), np.array([0.1, 0.8]))
    assert metrics["ood_auroc"] == 0.875
    assert metrics["ood_avg_conf"] == pytest.approx(0.45)
    ids = id_metrics(np.array([0.9, 0.8, 0.1]), np.array([True, True, False]))
    assert ids == {
        "acc": pytest.approx(2 / 3),
        "auroc": 1.0,
        "avg_conf": pytest.approx(0.6),
        "aurc": pytest.approx((0 + 0 + 1 / 3) / 3),  # the wrong one ranked last: risks 0, 0, 1/3
        "e_aurc": pytest.approx((1 / 9) - (1 / 3 + (2 / 3) * math.log(2 / 3))),
        "sac_95": pytest.approx(2 / 3),
        "sac_99": pytest.approx(2 / 3),
        **dict.fromkeys(("ece", "ece_mass", "nll", "brier")),  # not declared probabilities
        **dict.fromkeys(("nll_multiclass", "brier_multiclass")),  # no logits given
        # Sterne's mid-p interval of 2 of 3, by hand: at the low end only 3 of 3 is less probable than 2, so
        # p^3 + 3p^2(1-p)/2 = 0.05; at the high end 0 and 1 are: (1-p)^3 + 3p(1-p)^2 + 3p^2(1-p)/2 = 0.05
        "acc_low": pytest.approx(0.18860, abs=1e-5),
        "acc_high": pytest.approx(0.96665, abs=1e-5),
        "auroc_low": None,  # one wrong prediction: the AUROC has no variance, so no interval
        "auroc_high": None,
    }
    calibrated = id_metrics(np.array([0.9, 0.8, 0.1]), np.array([True, True, False]), probability=True)
    assert calibrated["ece"] == calibrated["ece_mass"] == pytest.approx((0.1 + 0.2 + 0.1) / 3)  # a bin each
    assert calibrated["nll"] == pytest.approx(-(2 * math.log(0.9) + math.log(0.8)) / 3)
    assert calibrated["brier"] == pytest.approx((0.01 + 0.04 + 0.01) / 3)
    assert id_metrics(np.array([0.9, 0.8]), np.array([True, True]))["auroc"] is None
    assert id_metrics(np.array([0.9, 0.8]), np.array([True, True]))["auroc_low"] is None


def test_nan_and_empty_inputs_are_refused():
    with pytest.raises(HarnessError, match="NaN"):
        auroc([1.0, np.nan], [0.0])
    with pytest.raises(HarnessError, match="empty"):
        auroc([], [0.0])
