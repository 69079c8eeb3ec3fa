"""From per-sample scores to severity levels and per-level metrics (docs/method.md sections 3-4). No I/O."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from harness.errors import HarnessError
from harness.method.metrics import id_metrics, level_metrics, summary_intervals
from harness.method.registry import LevelSet
from harness.method.scores import SplitScores
from harness.method.severity import SeverityLevels, class_scores, severity_levels


@dataclass(frozen=True)
class KappaResult:
    """Everything measured for one (model, kappa) pair; ``summary_intervals``: the ends of the summary metrics'
    intervals (``mean_ood_auroc_low``, ...), which need the per-sample scores (the summary itself comes from
    ``rows``)."""

    kappa: str
    levels: SeverityLevels
    rows: list[dict]  # one per level: level, percentile, level_score, metrics with their intervals' ends, counts
    id: dict
    summary_intervals: dict = field(default_factory=dict)

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
) -> KappaResult:
    """Levels from the estimation split, then each level's metrics on the test split against the ID test set.

    Class scores (and so level scores) are means of the kappa's reported value (``confs``: for softmax the max
    probability, not its logarithm); the ranking score (``scores``) only orders samples inside the AUROC.
    """
    levels = severity_levels(
        class_scores(estimation.confs[kappa], estimation.labels, num_ood_classes), num_id_classes, num_levels
    )
    missing = np.setdiff1d(np.arange(num_ood_classes), ood_test.labels)
    if len(missing):
        raise HarnessError(f"{len(missing)} OOD classes have no test images (first: index {missing[0]})")
    id_scores, id_conf = id_test.scores[kappa], id_test.confs[kappa]
    rows, members = [], []
    for level in range(levels.num_levels):
        mask = np.isin(ood_test.labels, levels.classes[level])
        members.append(np.flatnonzero(mask))
        metrics = level_metrics(id_scores, ood_test.scores[kappa][mask], id_conf, ood_test.confs[kappa][mask])
        rows.append(
            {
                "level": level,
                "percentile": float(levels.percentiles[level]),
                "level_score": float(levels.level_scores[level]),
                **metrics,
                "num_id": int(len(id_scores)),
                "num_ood": int(mask.sum()),
            }
        )
    ids = id_metrics(id_scores, id_test.preds == id_test.labels, id_conf)
    bounds = summary_intervals(LevelSet(id_scores, ood_test.scores[kappa], members))
    return KappaResult(kappa, levels, rows, {**ids, "num": int(len(id_scores))}, bounds)
