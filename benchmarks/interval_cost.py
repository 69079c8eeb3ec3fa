"""What the 95% intervals cost, side by side in one run (figures, not a test):

1. a glyph ``submit`` (the embedded benchmark, the example CNN, 4 kappas, on the CPU): its wall time, and the time of
   computing its records from the run's per-sample scores (levels, metrics and the records themselves) with the
   intervals and with every metric's interval rule taken out of the registry; the difference is the intervals'
   share of the run's wall time (budget: at most 5%);
2. the leaderboard site of the paper's 1,848 entries, built as they are (no interval: published numbers) and with
   intervals given to every entry (synthetic, 0.01 either side of each value: only their cost is measured, the
   interval columns, the error bars and the marks); budget: at most +10%.

Runs are interleaved and the best of ``--repeats`` kept.

    python benchmarks/interval_cost.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import tempfile
import time
from contextlib import contextmanager
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
def without_intervals():
    """Every metric registered without its interval rule (the records then carry no interval), restored after."""
    metrics = registered()
    for metric in metrics:
        unregister_metric(metric)
    for metric in metrics:
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


def with_intervals(rec: dict, half: float = 0.01) -> dict:
    """A record with an interval ``half`` either side of every value that has one (synthetic: for the cost only)."""
    rec = copy.deepcopy(rec)
    parts = {"level": rec["levels"], "id": [rec["id"]], "summary": [rec["summary"]]}
    for metric in registered():
        for part in parts[metric.scope] if metric.bounds else ():
            value = part.get(metric.name)
            ends = (None, None) if value is None else (max(value - half, 0.0), min(value + half, 1.0))
            part.update(zip(metric.bounds, ends))
    rec["intervals"] = {"confidence": 0.95, "methods": {"levels.ood_auroc": "synthetic"}}
    return rec


def site_times(tmp: Path, repeats: int) -> tuple[float, float]:
    """The best site build time of the paper's board without and with intervals."""
    plain = paper_records(read_paper_table())
    boards = {}
    for name, records in (("plain", plain), ("intervals", [with_intervals(r) for r in plain])):
        add_records(tmp / name, records, create=True)
        boards[name] = (tmp / name, current_table(tmp / name))
    best = {name: float("inf") for name in boards}
    for i in range(repeats):
        for name, (board, table) in boards.items():
            start = time.perf_counter()
            build_site(table, tmp / f"site-{name}-{i}", "v1", board=board)
            best[name] = min(best[name], time.perf_counter() - start)
    return best["plain"], best["intervals"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="Repeats of each timing; the best is kept.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        evaluation = submit(CNN, benchmark="glyphs", kappas=KAPPAS, out=Path(tmp) / "run", progress=False, cache=False)
        wall = time.perf_counter() - start
        with_ci, without = [], []
        for _ in range(args.repeats):  # interleaved
            with_ci.append(records_time(evaluation, 1))
            with without_intervals():
                without.append(records_time(evaluation, 1))
        cost = min(with_ci) - min(without)
        print(f"glyph submit ({len(KAPPAS)} kappas, {NUM_LEVELS} levels): {wall:.2f} s wall")
        print(
            f"records from the scores: {min(without) * 1e3:.1f} ms without intervals, {min(with_ci) * 1e3:.1f} ms "
            f"with: the intervals add {cost * 1e3:.1f} ms, {100 * cost / wall:.2f}% of the run's wall time (budget 5%)"
        )
        plain, intervals = site_times(Path(tmp), args.repeats)
        print(
            f"site of the paper's 1,848 entries: {plain:.2f} s without intervals, {intervals:.2f} s with: "
            f"{100 * (intervals - plain) / plain:+.1f}% (budget +10%)"
        )


if __name__ == "__main__":
    main()
