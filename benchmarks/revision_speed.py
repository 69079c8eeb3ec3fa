"""The harness end to end at two revisions of the project, side by side in one run (figures, not a test).

Each revision is checked out into a temporary git worktree and runs ``cood-harness submit examples/glyph_cnn.py``
on the embedded glyph benchmark (no score cache, outputs to a temporary folder) with the same Python environment and
each revision's own defaults; the runs alternate, and the best of ``--repeats`` (3) per revision is kept. Throughput
is the evaluation splits' images over the splits' own seconds, as each run's record reports them.

    python benchmarks/revision_speed.py HEAD~1 HEAD [--repeats 3] [-- extra submit options]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPLITS = ("id_test", "ood_estimation", "ood_test")


def worktree(revision: str, folder: Path) -> Path:
    path = folder / revision.replace("/", "_").replace("~", "_")
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(path), revision], check=True)
    return path


def run(tree: Path, out: Path, extra: list[str]) -> float:
    """Images per second over the evaluation splits of one submit at ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "submit",
            "examples/glyph_cnn.py",
            "--no-cache",
            "--out",
            str(out),
            "--no-progress",
            *extra,
        ],
        cwd=tree,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    records = (json.loads(path.read_text()) for path in out.rglob("*.json"))
    timings = next(record["timings"] for record in records if isinstance(record, dict) and "timings" in record)
    return sum(timings[f"{s}_images"] for s in SPLITS) / sum(timings[f"{s}_s"] for s in SPLITS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("extra", nargs="*", help="options for both submits, after --")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cood-revisions-") as folder:
        folder = Path(folder)
        trees = {rev: worktree(rev, folder) for rev in (args.before, args.after)}
        try:
            best = {rev: 0.0 for rev in trees}
            for repeat in range(args.repeats):
                for rev, tree in trees.items():
                    best[rev] = max(best[rev], run(tree, folder / f"out-{len(best)}-{repeat}-{tree.name}", args.extra))
        finally:
            for tree in trees.values():
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
    for rev in trees:
        commit = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", rev], capture_output=True, text=True
        ).stdout.strip()
        print(f"{rev:>12s} ({commit}): {best[rev]:8.0f} img/s over the evaluation splits, best of {args.repeats}")
    print(f"after / before: {best[args.after] / best[args.before]:.2f} x")
    print(
        json.dumps(
            {
                "before": args.before,
                "after": args.after,
                "before_img_s": best[args.before],
                "after_img_s": best[args.after],
            }
        )
    )


if __name__ == "__main__":
    main()
