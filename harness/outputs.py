"""What a run writes: one result record (JSON) per kappa, a per-level CSV in the paper's columns,
the per-model level manifests, and a PNG of the severity curves."""

from __future__ import annotations

import datetime
import json
import math
import os
import shutil
import tempfile
import textwrap
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from dataset_builder.benchmark import Benchmark
from dataset_builder.files import fsync_tree
from dataset_builder.levels import level_table, write_level_table
from harness import __version__, phases
from harness.drilldown import PerClass
from harness.errors import HarnessError
from harness.method.evaluation import KappaResult
from harness.method.metrics import interval_statement, summary_metrics
from harness.method.registry import definitions, registered
from harness.method.scores import SplitScores
from harness.method.severity import DEFAULT_RULE, severity_convention
from harness.per_image import PerImage
from harness.runtime.scoring import Scorer, preprocessing
from harness.submission import Submission
from leaderboard.csvsafe import csv_bytes
from leaderboard.errors import LeaderboardError
from leaderboard.record import make_record
from leaderboard.store import add_records

PAPER_COLUMNS = {
    "level": "severity level",
    "percentile": "percentile",
    "ood_auroc": "ood-auroc",
    "ood_avg_conf": "ood_avg_conf",
}  # then every other registered level metric under its label, then the level score
SIDES = ("low", "high")


def extra_columns() -> dict[str, str]:
    """``per_level.csv``'s columns after the paper's: the other level metrics of the registry, then the level
    score and the window's real percentile (the severity rule's column follows them)."""
    metrics = {m.name: m.label for m in registered("level") if m.name not in PAPER_COLUMNS}
    return {**metrics, "level_score": "level score", "window_percentile": "window percentile"}


def interval_columns() -> dict[str, str]:
    """``per_level.csv``'s last columns: the ends of the level metrics' intervals (``ood-auroc low``, ...)."""
    return {end: f"{m.label} {side}" for m in registered("level") if m.bounds for end, side in zip(m.bounds, SIDES)}


def _clean(value):
    """JSON-safe: NaN is never written (records must say null)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("a metric is NaN or infinite")
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def record(
    result: KappaResult,
    *,
    benchmark: dict,
    model: dict,
    kappa_params: dict,
    probability: bool,
    seed: int,
    order_seed: int | None = None,
    order_seed_drawn: bool = False,
    version: str,
    created: str,
    timings: dict,
    metric_definitions: dict,
    per_class: dict | None = None,
    per_image: dict | None = None,
) -> dict:
    """The result record of one (model, kappa) pair (:mod:`leaderboard.record`), naming its levels' severity rule;
    ``per_class`` summarises the drill-down, ``per_image`` names the per-image scores' file."""
    return _clean(
        make_record(
            provenance="harness",
            benchmark=benchmark,
            model=model,
            kappa={"name": result.kappa, "params": kappa_params, "probability": probability},
            levels=result.rows,
            id=result.id,
            summary={**summary_metrics(result.rows), **result.summary_intervals},
            metric_definitions=metric_definitions,
            intervals=interval_statement(),
            seed=seed,
            order_seed=order_seed,
            order_seed_drawn=order_seed_drawn,
            harness_version=version,
            created=created,
            timings=timings,
            per_class=per_class,
            per_image=per_image,
            severity_rule=result.rule,
            private=result.private,
        )
    )


def per_level_frame(model_name: str, results: list[KappaResult]) -> pd.DataFrame:
    """All levels of all kappas in the paper's columns (then the other level metrics with the level score, the
    window's real percentile, the severity rule, the other ID metrics as ``id-<label>``, and the ends of the level
    metrics' intervals)."""
    rows, extra = [], extra_columns()
    later_id = [m for m in registered("id") if m.name not in ("acc", "auroc", "avg_conf")]  # after the paper's columns
    for result in results:
        for row in result.rows:
            out = {PAPER_COLUMNS[k]: row[k] for k in PAPER_COLUMNS}
            out.update(
                {
                    "id-acc": result.id["acc"],
                    "id-auroc": result.id["auroc"],
                    "id_avg_conf": result.id["avg_conf"],
                    "model name": model_name,
                    "confidence function": result.kappa,
                    "model name - confidence function": f"{model_name}-{result.kappa}",
                }
            )
            out.update({label: row.get(k) for k, label in extra.items()})
            out["severity rule"] = result.rule
            out.update({f"id-{m.label}": result.id.get(m.name) for m in later_id})
            out.update({label: row.get(k) for k, label in interval_columns().items()})
            rows.append(out)
    return pd.DataFrame(rows)


TABLE_WIDTH = 100  # the terminal table's width: its kappas go in blocks that fit


def summary_table(results: list[KappaResult], width: int = TABLE_WIDTH) -> str:
    """The per-level table printed at the end of a run: each kappa's ood-auroc and fpr@95 per level under one header
    row of short names (``k1.auroc``, ``k1.fpr95``, ...), its kappas in blocks no wider than ``width`` columns, and a
    legend that names the kappas and the columns; then a few lines per kappa with its summary and ID metrics in [0, 1]
    (the metric registry's, by label), each with its 95% interval where it has one."""
    base = {
        "level": [row["level"] for row in results[0].rows],
        "pct": [f"{row['percentile']:.1f}" for row in results[0].rows],
    }
    blocks, block = [], {}
    for i, result in enumerate(results, 1):
        pair = {
            f"k{i}.auroc": [f"{row['ood_auroc']:.4f}" for row in result.rows],
            f"k{i}.fpr95": [f"{row['fpr_at_95_tpr']:.3f}" for row in result.rows],
        }
        if block and _width({**base, **block, **pair}) > width:
            blocks.append(block)
            block = {}
        block |= pair
    lines = "\n\n".join(pd.DataFrame({**base, **block}).to_string(index=False) for block in [*blocks, block])
    legend = "; ".join(f"k{i} {result.kappa}" for i, result in enumerate(results, 1))
    legend += ". auroc: the level's ood-auroc; fpr95: its FPR at 95% TPR, ID positive (docs/method.md, section 4)"
    out = [lines, *textwrap.wrap(legend, width), ""]
    shown = [m for m in (*registered("summary"), *registered("id")) if m.unit]  # the registry's rates, in order
    for result in results:
        values = {**summary_metrics(result.rows), **result.summary_intervals, **result.id}
        items = [f"{m.label} {_with_interval(values, m)}" for m in shown]
        out += _filled(f"{result.kappa:>12}: ", items, width)
    return "\n".join(out)


def _with_interval(values: dict, metric) -> str:
    """A metric's value for the terminal, ``n/a`` when it has none, followed by its interval ``[low, high]`` where the
    run has one."""
    value = values.get(metric.name)
    if value is None:
        return "n/a"
    ends = [values.get(end) for end in metric.bounds or ()]
    return f"{value:.4f}" + (f" [{ends[0]:.4f}, {ends[1]:.4f}]" if ends and None not in ends else "")


def _filled(head: str, items: list[str], width: int, gap: str = "   ") -> list[str]:
    """``head`` then ``items`` (each kept whole), ``gap`` apart, in lines of ``width`` columns at most where they fit;
    the lines after the first indented under the first item."""
    lines, line = [], head + items[0]
    for item in items[1:]:
        if len(line) + len(gap) + len(item) > width:
            lines.append(line)
            line = " " * len(head) + item
        else:
            line += gap + item
    return [*lines, line]


def _width(columns: dict[str, list[str]]) -> int:
    """The width of ``columns`` as ``DataFrame.to_string`` prints them (one space between columns)."""
    return sum(max(len(name), *map(len, map(str, values))) for name, values in columns.items()) + len(columns) - 1


def auroc_error_bars(rows: list[dict]) -> list[list[float]]:
    """The distances below and above each level's ood-auroc to the ends of its 95% interval (NaN where the record has
    none), as ``errorbar``'s ``yerr`` takes them."""
    low, high = next(m.bounds for m in registered("level") if m.name == "ood_auroc")

    def gap(row: dict, end: str, sign: int) -> float:
        return float("nan") if row.get(end) is None else sign * (row[end] - row["ood_auroc"])

    return [[gap(row, low, -1) for row in rows], [gap(row, high, 1) for row in rows]]


def curves_figure(model_name: str, results: list[KappaResult], benchmark: dict) -> plt.Figure:
    """ood-auroc per level with its 95% intervals as error bars (and the chance line), and mean OOD confidence per
    level relative to the ID mean."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.4))
    for result in results:
        levels = [row["level"] for row in result.rows]
        aurocs = [row["ood_auroc"] for row in result.rows]
        left.errorbar(levels, aurocs, yerr=auroc_error_bars(result.rows), marker="o", capsize=3, label=result.kappa)
        base, top = result.rows[0]["ood_avg_conf"], result.id["avg_conf"]
        span = (top - base) or 1.0
        right.plot(levels, [(row["ood_avg_conf"] - base) / span for row in result.rows], marker="o", label=result.kappa)
    left.axhline(0.5, color="grey", linestyle="--", linewidth=1, label="chance")
    left.set(
        xlabel="severity level",
        ylabel="ood-auroc (95% interval)",
        title="C-OOD detection (ood-auroc) per severity level",
    )
    right.set(
        xlabel="severity level",
        ylabel="(OOD mean - level 0 mean) / (ID mean - level 0 mean)",
        title="mean OOD confidence per level, relative to ID",
    )
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.set_xticks(levels)
    left.legend()
    fig.suptitle(
        f"{model_name} on {benchmark['id']} {benchmark['version']} (revision {benchmark['manifest_sha256'][:12]})"
    )
    fig.tight_layout()
    return fig


def plot_curves(model_name: str, results: list[KappaResult], path: Path, benchmark: dict) -> None:
    """Write :func:`curves_figure` to ``path`` (a PNG)."""
    fig = curves_figure(model_name, results, benchmark)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def check_out(out: Path) -> None:
    """Refuse, before any work, an ``out`` that is a file, a folder that is not a run's outputs, or unwritable."""
    if out.exists() and not out.is_dir():
        raise HarnessError(f"--out {out} is a file, not a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / "records").is_dir():
        raise HarnessError(f"--out {out} exists and holds no run's outputs; choose an empty or new folder")
    parent = out.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryDirectory(dir=parent).cleanup()
    except OSError as exc:
        raise HarnessError(f"--out {out} cannot be written: {exc.strerror or exc}") from exc


def write_outputs(
    out: Path,
    model_name: str,
    results: list[KappaResult],
    records: list[dict],
    ood_class_ids: list[str],
    benchmark: dict,
    per_class=None,
    per_image: PerImage | None = None,
) -> dict:
    """Write every output of a run as one set (with ``per_class``, a :class:`harness.drilldown.PerClass`, and
    ``per_image``, a :class:`harness.per_image.PerImage`, their files):
    into a new folder beside ``out``, then swapped in whole. Outputs already in ``out`` are moved aside
    (``paths["previous"]``), never mixed with the new ones. Return the paths."""
    check_out(out)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.absolute().parent))
    try:
        names = {"records": [], "csv": "per_level.csv", "plot": "severity_curves.png"}
        (staging / "records").mkdir()
        for result, rec in zip(results, records):
            path = staging / "records" / f"{result.kappa}.json"
            path.write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
            names["records"].append(path.relative_to(staging))
            levels = result.levels
            table = level_table(
                levels.classes.tolist(),
                levels.class_scores.tolist(),
                levels.level_scores.tolist(),
                levels.percentiles.tolist(),
                ood_class_ids,
                levels.window_percentiles.tolist(),
                levels.rule,
            )
            write_level_table(table, staging / "levels", model_name, result.kappa)
        (staging / names["csv"]).write_bytes(csv_bytes(per_level_frame(model_name, results)))
        plot_curves(model_name, results, staging / names["plot"], benchmark)
        for part in (per_class, per_image):
            if part is not None:
                part.write(staging)
        fsync_tree(staging)
        previous = None
        if out.exists() and any(out.iterdir()):
            stamp = datetime.datetime.now().strftime("%Y%m%dT%H%M%S")
            previous = out.with_name(f"{out.name}.previous-{stamp}")
            os.rename(out, previous)
        elif out.exists():
            out.rmdir()
        os.rename(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return {
        "records": [out / p for p in names["records"]],
        "csv": out / names["csv"],
        "plot": out / names["plot"],
        "previous": previous,
    }


def metric_definitions(rule: str = DEFAULT_RULE) -> dict[str, str]:
    """What a record's ``metric_definitions`` holds: every registered metric's definition and the severity rule."""
    return {**definitions(), "severity_levels": severity_convention(rule)}


@dataclass
class Evaluation:
    """The results of one model on one benchmark: a :class:`KappaResult` and a record per kappa, the per-sample
    scores of each split, the run's statistics, and (once written) the output paths."""

    submission: Submission
    benchmark: Benchmark
    results: list[KappaResult]
    records: list[dict]
    stats: dict
    scores: dict[str, SplitScores]
    paths: dict = field(default_factory=dict)
    per_class: PerClass | None = None
    per_image: PerImage | None = None

    @property
    def table(self) -> str:
        """The per-level table printed at the end of a run."""
        return summary_table(self.results)

    @property
    def per_level(self) -> pd.DataFrame:
        """Every level of every kappa in the paper's columns (then the other level metrics and the level score)."""
        return per_level_frame(self.submission.name, self.results)


def records_of(
    scorer: Scorer,
    submission: Submission,
    results: list[KappaResult],
    drilldown: PerClass,
    timings: dict,
    stats: dict,
    created: str,
    images: PerImage | None = None,
) -> list[dict]:
    """A record per kappa: its results, the benchmark, the model, the run's timings, statistics and execution, and
    (with ``images``) its per-image file."""
    config, forward, bench = scorer.config, scorer.forward, scorer.benchmark
    run_info = {
        **timings,
        **stats,
        **scorer.execution.describe(),
        "batch_size": config.batch_size,
        "workers": config.workers,
        "world_size": scorer.ranks.world,
        "feature_dtype": config.feature_dtype,
        "isolation": {**forward.isolation, "bundle_sha256": submission.bundle_sha256}
        if submission.bundle_sha256
        else forward.isolation,
    }
    model_info = {
        "name": submission.name,
        "source": submission.source,
        "file_sha256": submission.file_sha256,
        "weights_sha256": submission.weights_sha256,
        "bundle_sha256": submission.bundle_sha256,  # a submission file's identity, hashed here (not by its code)
        "num_parameters": submission.num_parameters,
        "preprocessing": preprocessing(submission, scorer.decoder),
        "hub_weights": submission.hub_weights,
        "torchvision_weights": submission.torchvision_weights,
        "class_subset": submission.class_subset,
    }
    return [
        record(
            result,
            benchmark=bench.identity(),
            model=model_info,
            kappa_params=spec.params,
            probability=spec.probability,
            seed=config.seed,
            order_seed=config.order_seed,
            order_seed_drawn=config.order_seed_drawn,
            version=__version__,
            created=created,
            timings=run_info,
            metric_definitions=metric_definitions(result.rule),
            per_class=drilldown.summaries[spec.name],
            per_image=None if images is None else images.fields[spec.name],
        )
        for spec, result in zip(scorer.kappas, results)
    ]


class LeaderboardRefused(HarnessError):
    """The leaderboard did not take a run's records (its outputs, where asked, are written); ``evaluation``: the
    run's results."""

    def __init__(self, message: str, evaluation: Evaluation):
        super().__init__(message)
        self.evaluation = evaluation


def save(evaluation: Evaluation, out: str | Path | None, leaderboard: str | Path | None = None) -> None:
    """Write an evaluation's records, CSV, level manifests and plot to ``out``; add its records to ``leaderboard``
    (:class:`LeaderboardRefused` if it does not take them)."""
    bench = evaluation.benchmark
    if out is not None:
        phases.say(f"writing the outputs to {out}")
        evaluation.paths = write_outputs(
            Path(out),
            evaluation.submission.name,
            evaluation.results,
            evaluation.records,
            list(bench.ood_classes["id"]),
            bench.identity(),
            per_class=evaluation.per_class,
            per_image=evaluation.per_image,
        )
    if leaderboard is not None:
        try:
            with _run_folder(evaluation, out) as folder:
                add_records(Path(leaderboard), evaluation.records, create=True, folder=folder)
        except (LeaderboardError, OSError) as exc:
            where = f"the run's outputs are in {out}, but " if out is not None else ""
            raise LeaderboardRefused(f"{where}the leaderboard could not take the records: {exc}", evaluation) from exc


@contextmanager
def _run_folder(evaluation: Evaluation, out: str | Path | None):
    """The folder the records' ``per_class`` and ``per_image`` paths are relative to: ``out``, or a temporary one
    holding the drill-down and the per-image files."""
    parts = [p for p in (evaluation.per_class, evaluation.per_image) if p is not None]
    if out is not None or not parts:
        yield None if out is None else Path(out)
        return
    with tempfile.TemporaryDirectory(prefix="cood-per-class-") as folder:
        for part in parts:
            part.write(Path(folder))
        yield Path(folder)
