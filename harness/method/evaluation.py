"""From per-sample scores to severity levels and per-level metrics (docs/method.md sections 3-4). No I/O."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from harness.errors import HarnessError
from harness.method.metrics import id_metrics, level_metrics, summary_intervals
from harness.method.private_check import private_check
from harness.method.registry import LevelSet
from harness.method.scores import SplitScores
from harness.method.severity import DEFAULT_RULE, SeverityLevels, class_scores, severity_levels


@dataclass(frozen=True)
class KappaResult:
    """Everything measured for one (model, kappa) pair; ``summary_intervals``: the ends of the summary metrics'
    intervals (``mean_ood_auroc_low``, ...), which need the per-sample scores (the summary itself comes from
    ``rows``)."""

    kappa: str
    levels: SeverityLevels
    rows: list[dict]  # per level: level, (window) percentile, level score, metrics and their intervals' ends, counts
    id: dict
    rule: str = DEFAULT_RULE  # the severity rule the levels' windows start by
    summary_intervals: dict = field(default_factory=dict)
    private: dict | None = None  # the levels on the private test images (:mod:`harness.method.private_check`)

    @property
    def mean_ood_auroc(self) -> float:
        return float(np.mean([row["ood_auroc"] for row in self.rows]))


def evaluate_kappa(
    kappa: str,
    id_test: SplitScores,
    estimation: SplitScores,
    ood_test: SplitScores,
    num_id_classes: int,
    num_ood_classes: int,
    num_levels: int,
    probability: bool = False,
    rule: str = DEFAULT_RULE,
) -> KappaResult:
    """Levels from the estimation split (windows starting by ``rule``), then each level's metrics on the test split
    against the ID test set.

    Class scores (and so level scores) are means of the kappa's reported value (``confs``: for softmax the max
    probability, not its logarithm); the ranking score (``scores``) only orders samples inside the AUROC.
    ``probability``: the kappa declares its reported values probabilities that the prediction is right (they must lie
    in [0, 1]); its ID metrics then include the calibration metrics.
    """
    levels = severity_levels(
        class_scores(estimation.confs[kappa], estimation.labels, num_ood_classes), num_id_classes, num_levels, rule
    )
    missing = np.setdiff1d(np.arange(num_ood_classes), ood_test.labels)
    if len(missing):
        raise HarnessError(f"{len(missing)} OOD classes have no test images (first: index {missing[0]})")
    id_scores, id_conf = id_test.scores[kappa], id_test.confs[kappa]
    if probability and not np.all((id_conf >= 0.0) & (id_conf <= 1.0)):
        outside = int(np.sum(~((id_conf >= 0.0) & (id_conf <= 1.0))))
        raise HarnessError(
            f"kappa '{kappa}' declares its values probabilities, but {outside} ID values lie outside [0, 1]"
        )
    rows, members = [], []
    for level in range(levels.num_levels):
        mask = np.isin(ood_test.labels, levels.classes[level])
        members.append(np.flatnonzero(mask))
        metrics = level_metrics(id_scores, ood_test.scores[kappa][mask], id_conf, ood_test.confs[kappa][mask])
        rows.append(
            {
                "level": level,
                "percentile": float(levels.percentiles[level]),
                "window_percentile": float(levels.window_percentiles[level]),
                "level_score": float(levels.level_scores[level]),
                **metrics,
                "num_id": int(len(id_scores)),
                "num_ood": int(mask.sum()),
            }
        )
    correct = id_test.preds == id_test.labels
    ids = id_metrics(id_scores, correct, id_conf, probability, id_test.logits, id_test.labels)
    bounds = summary_intervals(LevelSet(id_scores, ood_test.scores[kappa], members))
    return KappaResult(kappa, levels, rows, {**ids, "num": int(len(id_scores))}, rule, bounds)


def with_private_check(result: KappaResult, scores: dict[str, SplitScores], sha256: str) -> KappaResult:
    """``result`` with its levels scored on the private test images (``scores["id_test_private"]`` and
    ``["ood_test_private"]``) beside the public ones, and the test of their difference
    (:func:`harness.method.private_check.private_check`), naming the private manifest by ``sha256``."""
    k = result.kappa
    public_id, public_ood, private_id, private_ood = (
        scores[split] for split in ("id_test", "ood_test", "id_test_private", "ood_test_private")
    )
    check = private_check(
        result.levels,
        (public_id.scores[k], public_ood.scores[k], public_ood.labels),
        (private_id.scores[k], private_ood.scores[k], private_ood.labels),
    )
    return replace(result, private={"manifest_sha256": sha256, **check.as_dict()})
