"""The method, pure numpy with no I/O and no torch (docs/method.md): severity levels, metrics (declared in the metric
registry) and their intervals, the ID set's selective-prediction and calibration metrics, and the evaluation of one
(model, kappa) pair from per-sample scores. Exports load on first use, so that a module needing one of them (the
sandboxed child needs only :class:`SplitScores`' neighbours) does not import scipy's statistics."""

from importlib import import_module

from harness.method.registry import load_built_ins_from

_EXPORTS = {
    "KappaResult": "evaluation",
    "evaluate_kappa": "evaluation",
    "Interval": "intervals",
    "auroc_interval": "intervals",
    "mean_auroc_interval": "intervals",
    "accuracy_interval": "intervals",
    "bootstrap_interval": "intervals",
    "Comparison": "paired",
    "Difference": "paired",
    "compare_entries": "paired",
    "selective_metrics": "selective",
    "auroc": "metrics",
    "average_precision": "metrics",
    "fpr_at_tpr": "metrics",
    "id_metrics": "metrics",
    "level_metrics": "metrics",
    "summary_metrics": "metrics",
    "Metric": "registry",
    "register_metric": "registry",
    "SplitScores": "scores",
    "DEFAULT_NUM_LEVELS": "severity",
    "SeverityLevels": "severity",
    "class_scores": "severity",
    "severity_levels": "severity",
    "num_windows": "severity",
    "window_starts": "severity",
    "SEVERITY_RULES": "severity",
}
__all__ = sorted(_EXPORTS)
load_built_ins_from("harness.method.metrics")  # the registry imports them on first use


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'harness.method' has no attribute '{name}'")
    return getattr(import_module(f"harness.method.{_EXPORTS[name]}"), name)
