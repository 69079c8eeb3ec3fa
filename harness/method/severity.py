"""Severity levels of docs/method.md section 3: per-model groups of |ID| OOD classes, easiest to hardest.

Pure numpy, no I/O. Stable ordering (ties by class index); the window starts by a named rule of
:data:`SEVERITY_RULES`: ``integer`` (canonical, the default) or ``original`` (the original code's float rule).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from harness.errors import HarnessError

DEFAULT_NUM_LEVELS = 11
DEFAULT_RULE = "integer"
CONVENTION = (
    "docs/method.md section 3: class score = mean of the reported kappa value on the estimation "
    "split, ties by class index, "
)


@dataclass(frozen=True)
class SeverityLevels:
    """The levels of one (model, kappa) pair.

    ``classes[l]`` holds the indices (into the OOD class list) of level ``l``, ordered by class
    score; ``class_scores`` is the per-class mean kappa on the estimation split for all K classes.
    """

    classes: np.ndarray  # (L, W) int64
    level_scores: np.ndarray  # (L,) float64, mean class score of each level's window
    percentiles: np.ndarray  # (L,) float64, l / (L - 1): the nominal percentile
    starts: np.ndarray  # (L,) int64, window start in the ascending class order
    class_scores: np.ndarray  # (K,) float64
    rule: str = DEFAULT_RULE  # the window-start rule (SEVERITY_RULES)

    @property
    def num_levels(self) -> int:
        return len(self.level_scores)

    @property
    def window_percentiles(self) -> np.ndarray:
        """(L,) float64: each window's real percentile among the N windows, ``start / (N - 1)`` (0 when N = 1)."""
        windows = num_windows(len(self.class_scores), self.classes.shape[1])
        starts = np.asarray(self.starts, dtype=np.float64)
        return starts / (windows - 1) if windows > 1 else np.zeros_like(starts)


def class_scores(scores: np.ndarray, class_index: np.ndarray, num_classes: int) -> np.ndarray:
    """Mean kappa per OOD class from per-sample estimation scores (``class_index`` in [0, K))."""
    scores = np.asarray(scores, dtype=np.float64)
    class_index = np.asarray(class_index, dtype=np.int64)
    if scores.shape != class_index.shape or scores.ndim != 1:
        raise HarnessError(f"scores {scores.shape} and class indices {class_index.shape} must be matching 1-D arrays")
    if not np.all(np.isfinite(scores)):
        raise HarnessError(f"{int(np.sum(~np.isfinite(scores)))} estimation scores are NaN or infinite")
    if class_index.size and (class_index.min() < 0 or class_index.max() >= num_classes):
        raise HarnessError(f"class indices must lie in [0, {num_classes})")
    counts = np.bincount(class_index, minlength=num_classes)
    if np.any(counts == 0):
        missing = np.flatnonzero(counts == 0)
        raise HarnessError(f"{len(missing)} OOD classes have no estimation images (first: index {missing[0]})")
    sums = np.zeros(num_classes, dtype=np.float64)
    # Exact per-class sums (fsum) keep the result independent of sample order.
    order = np.argsort(class_index, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(counts)])
    sorted_scores = scores[order]
    for c in range(num_classes):
        sums[c] = math.fsum(sorted_scores[bounds[c] : bounds[c + 1]])
    return sums / counts


def num_windows(num_ood: int, window: int) -> int:
    """The distinct windows of ``window`` (|ID|) consecutive classes among ``num_ood`` OOD classes: the most severity
    levels a benchmark allows."""
    return max(num_ood - window + 1, 0)


def _integer_starts(num_windows: int, num_levels: int) -> np.ndarray:
    """``(l * N) // (L - 1)`` for l < L-1, and ``N - 1`` for the last level (integer arithmetic)."""
    starts = [(level * num_windows) // (num_levels - 1) for level in range(num_levels - 1)]
    return np.asarray([*starts, num_windows - 1], dtype=np.int64)


def _original_starts(num_windows: int, num_levels: int) -> np.ndarray:
    """``int(linspace(0, 1, L)[l] * N)`` in floating point, then the last start less 1 (the original code's rule)."""
    starts = [int(fraction * num_windows) for fraction in np.linspace(0.0, 1.0, num_levels)]
    starts[-1] -= 1
    return np.asarray(starts, dtype=np.int64)


@dataclass(frozen=True)
class SeverityRule:
    """A named window-start rule: ``starts(N, L)`` gives the L window starts among N windows, ascending."""

    name: str
    starts: Callable[[int, int], np.ndarray]
    description: str  # as records' metric_definitions carry it


# each rule declared once, its name and description as string literals: the command line's help and the record's
# schema read them from this file's source (harness.method.severity_names), without numpy
SEVERITY_RULES = {
    rule.name: rule
    for rule in (
        SeverityRule("integer", _integer_starts, "integer window starts"),
        SeverityRule(
            "original",
            _original_starts,
            "the original code's float window starts, int(linspace(0, 1, L)[l] * N) with the last one less 1",
        ),
    )
}


def check_rule(name: str) -> SeverityRule:
    """The rule named ``name``; a name that is none of :data:`SEVERITY_RULES` is refused in one line."""
    if name not in SEVERITY_RULES:
        raise HarnessError(f"unknown severity rule '{name}'; known: {', '.join(SEVERITY_RULES)}")
    return SEVERITY_RULES[name]


def severity_convention(rule: str = DEFAULT_RULE) -> str:
    """How a record's levels were formed (its ``metric_definitions["severity_levels"]``), naming ``rule``."""
    return CONVENTION + check_rule(rule).description


def window_starts(num_windows: int, num_levels: int, rule: str = DEFAULT_RULE) -> np.ndarray:
    """The window starts of ``num_levels`` levels among ``num_windows`` windows by ``rule`` (default: integer)."""
    if num_levels < 2:
        raise HarnessError(f"the number of severity levels must be at least 2, got {num_levels}")
    if num_windows < 1:
        raise HarnessError("there must be at least one window")
    return check_rule(rule).starts(num_windows, num_levels)


def severity_levels(
    class_score: np.ndarray, window: int, num_levels: int = DEFAULT_NUM_LEVELS, rule: str = DEFAULT_RULE
) -> SeverityLevels:
    """Form ``num_levels`` levels of ``window`` (= |Y_ID|) classes each from per-class scores, the windows starting by
    ``rule`` (:data:`SEVERITY_RULES`).

    Level 0 starts at the least confident class, the last level ends at the most confident.
    """
    s = np.asarray(class_score, dtype=np.float64)
    if s.ndim != 1:
        raise HarnessError("class scores must be a 1-D array")
    if not np.all(np.isfinite(s)):
        raise HarnessError("class scores contain NaN or infinite values")
    if window < 1:
        raise HarnessError(f"the window (number of ID classes) must be positive, got {window}")
    if num_levels < 2:
        raise HarnessError(f"the number of severity levels must be at least 2, got {num_levels}")
    k = len(s)
    if k < window:
        raise HarnessError(
            f"too few OOD classes: {k} OOD classes cannot fill a level of {window} (the number of ID classes)"
        )
    order = np.argsort(s, kind="stable")
    starts = window_starts(num_windows(k, window), num_levels, rule)
    classes = np.stack([order[start : start + window] for start in starts])
    # fsum is exactly rounded, so level scores of overlapping sorted windows never decrease.
    level_scores = np.array([math.fsum(s[level]) / window for level in classes])
    percentiles = np.arange(num_levels, dtype=np.float64) / (num_levels - 1)
    return SeverityLevels(classes, level_scores, percentiles, starts, s, rule)
