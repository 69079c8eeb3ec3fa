"""What the metrics added after the first record schema cost, side by side in one run (figures, not a test).

"Before" is the registry as records of schema version 1 knew it (ood-auroc, fpr@95, aupr-in/out, the average
confidences, id-acc, id-auroc, the mean), with no interval; "after" is every registered metric (fpr@99, the selective
and calibration ID metrics) with the 95% intervals.

1. A glyph ``submit`` (the embedded benchmark, the example CNN, 4 kappas, on the CPU): its wall time, and the time of
   computing its records from the run's per-sample scores (levels, metrics and the records themselves) before and
   after; the difference is their share of the run's wall time (budget: at most 5%).
2. The leaderboard site of the paper's 1,821 entries, each given every registered metric and interval as a board of
   the harness's records holds them (synthetic values where the paper gives none: only their cost is measured, the
   columns, the error bars and the marks), before and after; budget: at most +10%.

3. The site of the paper's board as published, built by the code of ``--before`` (default: the revision before the
   metric registry) and by this tree, each in its own process: what a board's build costs now against then.

Runs are interleaved and the best of ``--repeats`` kept.

    python benchmarks/metric_cost.py [--repeats 5] [--before REV]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import os
import subprocess
import sys
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

ROOT = Path(__file__).resolve().parents[1]
CNN = ROOT / "examples" / "glyph_cnn.py"
BEFORE = "a5e9f86"  # the revision before the metric registry
PAPER_SITE = """
import sys, tempfile, time
from pathlib import Path
from leaderboard.paper import paper_records, read_paper_table
from leaderboard.site import build_site
from leaderboard.store import add_records, current_table

def every_value(rec):  # the revision's own metrics, none left null (as a board of harness records)
    for part in [*rec["levels"], rec["id"]]:
        part.update({k: 50 if k.startswith("num") else 0.5 for k, v in part.items() if v is None})
    return rec

sys.path.insert(0, "benchmarks")
try:
    from metric_cost import filled  # this tree's: every metric and interval
except ImportError:
    filled = every_value
tmp = Path(tempfile.mkdtemp())
records = paper_records(read_paper_table())
add_records(tmp / "b", [filled(r) for r in records] if sys.argv[2] == "filled" else records, create=True)
table, best = current_table(tmp / "b"), float("inf")
for i in range(int(sys.argv[1])):
    start = time.perf_counter()
    build_site(table, tmp / f"s{i}", "v1", board=tmp / "b")
    best = min(best, time.perf_counter() - start)
print(best)
"""
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
                probability=kappa == "softmax",
                seed=0,
                version="0",
                created="2026-01-01T00:00:00+00:00",
                timings={},
                metric_definitions=definitions,
            )
        best = min(best, time.perf_counter() - start)
    return best


def filled(rec: dict, half: float = 0.01) -> dict:
    """A record holding every registered metric (0.5 where the paper gives none) and an interval ``half`` either side
    of every value that has one (synthetic: for the cost only, as a board of the harness's records holds them all)."""
    rec = copy.deepcopy(rec)
    parts = {"level": rec["levels"], "id": [rec["id"]], "summary": [rec["summary"]]}
    for metric in registered():
        for part in parts[metric.scope]:
            if part.get(metric.name) is None and metric.scope != "summary":
                part[metric.name] = 0.5
            value = part[metric.name]
            if metric.bounds:
                part.update(zip(metric.bounds, (max(value - half, 0.0), min(value + half, 1.0))))
    if any(metric.bounds for metric in registered()):
        rec["intervals"] = {"confidence": 0.95, "methods": {"levels.ood_auroc": "synthetic"}}
    return rec


def site_times(tmp: Path, repeats: int) -> tuple[float, float]:
    """The best site build time of the paper's board before and after."""
    with first_schema():
        add_records(tmp / "before", [filled(r) for r in paper_records(read_paper_table())], create=True)
    add_records(tmp / "after", [filled(r) for r in paper_records(read_paper_table())], create=True)
    best = {"before": float("inf"), "after": float("inf")}
    for i in range(repeats):
        for name in best:
            with first_schema() if name == "before" else nullcontext():
                start = time.perf_counter()
                build_site(current_table(tmp / name), tmp / f"site-{name}-{i}", "v1", board=tmp / name)
                best[name] = min(best[name], time.perf_counter() - start)
    return best["before"], best["after"]


def paper_site_time(tree: Path, repeats: int, board: str) -> float:
    """The best build time of the paper's board's site by the code in ``tree``, in a process of its own; ``board``:
    ``published`` (the paper's numbers) or ``filled`` (every metric the code knows given a value, as in a board of
    the harness's records, and this tree's intervals)."""
    done = subprocess.run(
        [sys.executable, "-c", PAPER_SITE, str(repeats), board],
        env={**os.environ, "PYTHONPATH": str(tree)},
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout.split()[-1])


def site_then_and_now(tmp: Path, revision: str, repeats: int) -> dict[tuple[str, str], float]:
    """The paper's board's site, published and filled, built by ``revision``'s code and by this tree's (alternating,
    best of ``repeats``), by (code, board)."""
    then = tmp / "then"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(then), revision], check=True)
    try:
        times = {}
        for _ in range(repeats):
            for board in ("published", "filled"):
                for code, tree in (("then", then), ("now", ROOT)):
                    best = times.get((code, board), float("inf"))
                    times[code, board] = min(best, paper_site_time(tree, 1, board))
        return times
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(then)], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="Repeats of each timing; the best is kept.")
    parser.add_argument("--before", default=BEFORE, help="The revision whose site build is compared (%(default)s).")
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
            f"site of the paper's 1,821 entries: {plain:.2f} s with the first schema's metrics, {full:.2f} s with "
            f"every metric and interval: {100 * (full - plain) / plain:+.1f}% (budget +10%)"
        )
        times = site_then_and_now(Path(tmp), args.before, args.repeats)
        for board in ("published", "filled"):
            then, now = times["then", board], times["now", board]
            print(
                f"site of the paper's board, {board}: {then:.2f} s by {args.before}, {now:.2f} s by this tree: "
                f"{100 * (now - then) / then:+.1f}% (budget +10%)"
            )


if __name__ == "__main__":
    main()
