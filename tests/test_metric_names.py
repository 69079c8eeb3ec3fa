"""Metrics named as the field names them: fpr@95/99 in both conventions (ID positive, the records' key; OOD positive,
OpenOOD v1.5's and pytorch-ood's), the kappa's scores of correctness beside the classifier's multi-class NLL and Brier,
and every definition naming its positive class and tie rule."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pytorch_ood.metrics.functional import fpr_at_tpr as pytorch_ood_fpr
from scipy.special import softmax as scipy_softmax
from sklearn.metrics import log_loss, roc_curve

from harness.errors import HarnessError
from harness.method.metrics import id_metrics, level_metrics
from harness.method.registry import registered


def sklearn_fpr_ood_positive(id_scores, ood_scores, tpr: float) -> float:
    """scikit-learn's ROC curve with OOD as the positive class on -kappa: the FPR at the first TPR >= ``tpr``."""
    y = np.r_[np.zeros(len(id_scores)), np.ones(len(ood_scores))]
    fpr, true, _ = roc_curve(y, -np.r_[id_scores, ood_scores], drop_intermediate=False)
    return float(fpr[np.searchsorted(true, tpr - 1e-12)])


@pytest.mark.parametrize("seed", range(4))
def test_the_ood_positive_fpr_is_scikit_learns_and_pytorch_oods_and_not_the_id_positive_one(seed):
    rng = np.random.default_rng(seed)
    id_scores = rng.normal(1.0, 1.0, 700).round(1)  # rounded: many ties, at the thresholds too
    ood_scores = rng.normal(0.0, 1.6, 500).round(1)  # wider than ID: the two conventions differ
    metrics = level_metrics(id_scores, ood_scores)
    labels = torch.tensor(np.r_[np.zeros(len(id_scores)), -np.ones(len(ood_scores))])  # pytorch-ood: OOD < 0
    outlier = torch.tensor(-np.r_[id_scores, ood_scores])  # pytorch-ood's scores: higher = more OOD
    for tpr in (95, 99):
        ours = metrics[f"fpr_at_{tpr}_tpr_ood"]
        assert ours == pytest.approx(sklearn_fpr_ood_positive(id_scores, ood_scores, tpr / 100), abs=1e-12)
        assert ours == pytest.approx(float(pytorch_ood_fpr(outlier, labels, tpr / 100)), abs=1e-12)
        assert abs(ours - metrics[f"fpr_at_{tpr}_tpr"]) > 0.05, tpr  # the ID-positive one answers another question


def test_the_ood_positive_fpr_by_hand():
    id_scores = np.array([5.0, 4.0, 3.0, 2.0])
    ood_scores = np.arange(20, dtype=float) / 10  # -kappa keeps 19 of 20 OOD at t = -1.8 (kappa <= 1.8)
    metrics = level_metrics(id_scores, ood_scores)
    assert metrics["fpr_at_95_tpr_ood"] == 0.0  # no ID image has kappa <= 1.8
    assert metrics["fpr_at_95_tpr"] == 0.0  # 95% of 4 ID keeps all 4 (t = 2.0): no OOD reaches 2.0
    assert level_metrics(id_scores, ood_scores + 2.5)["fpr_at_95_tpr_ood"] == 0.75  # kappa <= 4.3: 3 of 4 ID


@pytest.mark.parametrize("seed", range(3))
def test_the_multiclass_nll_and_brier_equal_scikit_learn_and_an_independent_brier(seed):
    rng = np.random.default_rng(seed)
    classes, n = 7, 600
    labels = rng.integers(0, classes, n)
    logits = rng.normal(size=(n, classes)) * 3 + 4 * np.eye(classes)[labels] * rng.uniform(size=(n, 1))
    probabilities = scipy_softmax(logits, axis=1)
    correct = probabilities.argmax(1) == labels
    conf = probabilities.max(1)
    measured = id_metrics(np.log(conf), correct, conf, True, logits, labels)
    assert measured["nll_multiclass"] == pytest.approx(log_loss(labels, probabilities, labels=range(classes)), 1e-12)
    brier = np.mean([sum((p - (k == y)) ** 2 for k, p in enumerate(row)) for row, y in zip(probabilities, labels)])
    assert measured["brier_multiclass"] == pytest.approx(brier, rel=1e-12)  # the sum over classes, not halved
    assert measured["nll_multiclass"] != pytest.approx(measured["nll"], rel=1e-2)  # not the score of correctness
    assert measured["brier_multiclass"] != pytest.approx(measured["brier"], rel=1e-2)
    assert id_metrics(np.log(conf), correct, conf, True)["nll_multiclass"] is None  # no logits: null


def test_logits_that_do_not_fit_the_id_scores_are_refused():
    with pytest.raises(HarnessError, match=r"^logits of shape \(2, 3\) \(and labels\) for 3 ID scores$"):
        id_metrics(np.zeros(3), np.ones(3, dtype=bool), logits=np.zeros((2, 3)), labels=np.zeros(2, dtype=int))


def test_labels_say_the_positive_class_and_every_definition_its_positive_class_and_tie_rule():
    labels = {m.name: m.label for m in registered()}
    assert [labels[f"fpr_at_{t}_tpr{s}"] for t in (95, 99) for s in ("", "_ood")] == [
        *("fpr@95 (ID+)", "fpr@95 (OOD+)", "fpr@99 (ID+)", "fpr@99 (OOD+)")
    ]
    assert [labels[n] for n in ("nll", "brier", "nll_multiclass", "brier_multiclass")] == [
        *("nll (correctness)", "brier (correctness)", "nll (multi-class)", "brier (multi-class)")
    ]
    for metric in registered():
        words = metric.definition.lower()
        assert "positive" in words and ("tie" in words or "no ties" in words), metric.name
    definitions = {m.name: m.definition for m in registered()}
    assert definitions["fpr_at_95_tpr"].startswith("fpr_at_95_tpr: ID positive (the FPR of OOD at 95% TPR of ID)")
    assert definitions["fpr_at_99_tpr_ood"].startswith("fpr_at_99_tpr_ood: OOD positive (the FPR of ID at 99% TPR")
    assert "not halved (in [0, 2])" in definitions["brier_multiclass"]
