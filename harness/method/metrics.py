"""Detection metrics of docs/method.md section 4. Pure numpy, float64, deterministic.

Convention everywhere: higher kappa = more in-distribution; ID samples are the positives
unless a function says otherwise.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import rankdata

from harness.errors import HarnessError

FPR_CONVENTION = (
    "fpr_at_95_tpr: ID positive; threshold = largest t keeping >= 95% of ID (kappa >= t); "
    "fraction of OOD with kappa >= t"
)
AUROC_CONVENTION = "mann-whitney with average ranks (a tied ID/OOD pair counts 1/2)"
AUPR_CONVENTION = (
    "average precision (step-wise, as scikit-learn); aupr_in: ID positive, aupr_out: OOD positive on -kappa"
)


def _checked(name: str, values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64).ravel()
    if values.size == 0:
        raise HarnessError(f"{name} is empty")
    if not np.all(np.isfinite(values)):
        raise HarnessError(f"{name} contains {int(np.sum(~np.isfinite(values)))} NaN or infinite values")
    return values


def auroc(positive: np.ndarray, negative: np.ndarray) -> float:
    """P(score_pos > score_neg) + 1/2 P(tie): the Mann-Whitney U statistic over n_pos * n_neg."""
    pos = _checked("positive scores", positive)
    neg = _checked("negative scores", negative)
    ranks = rankdata(np.concatenate([pos, neg]), method="average")
    n_pos, n_neg = len(pos), len(neg)
    u = math.fsum(ranks[:n_pos]) - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))


def fpr_at_tpr(positive: np.ndarray, negative: np.ndarray, tpr: float = 0.95) -> float:
    """Fraction of negatives accepted at the largest threshold that accepts >= ``tpr`` of positives."""
    pos = np.sort(_checked("positive scores", positive))[::-1]
    neg = _checked("negative scores", negative)
    needed = -(-len(pos) * round(tpr * 1_000_000) // 1_000_000)  # ceil(tpr * n), in integers
    threshold = pos[max(needed, 1) - 1]
    return float(np.count_nonzero(neg >= threshold) / len(neg))


def average_precision(positive: np.ndarray, negative: np.ndarray) -> float:
    """Average precision of ranking positives above negatives (scikit-learn's step-wise definition)."""
    pos = _checked("positive scores", positive)
    neg = _checked("negative scores", negative)
    scores = np.concatenate([pos, neg])
    labels = np.concatenate([np.ones(len(pos)), np.zeros(len(neg))])
    order = np.argsort(-scores, kind="stable")
    scores, labels = scores[order], labels[order]
    last_of_tie = np.r_[np.flatnonzero(np.diff(scores)), len(scores) - 1]
    tp = np.cumsum(labels)[last_of_tie]
    predicted = last_of_tie + 1.0
    precision = tp / predicted
    recall_step = np.diff(np.r_[0.0, tp]) / len(pos)
    return float(math.fsum(recall_step * precision))


def mean(values: np.ndarray) -> float:
    """Order-independent mean (exactly rounded sum)."""
    values = _checked("scores", values)
    return math.fsum(values) / len(values)


def level_metrics(
    id_scores: np.ndarray, ood_scores: np.ndarray, id_conf: np.ndarray | None = None, ood_conf: np.ndarray | None = None
) -> dict[str, float]:
    """Metrics of one severity level: ID test scores (positives) against the level's OOD test scores.

    ``*_conf`` are the reported confidences (e.g. the max softmax probability when the ranking
    score is its logarithm); they default to the scores themselves.
    """
    return {
        "ood_auroc": auroc(id_scores, ood_scores),
        "fpr_at_95_tpr": fpr_at_tpr(id_scores, ood_scores, 0.95),
        "aupr_in": average_precision(id_scores, ood_scores),
        "aupr_out": average_precision(
            -np.asarray(ood_scores, dtype=np.float64), -np.asarray(id_scores, dtype=np.float64)
        ),
        "ood_avg_conf": mean(ood_scores if ood_conf is None else ood_conf),
    }


def id_metrics(scores: np.ndarray, correct: np.ndarray, conf: np.ndarray | None = None) -> dict[str, float | None]:
    """ID accuracy, the AUROC of kappa separating correct from wrong predictions, and mean confidence.

    ``auroc`` is None when every prediction is right (or every one wrong): it is then undefined.
    """
    scores = _checked("ID scores", scores)
    correct = np.asarray(correct, dtype=bool).ravel()
    if correct.shape != scores.shape:
        raise HarnessError(f"{len(correct)} correctness flags for {len(scores)} ID scores")
    both = 0 < correct.sum() < len(correct)
    return {
        "acc": float(correct.mean()),
        "auroc": auroc(scores[correct], scores[~correct]) if both else None,
        "avg_conf": mean(scores if conf is None else conf),
    }
