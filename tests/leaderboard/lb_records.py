"""Shared test data: a valid harness record."""

from __future__ import annotations

import copy

GLYPHS = {"id": "glyphs", "version": "1.0.0", "manifest_sha256": "ab" * 32, "num_id_classes": 36, "num_ood_classes": 432}


def record(model: str = "glyph_cnn", weights: str = "11" * 32, kappa: str = "softmax", params: dict | None = None,
           aurocs: list[float] | None = None, acc: float = 0.81, num_levels: int = 11) -> dict:
    """A valid harness record; ood-auroc falls from 0.95 by 0.02 per level unless ``aurocs`` is given."""
    aurocs = aurocs or [round(0.95 - 0.02 * i, 6) for i in range(num_levels)]
    levels = [{"level": i, "percentile": i / (num_levels - 1), "level_score": -1.0 + 0.1 * i, "ood_auroc": a,
               "fpr_at_95_tpr": 0.3 + 0.01 * i, "aupr_in": 0.9, "aupr_out": 0.92, "ood_avg_conf": 0.4 + 0.01 * i,
               "num_id": 1800, "num_ood": 1800} for i, a in enumerate(aurocs)]
    return {
        "schema_version": 1,
        "benchmark": copy.deepcopy(GLYPHS),
        "model": {"name": model, "source": "examples/glyph_cnn.py", "file_sha256": "22" * 32, "weights_sha256": weights,
                  "num_parameters": 123456, "preprocessing": {"size": 32}},
        "kappa": {"name": kappa, "params": params or {}},
        "num_levels": num_levels,
        "levels": levels,
        "id": {"acc": acc, "auroc": 0.86, "avg_conf": 0.77, "num": 1800},
        "summary": {"mean_ood_auroc": sum(aurocs) / len(aurocs)},
        "metric_definitions": {"ood_auroc": "Mann-Whitney AUROC with average ranks, ID positive",
                               "fpr_at_95_tpr": "ODIN convention", "aupr": "average precision"},
        "seed": 0,
        "harness_version": "0.1.0",
        "created": "2026-12-02T10:00:00+00:00",
        "timings": {"total_s": 61.2},
        "provenance": "harness",
    }
