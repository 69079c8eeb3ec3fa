"""Detection metrics of docs/method.md section 4. Pure numpy, float64, deterministic.

Convention everywhere: higher kappa = more in-distribution; ID samples are the positives
unless a function says otherwise.
"""

from __future__ import annotations

import math

import numpy as np

from harness.errors import HarnessError
from harness.method.intervals import (
    ACC_METHOD,
    AUROC_METHOD,
    CONFIDENCE,
    MEAN_AUROC_METHOD,
    Interval,
    accuracy_interval,
    auroc_interval,
    mean_auroc_interval,
)
from harness.method.registry import (
    IdScores,
    IntervalRule,
    LevelScores,
    LevelSet,
    Metric,
    interval_methods,
    register_metric,
    registered,
)
from harness.method.selective import ECE_BINS, SAC_TARGETS, aurc, brier, coverage_at_accuracy, e_aurc, ece, nll

FPR_CONVENTION = (
    "fpr_at_95_tpr: ID positive (the FPR of OOD at 95% TPR of ID); threshold t = the largest value keeping "
    ">= 95% of ID (kappa >= t, a tie at t kept whole); the fraction of OOD with kappa >= t"
)
FPR99_CONVENTION = FPR_CONVENTION.replace("95", "99")
FPR_OOD_CONVENTION = (
    "fpr_at_95_tpr_ood: OOD positive (the FPR of ID at 95% TPR of OOD, as OpenOOD v1.5 and pytorch-ood); "
    "threshold t = the largest value keeping >= 95% of OOD (-kappa >= t, a tie at t kept whole); the fraction of ID "
    "with -kappa >= t"
)
FPR99_OOD_CONVENTION = FPR_OOD_CONVENTION.replace("95", "99")
AUROC_TIES = "mann-whitney with average ranks (a tied positive/negative pair counts 1/2)"
AUROC_CONVENTION = f"ID positive, OOD negative; {AUROC_TIES}"
AUPR_CONVENTION = (
    "average precision (step-wise, as scikit-learn: a tie of scores is one step); aupr_in: ID positive, aupr_out: "
    "OOD positive on -kappa"
)
NO_CLASSES = "no positive class, no ties (a mean over images)"


def _checked(name: str, values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64).ravel()
    if values.size == 0:
        raise HarnessError(f"{name} is empty")
    if not np.all(np.isfinite(values)):
        raise HarnessError(f"{name} contains {int(np.sum(~np.isfinite(values)))} NaN or infinite values")
    return values


def auroc(positive: np.ndarray, negative: np.ndarray) -> float:
    """P(score_pos > score_neg) + 1/2 P(tie): the Mann-Whitney U statistic over n_pos * n_neg."""
    from scipy.stats import rankdata  # on first use: the leaderboard reads the registry without scipy

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
    """Every registered level metric of one severity level: ID test scores (positives) against the level's OOD test
    scores.

    ``*_conf`` are the reported confidences (e.g. the max softmax probability when the ranking
    score is its logarithm); they default to the scores themselves.
    """
    scores = LevelScores(
        id_scores, ood_scores, id_scores if id_conf is None else id_conf, ood_scores if ood_conf is None else ood_conf
    )
    return _measured(registered("level"), scores)


def id_metrics(
    scores: np.ndarray,
    correct: np.ndarray,
    conf: np.ndarray | None = None,
    probability: bool = False,
    logits: np.ndarray | None = None,
    labels: np.ndarray | None = None,
) -> dict[str, float | None]:
    """Every registered ID metric: by default the accuracy, the AUROC of kappa separating correct from wrong
    predictions, the mean confidence, the selective metrics, where ``probability`` (the kappa declares its reported
    confidence a probability that the prediction is right) the calibration metrics of correctness, and with
    ``logits`` (the classifier's, over the ID classes) and ``labels`` its multi-class NLL and Brier score.

    ``auroc`` is None when every prediction is right (or every one wrong): it is then undefined; the calibration
    metrics are None without ``probability``, the multi-class ones without ``logits``.
    """
    scores = _checked("ID scores", scores)
    correct = np.asarray(correct, dtype=bool).ravel()
    if correct.shape != scores.shape:
        raise HarnessError(f"{len(correct)} correctness flags for {len(scores)} ID scores")
    if logits is not None and (labels is None or np.shape(logits)[:1] != scores.shape):
        raise HarnessError(f"logits of shape {np.shape(logits)} (and labels) for {len(scores)} ID scores")
    data = IdScores(scores, correct, scores if conf is None else conf, probability, logits, labels)
    return _measured(registered("id"), data)


def summary_metrics(rows: list[dict]) -> dict[str, float]:
    """Every registered summary metric of one (model, kappa) pair, from its level rows."""
    return {m.name: m.compute(rows) for m in registered("summary")}


def summary_intervals(levels: LevelSet) -> dict[str, float | None]:
    """The ends of the summary metrics' intervals (``mean_ood_auroc_low``, ...), from the per-sample scores."""
    return {k: v for m in registered("summary") if m.interval for k, v in _ends(m, m.interval.compute(levels))}


def interval_statement() -> dict:
    """What a record's ``intervals`` says once: the confidence and each interval's method by its place."""
    return {"confidence": CONFIDENCE, "methods": interval_methods()}


def _measured(metrics: tuple[Metric, ...], data) -> dict[str, float | None]:
    """Each metric's value on ``data``, then the ends of the intervals the metrics declare."""
    out = {m.name: m.compute(data) for m in metrics}
    return {**out, **{k: v for m in metrics if m.interval for k, v in _ends(m, m.interval.compute(data))}}


def _ends(metric: Metric, bounds: tuple[float, float] | None) -> tuple[tuple[str, float | None], ...]:
    return tuple(zip(metric.bounds, bounds or (None, None)))


def _pair(interval: Interval) -> tuple[float, float]:
    return interval.low, interval.high


def _auroc_ends(positive: np.ndarray, negative: np.ndarray) -> tuple[float, float] | None:
    """The score interval of an AUROC; None with fewer than 2 scores on a side (no DeLong covariance)."""
    return _pair(auroc_interval(positive, negative)) if min(len(positive), len(negative)) >= 2 else None


def _mean_auroc_ends(s: LevelSet) -> tuple[float, float] | None:
    """The score interval of the mean of the levels' AUROCs, correlated by their DeLong covariance; None where a level
    or the ID set has fewer than 2 scores."""
    if len(s.id_scores) < 2 or any(len(level) < 2 for level in s.levels):
        return None
    return _pair(mean_auroc_interval(s.id_scores, s.ood_scores, s.levels))


def _id_auroc(d: IdScores) -> float | None:
    return auroc(d.scores[d.correct], d.scores[~d.correct]) if 0 < d.correct.sum() < len(d.correct) else None


def _calibration(measure):
    """A calibration metric of the reported confidence against correctness: None unless the kappa declares it a
    probability."""
    return lambda d: measure(d.conf, d.correct) if d.probability else None


def softmax(logits: np.ndarray) -> np.ndarray:
    """The softmax of each row of ``logits``, in float64 (the largest logit subtracted first). By hand: the leaderboard
    reads this module on its light install, which has no scipy."""
    z = np.asarray(logits, dtype=np.float64)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _classifier(measure):
    """A score of the classifier's softmax over the ID classes against the true labels: None without logits."""
    return lambda d: None if d.logits is None else measure(softmax(d.logits), np.asarray(d.labels, dtype=np.int64))


def _level(name: str, compute, label: str, definition: str, **declared) -> Metric:
    return register_metric(Metric(name, "level", compute, label=label, definition=definition, **declared))


# the built-in metrics, in record order
_level(
    "ood_auroc",
    lambda d: auroc(d.id_scores, d.ood_scores),
    "ood-auroc",
    AUROC_CONVENTION,
    higher_is_better=True,
    aggregate="levels",
    since=1,
    null="never",
    interval=IntervalRule(AUROC_METHOD, lambda d: _auroc_ends(d.id_scores, d.ood_scores)),
)
_level(
    "fpr_at_95_tpr",
    lambda d: fpr_at_tpr(d.id_scores, d.ood_scores, 0.95),
    "fpr@95 (ID+)",
    FPR_CONVENTION,
    higher_is_better=False,
    aggregate="mean",
    since=1,
)
_level(
    "aupr_in",
    lambda d: average_precision(d.id_scores, d.ood_scores),
    "aupr-in",
    AUPR_CONVENTION,
    higher_is_better=True,
    since=1,
)
_level(
    "aupr_out",
    lambda d: average_precision(
        -np.asarray(d.ood_scores, dtype=np.float64), -np.asarray(d.id_scores, dtype=np.float64)
    ),
    "aupr-out",
    AUPR_CONVENTION,
    higher_is_better=True,
    since=1,
)
_level(
    "ood_avg_conf",
    lambda d: mean(d.ood_conf),
    "ood avg conf",
    "mean reported confidence of the level's OOD test images; " + NO_CLASSES,
    higher_is_better=False,
    unit=False,
    since=1,
    null="never",
)
_level(
    "fpr_at_99_tpr",
    lambda d: fpr_at_tpr(d.id_scores, d.ood_scores, 0.99),
    "fpr@99 (ID+)",
    FPR99_CONVENTION,
    higher_is_better=False,
    aggregate="mean",
    since=2,
)
for tpr, convention in ((95, FPR_OOD_CONVENTION), (99, FPR99_OOD_CONVENTION)):  # records since their arrival hold them
    _level(
        f"fpr_at_{tpr}_tpr_ood",
        lambda d, tpr=tpr: fpr_at_tpr(-np.asarray(d.ood_scores, float), -np.asarray(d.id_scores, float), tpr / 100),
        f"fpr@{tpr} (OOD+)",
        convention,
        higher_is_better=False,
        aggregate="mean",
    )
register_metric(
    Metric(
        "acc",
        "id",
        lambda d: float(d.correct.mean()),
        True,
        "id-acc",
        "top-1 accuracy: positive = the prediction (arg-max of the logits, a tie to the lowest class index) is the "
        "true label",
        column="id_acc",
        since=1,
        null="never",
        interval=IntervalRule(ACC_METHOD, lambda d: _pair(accuracy_interval(int(d.correct.sum()), len(d.correct)))),
    )
)
register_metric(
    Metric(
        "auroc",
        "id",
        _id_auroc,
        True,
        "id-auroc",
        f"AUROC of kappa separating correct (positive) from wrong ID predictions, null when all are right or all "
        f"wrong: {AUROC_TIES}",
        column="id_auroc",
        null="always",
        since=1,
        interval=IntervalRule(AUROC_METHOD, lambda d: _auroc_ends(d.scores[d.correct], d.scores[~d.correct])),
    )
)
register_metric(
    Metric(
        "avg_conf",
        "id",
        lambda d: mean(d.conf),
        True,
        "id avg conf",
        "mean reported confidence of the ID test images; " + NO_CLASSES,
        unit=False,
        column="id_avg_conf",
        null="never",
        since=1,
    )
)
# the companion paper's selective prediction on the ID test set, from the same pass (records since their
# arrival hold them; older records lack them)
for name, compute, better, label, definition in (
    (
        "aurc",
        lambda d: aurc(d.scores, d.correct),
        False,
        "aurc",
        "area under the risk-coverage curve of kappa on the ID test set (the companion paper's AURC): the risk "
        "counts wrong predictions, no positive class; tied kappa values count in expectation over their order",
    ),
    (
        "e_aurc",
        lambda d: e_aurc(d.scores, d.correct),
        False,
        "e-aurc",
        "excess AURC: aurc minus the optimum r + (1 - r) ln(1 - r), r the error rate; the risk counts wrong "
        "predictions, no positive class; tied kappa values count in expectation over their order",
    ),
    *(
        (
            f"sac_{round(target * 100)}",
            lambda d, target=target: coverage_at_accuracy(d.scores, d.correct, target),
            True,
            f"sac@{round(target * 100)}",
            f"the largest coverage whose selective accuracy (positive: a right prediction) reaches {target:g} (0 when "
            "none does); a threshold keeps a tie of kappa whole",
        )
        for target in SAC_TARGETS
    ),
):
    register_metric(Metric(name, "id", compute, better, label, definition, column=f"id_{name}", null="never"))
# the companion paper's calibration of the reported confidence on the ID test set: null where the kappa does not
# declare it a probability that the prediction is right (entropy, energy, max logit, distances)
_UNCALIBRATED = "; null where the kappa's reported value is not a probability that the prediction is right"
for name, compute, unit, label, definition in (
    (
        "ece",
        _calibration(lambda p, c: ece(p, c, binning="width")),
        True,
        "ece",
        f"expected calibration error of the reported confidence against correctness (positive: a right "
        f"prediction), {ECE_BINS} equal-width bins (the companion paper's, the default), right-closed: a confidence "
        "on an edge, and so any tie, goes to one bin",
    ),
    (
        "ece_mass",
        _calibration(lambda p, c: ece(p, c, binning="mass")),
        True,
        "ece-mass",
        f"expected calibration error of the reported confidence against correctness (positive: a right "
        f"prediction), {ECE_BINS} equal-mass bins, a tie of confidences kept in one bin",
    ),
    (
        "nll",
        _calibration(nll),
        False,
        "nll (correctness)",
        "binary negative log-likelihood (natural log) of correctness (positive: a right prediction) under the "
        "reported confidence, clipped to [eps, 1 - eps]; a score of the kappa, not the classifier's multi-class NLL "
        "(nll_multiclass); per image, no ties",
    ),
    (
        "brier",
        _calibration(brier),
        True,
        "brier (correctness)",
        "binary Brier score: the mean squared gap between the reported confidence and correctness (positive: a "
        "right prediction, 1); a score of the kappa, not the classifier's multi-class Brier (brier_multiclass); per "
        "image, no ties",
    ),
):
    register_metric(
        Metric(
            name, "id", compute, False, label, definition + _UNCALIBRATED, unit=unit, column=f"id_{name}", null="always"
        )
    )
# the classifier's own multi-class scores on the ID test set (the same for every kappa of a model), beside the
# kappa's scores of correctness above; records since their arrival hold them
_MULTICLASS = (
    "; the softmax over the ID classes' logits against the true label (positive: the true class); per image, no "
    "ties; the same for every kappa of a model; null where the run kept no ID logits"
)
for name, compute, label, definition in (
    (
        "nll_multiclass",
        _classifier(nll),
        "nll (multi-class)",
        "the classifier's multi-class negative log-likelihood (natural log), -mean log p[true label], probabilities "
        "clipped to [eps, 1 - eps] (scikit-learn's log_loss)",
    ),
    (
        "brier_multiclass",
        _classifier(brier),
        "brier (multi-class)",
        "the classifier's multi-class Brier score, the mean over images of sum over the ID classes of "
        "(p_k - [k = true label])^2, not halved (in [0, 2])",
    ),
):
    register_metric(
        Metric(
            name, "id", compute, False, label, definition + _MULTICLASS, unit=False, column=f"id_{name}", null="always"
        )
    )
register_metric(
    Metric(
        "mean_ood_auroc",
        "summary",
        lambda rows: math.fsum(row["ood_auroc"] for row in rows) / len(rows),
        True,
        "mean ood-auroc",
        f"the mean of the levels' ood_auroc ({AUROC_CONVENTION})",
        column="mean_ood_auroc",
        null="never",
        since=1,
        interval=IntervalRule(MEAN_AUROC_METHOD, _mean_auroc_ends),
    )
)
