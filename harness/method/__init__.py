"""The method, pure numpy with no I/O and no torch (docs/method.md): severity levels, metrics, and the
evaluation of one (model, kappa) pair from per-sample scores."""

from harness.method.evaluation import KappaResult, evaluate_kappa
from harness.method.metrics import auroc, average_precision, fpr_at_tpr, id_metrics, level_metrics
from harness.method.scores import SplitScores
from harness.method.severity import DEFAULT_NUM_LEVELS, SeverityLevels, class_scores, severity_levels, window_starts

__all__ = ["DEFAULT_NUM_LEVELS", "KappaResult", "SeverityLevels", "SplitScores", "auroc", "average_precision",
           "class_scores", "evaluate_kappa", "fpr_at_tpr", "id_metrics", "level_metrics", "severity_levels", "window_starts"]
