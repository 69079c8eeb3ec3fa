"""The metric registry: every metric a record carries, declared once with its function and what the records, the
JSON Schema, the table, ``per_level.csv``, the terminal summary and the site need to know about it.

A metric is a :class:`Metric` given to :func:`register_metric`; the built-in ones are declared beside their functions
in :mod:`harness.method.metrics`, which the package :mod:`harness.method` names (:func:`load_built_ins_from`) and
:func:`registered` imports on first use, so a new metric is one declaration (a plugin's or a test's module may register
one too). Scopes: ``level`` (computed per severity level from a
:class:`LevelScores`), ``id`` (once, on the ID test set, from an :class:`IdScores`) and ``summary`` (from the levels'
rows). This module imports nothing but the standard library and the floor, so the leaderboard reads it without the
harness's numerical dependencies.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from typing import Any

from dataset_builder.errors import CoodError

SCOPES = ("level", "id", "summary")
AGGREGATES = ("levels", "mean")  # a level metric in the table: one column per level, or the mean over the levels
NULLS = ("never", "paper", "always")  # when a record may hold null: never, in a published result only, or always
NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
PLUGIN_NAME = re.compile(r"x_[a-z][a-z0-9]*_[a-z][a-z0-9_]*")  # a plugin's metric: x_<plugin>_<name>
PROJECT = ("harness", "leaderboard", "dataset_builder")  # the packages whose metrics are built in


@dataclass(frozen=True)
class LevelScores:
    """What a level metric sees: the ID test scores (positives) and the level's OOD test scores, with the reported
    confidences (the scores themselves where a kappa reports no other)."""

    id_scores: Any
    ood_scores: Any
    id_conf: Any
    ood_conf: Any


@dataclass(frozen=True)
class IdScores:
    """What an ID metric sees: the ID test scores, whether each prediction is right, the reported confidences,
    whether the kappa declares them probabilities that the prediction is right (the calibration metrics need them),
    and the classifier's logits over the ID classes with the true labels (None where a caller kept no logits)."""

    scores: Any
    correct: Any
    conf: Any
    probability: bool = False
    logits: Any = None
    labels: Any = None


@dataclass(frozen=True)
class LevelSet:
    """What a summary metric's interval sees: the ID test scores (positives), every OOD test score, and per level the
    indices of its OOD scores (the levels share the positives, and overlapping levels share OOD images)."""

    id_scores: Any
    ood_scores: Any
    levels: Any


@dataclass(frozen=True)
class IntervalRule:
    """How a metric's 95% interval is computed: ``method`` names it (records state it once, in ``intervals``);
    ``compute`` takes what the metric's ``compute`` takes (a summary metric's: a :class:`LevelSet`) and returns
    ``(low, high)``, or None where the metric is undefined."""

    method: str
    compute: Callable[[Any], tuple[float, float] | None]


@dataclass(frozen=True)
class Metric:
    """A metric. ``compute`` takes a :class:`LevelScores` (scope ``level``), an :class:`IdScores` (``id``) or the
    list of level rows (``summary``) and returns a float (None where ``null`` is ``always`` and it is undefined).

    ``label``: its short name in tables and pages (``fpr@95``); ``definition``: how it is computed, as records carry
    it; ``unit``: its values lie in [0, 1]; ``aggregate`` (level metrics): how the table shows it, ``levels`` (a column
    per level) or ``mean`` (a column ``mean_<name>``), None for none; ``column`` (id and summary metrics): its table
    column; ``null``: see :data:`NULLS`; ``since``: the record schema version from which every record holds it (None:
    added later, records may lack it, as records written before it existed do); ``interval``: how its 95% interval is
    computed (an :class:`IntervalRule`; records then hold ``<name>_low`` and ``<name>_high`` in its part), None for
    none."""

    name: str
    scope: str
    compute: Callable[[Any], float | None]
    higher_is_better: bool
    label: str
    definition: str
    unit: bool = True
    aggregate: str | None = None
    column: str | None = None
    null: str = "paper"
    since: int | None = None
    interval: IntervalRule | None = None

    @property
    def table_column(self) -> str | None:
        """The table column that shows it (None: the table leaves it to the records)."""
        if self.scope != "level":
            return self.column
        return f"mean_{self.name}" if self.aggregate == "mean" else None

    @property
    def bounds(self) -> tuple[str, str] | None:
        """The names of its interval's ends in a record (``acc_low``, ``acc_high``), and in the table with ``_low`` and
        ``_high`` after its column; None without an interval."""
        return (f"{self.name}_low", f"{self.name}_high") if self.interval else None


_METRICS: dict[str, Metric] = {}
_BUILT_IN: list[str] = []  # the modules that declare the built-in metrics


def load_built_ins_from(*modules: str) -> None:
    """Name the modules that declare the built-in metrics, imported on the registry's first use. The package names
    them (this module is imported before any of them), so the registry imports none of the modules that import it."""
    _BUILT_IN.extend(modules)


def _built_ins() -> None:
    for module in _BUILT_IN:
        import_module(module)  # a no-op while the module declares its metrics


def register_metric(metric: Metric) -> Metric:
    """Declare ``metric``, after the built-in ones; its name is unique within its scope and a lower-case identifier
    (records carry it), a plugin's (one computed outside :data:`PROJECT`) namespaced as ``x_<plugin>_<name>``
    (:data:`PLUGIN_NAME`), so that it cannot collide with a built-in one."""
    _built_ins()
    if not NAME.fullmatch(metric.name):
        raise CoodError(f"metric name {metric.name!r} is not a lower-case letter followed by letters, digits and '_'")
    if metric.scope not in SCOPES:
        raise CoodError(f"metric '{metric.name}': scope {metric.scope!r} is not one of {', '.join(SCOPES)}")
    if metric.null not in NULLS:
        raise CoodError(f"metric '{metric.name}': null {metric.null!r} is not one of {', '.join(NULLS)}")
    if metric.aggregate is not None and (metric.scope != "level" or metric.aggregate not in AGGREGATES):
        raise CoodError(f"metric '{metric.name}': aggregate {metric.aggregate!r} is for level metrics: levels or mean")
    key = f"{metric.scope}:{metric.name}"
    if key in _METRICS:
        raise CoodError(f"metric '{metric.name}' ({metric.scope}) is registered twice")
    _check_namespace(metric)
    _METRICS[key] = metric
    return metric


def _check_namespace(metric: Metric) -> None:
    """A plugin's metric is named ``x_<plugin>_<name>``; a built-in one never starts with ``x_``."""
    package = (getattr(metric.compute, "__module__", None) or "").split(".")[0]
    plugin = package not in PROJECT
    if plugin and not PLUGIN_NAME.fullmatch(metric.name):
        raise CoodError(f"metric '{metric.name}' is a plugin's: name it x_<plugin>_<name> (e.g. 'x_lab_{metric.name}')")
    if not plugin and metric.name.startswith("x_"):
        raise CoodError(f"metric '{metric.name}': x_ starts a plugin's metric, not a built-in one")


def unregister_metric(metric: Metric) -> None:
    """Take ``metric`` out again (a test's or a plugin's)."""
    _METRICS.pop(f"{metric.scope}:{metric.name}", None)


def registered(scope: str | None = None) -> tuple[Metric, ...]:
    """The metrics of ``scope`` (all of them without one), built-in first, in declaration order."""
    _built_ins()
    return tuple(m for m in _METRICS.values() if scope is None or m.scope == scope)


def generation() -> tuple[str, ...]:
    """What is registered now (a key for what is derived from the registry)."""
    registered()
    return tuple(_METRICS)


def interval_methods() -> dict[str, str]:
    """How each metric's interval is computed, by its place in a record (``levels.ood_auroc``, ``id.acc``,
    ``summary.mean_ood_auroc``), as records state it."""
    where = {"level": "levels", "id": "id", "summary": "summary"}
    return {f"{where[m.scope]}.{m.name}": m.interval.method for m in registered() if m.interval}


def definitions() -> dict[str, str]:
    """Every metric's definition by name, as records carry them."""
    return {m.name: m.definition for m in registered()}
