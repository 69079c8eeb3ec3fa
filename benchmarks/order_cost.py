"""What the secret order and the re-check cost: the README's quick start (sandboxed, the embedded glyph benchmark) run
with the code of ``--before`` (split by split, in manifest order) and with this tree (one pass in a secret order, then
the re-check), one after the other, ``--repeats`` times, each with a fresh score cache; the benchmark is built once,
shared. Prints the passes' seconds of each run side by side and the ratio of the medians, and checks that the levels
hold the same classes in both and that every ood-auroc (per level, and their mean) agrees within 1e-6.

    python benchmarks/order_cost.py --before <commit before the secret order> --repeats 3
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
from pathlib import Path

import pandas as pd
from same_records import ROOT, git, run_quick_start


def passes_s(out: Path) -> tuple[float, float]:
    """The seconds of a run's evaluation passes (the three splits before, the one pass and its re-check now), and of
    its re-check alone (0 before)."""
    timings = json.loads(next((out / "records").glob("*.json")).read_text())["timings"]
    if "evaluation_s" in timings:
        return timings["evaluation_s"], timings.get("recheck_s", 0.0)
    return sum(timings[f"{split}_s"] for split in ("id_test", "ood_estimation", "ood_test")), 0.0


def agreement(before: Path, after: Path) -> tuple[bool, float]:
    """Whether every level of every kappa holds the same classes in both runs, and the largest ood-auroc difference
    (per level, and the mean over levels)."""
    same, largest = True, 0.0
    for path in sorted((before / "records").glob("*.json")):
        old, new = (json.loads((out / "records" / path.name).read_text()) for out in (before, after))
        aurocs = [(a["ood_auroc"], b["ood_auroc"]) for a, b in zip(old["levels"], new["levels"])]
        aurocs.append((old["summary"]["mean_ood_auroc"], new["summary"]["mean_ood_auroc"]))
        largest = max(largest, *(abs(a - b) for a, b in aurocs))
    for path in sorted((before / "levels").glob("*.parquet")):
        classes = [pd.read_parquet(out / "levels" / path.name)[["level", "class_id"]] for out in (before, after)]
        same &= classes[0].sort_values(["level", "class_id"]).values.tolist() == (
            classes[1].sort_values(["level", "class_id"]).values.tolist()
        )
    return same, largest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="a commit whose harness scores split by split")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="order-cost-"))
    tree = work / "before-tree"
    git("worktree", "add", "--detach", str(tree), git("rev-parse", "--verify", f"{args.before}^{{commit}}"))
    runs: dict[str, list[tuple[float, float]]] = {"before": [], "after": []}
    agreements = []
    try:
        for i in range(args.repeats):
            outs = {}
            for name, code in (("before", tree), ("after", ROOT)):
                outs[name] = run_quick_start(code, work / f"{name}-{i}", benchmarks=work / "benchmarks")
                runs[name].append(passes_s(outs[name]))
            agreements.append(agreement(outs["before"], outs["after"]))
    finally:
        git("worktree", "remove", "--force", str(tree))
        shutil.rmtree(work, ignore_errors=True)
    print(f"{'run':>4} {'before: passes s':>17} {'after: pass + re-check s':>25} {'of which re-check s':>20}")
    for i, ((old, _), (new, check)) in enumerate(zip(runs["before"], runs["after"])):
        print(f"{i:>4} {old:>17.1f} {new:>25.1f} {check:>20.2f}")
    old, new = (statistics.median(s for s, _ in runs[name]) for name in ("before", "after"))
    print(f"median: before {old:.1f} s, after {new:.1f} s: {new / old:.2f}x the passes of before")
    print(
        f"levels: the same classes in {sum(same for same, _ in agreements)} of {len(agreements)} pairs; largest "
        f"ood-auroc difference {max(diff for _, diff in agreements):.2g} (allowed 1e-6)"
    )


if __name__ == "__main__":
    main()
