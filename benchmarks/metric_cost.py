"""What the metrics added after the first record schema cost, side by side in one run (figures, not a test).

"Before" is the registry as records of schema version 1 knew it (ood-auroc, fpr@95, aupr-in/out, the average
confidences, id-acc, id-auroc, the mean), with no interval; "after" is every registered metric (fpr@99, the selective
and calibration ID metrics) with the 95% intervals.

1. A glyph ``submit`` (the embedded benchmark, the example CNN, 4 kappas, on the CPU): its wall time, and the time of
   computing its records from the run's per-sample scores (levels, metrics and the records themselves) before and
   after; the difference is their share of the run's wall time (budget: at most 5%).
2. The leaderboard site of the paper's 1,848 entries, before (the published numbers) and after (every entry given
   every metric and interval: synthetic values, only their cost is measured, the columns, the error bars and the
   marks); budget: at most +10%.

Runs are interleaved and the best of ``--repeats`` kept.

    python benchmarks/metric_cost.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import tempfile
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path

from harness.method.evaluation import evaluate_kappa
from harness.method.registry import register_metric, registered, unregister_metric
from harness.outputs import metric_definitions, record
from harness.run import submit
from leaderboard.paper import paper_records, read_paper_table
from leaderboard.site import build_site
from leaderboard.store import add_records, current_table

CNN = Path(__file__).resolve().parents[1] / "examples" / "glyph_cnn.py"
KAPPAS = ["softmax", "entropy", "max_logit", "energy"]
NUM_LEVELS = 11


@contextmanager
def first_schema():
    """The registry as records of schema version 1 knew it, without intervals; restored after."""
    metrics = registered()
    for metric in metrics:
        unregister_metric(metric)
    for metric in metrics:
        if metric.since == 1:
            register_metric(dataclasses.replace(metric, interval=None))
    try:
        yield
    finally:
        for metric in registered():
            unregister_metric(metric)
        for metric in metrics:
            register_metric(metric)


def records_time(evaluation, repeats: int) -> float:
    """The best time of computing every kappa's levels, metrics and record from the run's scores."""
    scores, bench = evaluation.scores, evaluation.benchmark
    definitions = metric_definitions()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for kappa in KAPPAS:
            result = evaluate_kappa(
                kappa,
                scores["id_test"],
                scores["ood_estimation"],
                scores["ood_test"],
                len(bench.id_classes),
                len(bench.ood_classes),
                NUM_LEVELS,
                probability=kappa == "softmax",
            )
            record(
                result,
                benchmark=evaluation.records[0]["benchmark"],
                model=evaluation.records[0]["model"],
                kappa_params={},
                seed=0,
                version="0",
                created="2026-01-01T00:00:00+00:00",
                timings={},
                metric_definitions=definitions,
            )
        best = min(best, time.perf_counter() - start)
    return best


def filled(rec: dict, half: float = 0.01) -> dict:
    """A record holding every registered metric (0.5 where it has none) and an interval ``half`` either side of every
    value that has one (synthetic: for the cost only)."""
    rec = copy.deepcopy(rec)
    parts = {"level": rec["levels"], "id": [rec["id"]], "summary": [rec["summary"]]}
    for metric in registered():
        for part in parts[metric.scope]:
            if part.get(metric.name) is None and metric.scope != "summary":
                part[metric.name] = 0.5
            value = part[metric.name]
            if metric.bounds:
                part.update(zip(metric.bounds, (max(value - half, 0.0), min(value + half, 1.0))))
    rec["intervals"] = {"confidence": 0.95, "methods": {"levels.ood_auroc": "synthetic"}}
    return rec


def site_times(tmp: Path, repeats: int) -> tuple[float, float]:
    """The best site build time of the paper's board before and after."""
    with first_schema():
        add_records(tmp / "before", paper_records(read_paper_table()), create=True)
    add_records(tmp / "after", [filled(r) for r in paper_records(read_paper_table())], create=True)
    best = {"before": float("inf"), "after": float("inf")}
    for i in range(repeats):
        for name in best:
            with first_schema() if name == "before" else nullcontext():
                start = time.perf_counter()
                build_site(current_table(tmp / name), tmp / f"site-{name}-{i}", "v1", board=tmp / name)
                best[name] = min(best[name], time.perf_counter() - start)
    return best["before"], best["after"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="Repeats of each timing; the best is kept.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        evaluation = submit(CNN, benchmark="glyphs", kappas=KAPPAS, out=Path(tmp) / "run", progress=False, cache=False)
        wall = time.perf_counter() - start
        after, before = [], []
        for _ in range(args.repeats):  # interleaved
            after.append(records_time(evaluation, 1))
            with first_schema():
                before.append(records_time(evaluation, 1))
        cost = min(after) - min(before)
        print(f"glyph submit ({len(KAPPAS)} kappas, {NUM_LEVELS} levels): {wall:.2f} s wall")
        print(
            f"records from the scores: {min(before) * 1e3:.1f} ms with the first schema's metrics, "
            f"{min(after) * 1e3:.1f} ms with every metric and interval: +{cost * 1e3:.1f} ms, "
            f"{100 * cost / wall:.2f}% of the run's wall time (budget 5%)"
        )
        plain, full = site_times(Path(tmp), args.repeats)
        print(
            f"site of the paper's 1,848 entries: {plain:.2f} s with the first schema's metrics, {full:.2f} s with "
            f"every metric and interval: {100 * (full - plain) / plain:+.1f}% (budget +10%)"
        )


if __name__ == "__main__":
    main()
