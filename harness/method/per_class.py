"""Per-OOD-class drill-down (docs/method.md section 4): each OOD test class against the ID test set, for one kappa.

Pure numpy, no I/O. A class's ood-auroc has the definition of :func:`harness.method.metrics.auroc` (ID positive,
Mann-Whitney with average ranks: a tied ID/OOD pair counts 1/2); its mean confidence is the mean of the kappa's
reported value over the class's test images. Neither changes a level's scores.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.errors import HarnessError
from harness.method.severity import class_scores

HARDEST = 10  # classes listed per level in a record, lowest ood-auroc first
QUANTILES = (0.0, 0.25, 0.5, 0.75, 1.0)


@dataclass(frozen=True)
class ClassMetrics:
    """Per OOD class (indexed like the benchmark's OOD class list): test images, ood-auroc, mean confidence."""

    count: np.ndarray  # (K,) int64
    ood_auroc: np.ndarray  # (K,) float64
    mean_confidence: np.ndarray  # (K,) float64


def class_metrics(
    id_scores: np.ndarray, ood_scores: np.ndarray, ood_confs: np.ndarray, ood_labels: np.ndarray, num_classes: int
) -> ClassMetrics:
    """Each OOD class's ood-auroc (its test images as negatives, every ID test image as a positive) and mean confidence.

    ``*_scores`` rank samples inside the AUROC; ``ood_confs`` are the reported values that are averaged.
    """
    pos = np.asarray(id_scores, dtype=np.float64).ravel()
    neg = np.asarray(ood_scores, dtype=np.float64).ravel()
    confs = np.asarray(ood_confs, dtype=np.float64).ravel()
    labels = np.asarray(ood_labels, dtype=np.int64).ravel()
    if pos.size == 0:
        raise HarnessError("the ID test scores are empty")
    if not neg.shape == confs.shape == labels.shape:
        raise HarnessError(
            f"{neg.size} OOD test scores, {confs.size} confidences and {labels.size} class labels must match"
        )
    for name, values in (("ID test scores", pos), ("OOD test scores", neg), ("OOD test confidences", confs)):
        if not np.all(np.isfinite(values)):
            raise HarnessError(f"{name} contain {int(np.sum(~np.isfinite(values)))} NaN or infinite values")
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise HarnessError(f"OOD class labels must lie in [0, {num_classes})")
    count = np.bincount(labels, minlength=num_classes)
    empty = np.flatnonzero(count == 0)
    if len(empty):
        raise HarnessError(f"{len(empty)} OOD classes have no test images (first: index {empty[0]})")
    mean_confidence = class_scores(confs, labels, num_classes)
    ranked = np.sort(pos)
    below = np.searchsorted(ranked, neg, side="left")  # ID scores below each OOD score
    above = pos.size - np.searchsorted(ranked, neg, side="right")  # ID scores above it: the pairs ranked right
    ties = pos.size - above - below
    twice_u = np.bincount(labels, weights=2 * above + ties, minlength=num_classes)  # integers, exact below 2**53
    return ClassMetrics(count.astype(np.int64), twice_u / (2.0 * pos.size * count), mean_confidence)


def level_of_classes(level_classes: np.ndarray, num_classes: int) -> list[list[int]]:
    """For each OOD class, the levels it belongs to (none when it falls between windows, two where windows overlap)."""
    levels: list[list[int]] = [[] for _ in range(num_classes)]
    for level, classes in enumerate(np.asarray(level_classes)):
        for c in classes:
            levels[int(c)].append(level)
    return levels


def class_rows(level_classes: np.ndarray, metrics: ClassMetrics) -> list[dict]:
    """One row per (level, class) in level order (classes by their estimation score, as in the level manifest), then
    one row with ``level`` None per class that no level holds."""
    rows = []
    for level, classes in enumerate(np.asarray(level_classes)):
        rows += [_row(level, int(c), metrics) for c in classes]
    in_none = [c for c, levels in enumerate(level_of_classes(level_classes, len(metrics.count))) if not levels]
    return rows + [_row(None, c, metrics) for c in in_none]


def _row(level: int | None, c: int, metrics: ClassMetrics) -> dict:
    return {
        "level": level,
        "class_index": c,
        "n": int(metrics.count[c]),
        "ood_auroc": float(metrics.ood_auroc[c]),
        "mean_confidence": float(metrics.mean_confidence[c]),
    }


def level_summaries(
    level_classes: np.ndarray,
    metrics: ClassMetrics,
    class_ids: list[str],
    names: list[str],
    thumbnails: dict[int, list[str]] | None = None,
    hardest: int = HARDEST,
) -> list[dict]:
    """Per level: its number of classes, the quantiles of their ood-auroc (min, q25, median, q75, max) and its
    ``hardest`` classes (lowest ood-auroc first, ties by class index) with ``thumbnails[class index]``."""
    thumbnails = thumbnails or {}
    out = []
    for level, classes in enumerate(np.asarray(level_classes, dtype=np.int64)):
        aurocs = metrics.ood_auroc[classes]
        order = _hardest(classes, metrics, hardest)
        out.append(
            {
                "level": level,
                "n_classes": int(len(classes)),
                "ood_auroc_quantiles": [float(q) for q in np.maximum.accumulate(np.quantile(aurocs, QUANTILES))],
                "hardest": [
                    {
                        "id": class_ids[c],
                        "name": names[c],
                        "ood_auroc": float(metrics.ood_auroc[c]),
                        "mean_confidence": float(metrics.mean_confidence[c]),
                        "thumbnails": list(thumbnails.get(int(c), [])),
                    }
                    for c in order
                ],
            }
        )
    return out


def hardest_indices(level_classes: np.ndarray, metrics: ClassMetrics, hardest: int = HARDEST) -> set[int]:
    """The classes that :func:`level_summaries` lists (those that get thumbnails)."""
    return {
        int(c) for classes in np.asarray(level_classes, dtype=np.int64) for c in _hardest(classes, metrics, hardest)
    }


def _hardest(classes: np.ndarray, metrics: ClassMetrics, hardest: int) -> np.ndarray:
    return classes[np.lexsort((classes, metrics.ood_auroc[classes]))][:hardest]
