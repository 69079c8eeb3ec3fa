"""The same outputs, byte for byte, for the README's quick start before and after a change.

    python benchmarks/same_records.py                    # against the merge base of HEAD with main
    python benchmarks/same_records.py --before 6f0bbba   # against any commit, branch or tag
    python benchmarks/same_records.py --before HEAD --order-seed 5 --one-build   # a rerun: one order, one private draw
    python benchmarks/same_records.py --library      # a timm: library target read offline from a local Hub cache

Checks out the ``--before`` ref in a temporary git worktree, runs the quick start (``cood-harness submit
examples/glyph_cnn.py``, the embedded ``glyphs`` benchmark) from that tree and from this one, one after the other, each
with this interpreter, ``PYTHONPATH`` set to its tree, and its own fresh output folder (``--out``), score cache
(``--cache-dir``) and benchmark cache (``COOD_BENCH_CACHE``, so each builds the benchmark itself), then compares every
output file byte for byte: one line per file, then a summary. Exit status 1 when a file differs or is in one run only.
With ``--library`` the target is a random-init timm model for the glyph benchmark, committed to the project's local
Hub test server (``tests/hub_server.py``), fetched into a Hugging Face cache, then read by both runs with
``HF_HUB_OFFLINE=1``.

In the records, the fields that can never match between two runs are masked, and only those (:data:`MASKED`): the
creation time, the durations and the sandbox's measured start-up in its memory limit. A record is compared as its
text with those values replaced, after checking that the text is the canonical serialisation of its JSON (so nothing
else is hidden by the masking).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUICK_START = ["submit", "examples/glyph_cnn.py"]  # README, "Quick start"
LIBRARY_REPO = "cood-bench/glyph-efficientnet"
MASKED = {
    "created": "the time the run started",
    "timings.*_s": "durations in seconds (total, per split, first batch)",
    "timings.isolation.limits.memory": "its number after 'start-up + ', the budget less the measured start-up",
}
MASK = "<masked>"
START_UP = re.compile(r"(start-up \+ )\d+")  # the address-space limit: the sandbox's start-up, measured, plus the rest


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def library_target() -> list[str]:
    """The ``submit`` arguments of a timm target whose weights sit in a local Hugging Face cache, read offline: the
    local Hub is started (pointing this process's Hugging Face environment at it), given the model and stopped."""
    sys.path.insert(0, str(ROOT / "tests"))
    import hub_server

    server = hub_server.start_for_session()
    import timm
    import torch
    from huggingface_hub import HfApi, snapshot_download
    from timm.models import save_for_hf

    sys.path.insert(0, str(ROOT))
    from dataset_builder.embedded import embedded_settings

    torch.manual_seed(0)
    classes = embedded_settings("glyphs").NUM_ID_CLASSES
    model = timm.create_model("test_efficientnet", num_classes=classes, in_chans=1).eval()
    data = {"input_size": (1, 32, 32), "mean": (0.5,), "std": (0.5,), "crop_pct": 1.0, "interpolation": "bilinear"}
    with tempfile.TemporaryDirectory() as folder:
        save_for_hf(model, folder, safe_serialization=True, data_config=data)
        api = HfApi(endpoint=server.url)
        api.create_repo(LIBRARY_REPO)
        api.upload_folder(repo_id=LIBRARY_REPO, folder_path=folder)
    snapshot_download(LIBRARY_REPO)
    server.stop()
    os.environ["HF_HUB_OFFLINE"] = "1"
    return ["submit", f"timm:hf-hub:{LIBRARY_REPO}"]


def run_quick_start(
    tree: Path, work: Path, extra: tuple[str, ...] = (), benchmarks: Path | None = None, submit: list[str] = QUICK_START
) -> Path:
    """Run the quick start (or another ``submit`` command) with ``tree``'s code and ``extra`` options into fresh
    folders under ``work`` (the benchmark built there too, unless a ``benchmarks`` cache folder is given); return the
    output folder."""
    work.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(tree), "COOD_BENCH_CACHE": str(benchmarks or work / "cache")}
    found = subprocess.run(
        [sys.executable, "-c", "import harness; print(harness.__file__)"],
        cwd=tree,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not Path(found).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"the harness imports from {found}, not from {tree}")
    out, log = work / "out", work / "run.log"
    command = [
        sys.executable,
        "-c",
        "from harness.cli import main; main()",
        *submit,
        *extra,
        "--out",
        str(out),
        "--cache-dir",
        str(work / "scores"),
    ]
    started = time.perf_counter()
    with log.open("w") as stream:
        done = subprocess.run(command, cwd=tree, env=env, stdout=stream, stderr=subprocess.STDOUT)
    print(f"ran the quick start from {tree} in {time.perf_counter() - started:.0f} s (log: {log})", flush=True)
    if done.returncode != 0:
        raise SystemExit(
            f"the quick start failed (exit {done.returncode}); the last lines of {log}:\n"
            + "\n".join(log.read_text().splitlines()[-15:])
        )
    return out


def masked(record: dict) -> dict:
    """``record`` with the :data:`MASKED` values replaced."""
    timings = {key: MASK if key.endswith("_s") else value for key, value in record["timings"].items()}
    limits = timings.get("isolation", {}).get("limits", {})
    if isinstance(limits.get("memory"), str):
        limits = {**limits, "memory": START_UP.sub(rf"\g<1>{MASK}", limits["memory"])}
        timings["isolation"] = {**timings["isolation"], "limits": limits}
    return {**record, "created": MASK, "timings": timings}


def canonical(record: dict) -> str:
    """A record's text as the harness writes it."""
    return json.dumps(record, indent=1, sort_keys=True) + "\n"


def differing(old, new, at: str = "") -> list[str]:
    """The dotted paths at which two JSON values differ."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [
            path
            for key in sorted(old.keys() | new.keys())
            for path in differing(old.get(key), new.get(key), f"{at}.{key}".lstrip("."))
        ]
    return [] if old == new else [at]


def compare(before: Path, after: Path, name: str) -> str:
    """``same``, ``differs`` or ``only in before/after`` for one output file."""
    if not (before / name).is_file() or not (after / name).is_file():
        return f"only in {'before' if (before / name).is_file() else 'after'}"
    old, new = (before / name).read_bytes(), (after / name).read_bytes()
    if name.startswith("records/") and name.endswith(".json") and old != new:
        records = [json.loads(old), json.loads(new)]
        if [canonical(r).encode() for r in records] != [old, new]:
            return "differs (not in the canonical form, so not masked)"
        old, new = (canonical(masked(r)).encode() for r in records)
        if old != new:
            return "differs  at " + ", ".join(differing(*(masked(r) for r in records)))
    return "same" if old == new else "differs"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", help="the git ref to compare against (default: the merge base of HEAD with main)")
    parser.add_argument("--keep", type=Path, help="keep both runs' folders here (default: a temporary folder, removed)")
    parser.add_argument(
        "--order-seed", type=int, help="give both runs this order seed (both trees must know --order-seed)"
    )
    parser.add_argument("--library", action="store_true", help="run a timm: target from a local Hub cache instead")
    parser.add_argument(
        "--one-build",
        action="store_true",
        help="both runs read the benchmark the first builds (one private draw) instead of each building its own",
    )
    args = parser.parse_args()
    submit = library_target() if args.library else QUICK_START
    ref = args.before or git("merge-base", "HEAD", "main")
    commit = git("rev-parse", "--verify", f"{ref}^{{commit}}")
    work = Path(tempfile.mkdtemp(prefix="same-records-")) if args.keep is None else args.keep
    tree = work / "before-tree"
    git("worktree", "add", "--detach", str(tree), commit)
    try:
        print(f"before: {ref} ({commit[:12]}); after: the working tree {ROOT}", flush=True)
        extra = () if args.order_seed is None else ("--order-seed", str(args.order_seed))
        shared = work / "benchmarks" if args.one_build else None
        outs = [
            run_quick_start(code, work / name, extra, shared, submit)
            for code, name in ((tree, "before"), (ROOT, "after"))
        ]
        names = sorted({p.relative_to(out).as_posix() for out in outs for p in out.rglob("*") if p.is_file()})
        results = {name: compare(*outs, name) for name in names}
    finally:
        git("worktree", "remove", "--force", str(tree))
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    for name, result in results.items():
        kind, _, where = result.partition("  at ")
        print(f"{kind:<8} {name}" + (f" (at {where})" if where else ""))
    differ = sum(result != "same" for result in results.values())
    print(
        f"{len(results)} files: {len(results) - differ} the same, {differ} not; masked in the records: "
        + "; ".join(f"{key} ({why})" for key, why in MASKED.items())
    )
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
