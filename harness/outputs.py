"""What a run writes: one result record (JSON) per kappa, a per-level CSV in the paper's columns,
the per-model level manifests, and a PNG of the severity curves."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from dataset_builder.levels import level_table, write_level_table  # noqa: E402
from harness.evaluate import KappaResult  # noqa: E402
from leaderboard.schema import SCHEMA_VERSION  # noqa: E402

PAPER_COLUMNS = {"level": "severity level", "percentile": "percentile", "ood_auroc": "ood-auroc", "ood_avg_conf": "ood_avg_conf"}
EXTRA_COLUMNS = {"fpr_at_95_tpr": "fpr@95", "aupr_in": "aupr-in", "aupr_out": "aupr-out", "level_score": "level score"}


def _clean(value):
    """JSON-safe: NaN is never written (records must say null)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("a metric is NaN or infinite")
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def record(result: KappaResult, *, benchmark: dict, model: dict, kappa_params: dict, seed: int, version: str,
           created: str, timings: dict, metric_definitions: dict) -> dict:
    """The result record of one (model, kappa) pair (schema in the README)."""
    return _clean({
        "schema_version": SCHEMA_VERSION,
        "benchmark": benchmark,
        "model": model,
        "kappa": {"name": result.kappa, "params": kappa_params},
        "num_levels": result.levels.num_levels,
        "levels": result.rows,
        "id": result.id,
        "summary": {"mean_ood_auroc": result.mean_ood_auroc},
        "metric_definitions": metric_definitions,
        "seed": seed,
        "harness_version": version,
        "created": created,
        "timings": timings,
        "provenance": "harness",
    })


def per_level_frame(model_name: str, results: list[KappaResult]) -> pd.DataFrame:
    """All levels of all kappas in the paper's columns (then fpr@95, aupr-in, aupr-out, level score)."""
    rows = []
    for result in results:
        for row in result.rows:
            out = {PAPER_COLUMNS[k]: row[k] for k in PAPER_COLUMNS}
            out.update({"id-acc": result.id["acc"], "id-auroc": result.id["auroc"], "id_avg_conf": result.id["avg_conf"],
                        "model name": model_name, "confidence function": result.kappa,
                        "model name - confidence function": f"{model_name}-{result.kappa}"})
            out.update({EXTRA_COLUMNS[k]: row[k] for k in EXTRA_COLUMNS})
            rows.append(out)
    return pd.DataFrame(rows)


def summary_table(results: list[KappaResult]) -> str:
    """The per-level table printed at the end of a run: ood-auroc (and fpr@95) per kappa."""
    frame = pd.DataFrame({"level": [row["level"] for row in results[0].rows],
                          "pct": [f"{row['percentile']:.1f}" for row in results[0].rows]})
    for result in results:
        frame[f"{result.kappa} auroc"] = [f"{row['ood_auroc']:.4f}" for row in result.rows]
        frame[f"{result.kappa} fpr95"] = [f"{row['fpr_at_95_tpr']:.3f}" for row in result.rows]
    lines = [frame.to_string(index=False), ""]
    for result in results:
        auroc = "n/a" if result.id["auroc"] is None else f"{result.id['auroc']:.4f}"
        lines.append(f"{result.kappa:>12}: mean ood-auroc {result.mean_ood_auroc:.4f}   id-acc {result.id['acc']:.4f}   id-auroc {auroc}")
    return "\n".join(lines)


def plot_curves(model_name: str, results: list[KappaResult], path: Path) -> None:
    """ood-auroc per level, and mean OOD confidence per level relative to the ID mean (1 = as confident as on ID)."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for result in results:
        levels = [row["level"] for row in result.rows]
        left.plot(levels, [row["ood_auroc"] for row in result.rows], marker="o", label=result.kappa)
        base, top = result.rows[0]["ood_avg_conf"], result.id["avg_conf"]
        span = (top - base) or 1.0
        right.plot(levels, [(row["ood_avg_conf"] - base) / span for row in result.rows], marker="o", label=result.kappa)
    left.set(xlabel="severity level", ylabel="ood-auroc", title=f"{model_name}: C-OOD detection per severity level")
    right.set(xlabel="severity level", ylabel="mean OOD confidence (0 = level 0, 1 = ID mean)", title="confidence on OOD rises with severity")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.set_xticks(levels)
    left.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _write_text(path: Path, text: str) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    os.replace(partial, path)


def write_outputs(out: Path, model_name: str, results: list[KappaResult], records: list[dict], ood_class_ids: list[str]) -> dict:
    """Write every output of a run under ``out``; return their paths."""
    (out / "records").mkdir(parents=True, exist_ok=True)
    paths = {"records": []}
    for result, rec in zip(results, records):
        path = out / "records" / f"{result.kappa}.json"
        _write_text(path, json.dumps(rec, indent=1, sort_keys=True) + "\n")
        paths["records"].append(path)
        levels = result.levels
        table = level_table(levels.classes.tolist(), levels.class_scores.tolist(), levels.level_scores.tolist(),
                            levels.percentiles.tolist(), ood_class_ids)
        write_level_table(table, out / "levels", model_name, result.kappa)
    paths["csv"] = out / "per_level.csv"
    _write_text(paths["csv"], per_level_frame(model_name, results).to_csv(index=False))
    paths["plot"] = out / "severity_curves.png"
    plot_curves(model_name, results, paths["plot"])
    return paths
