"""What the sandbox tests share besides fixtures: hostile variants of the example CNN (its model, with an attack run
when the file is imported or the model built), a sandboxed run, the command line in a subprocess, the comparison with
the honest run, and a look for processes left behind."""

import os
import subprocess
import sys
import time
from pathlib import Path

from glyph_fixtures import cnn_variant
from harness import evaluate

KAPPAS = ["softmax", "energy"]
MIXED = r"shard \S+\.tar \(and \d+ more shards in its batch\): "  # a failing batch, of rows of many shards
ORDER_SEED = 1  # one secret order for the honest and the hostile runs: the same batches, so the same bytes
NOT_COMPARED = ("created", "timings", "order_seed")
USERS = {"root": (), "user_namespace": ("unshare", "-r")}  # the harness as root, and as root of a user namespace
QUICK = ("--quiet", "--no-cache", "--workers", "0")  # a run with nothing printed or kept, its images read in one thread


def hostile(folder: Path, attack: str, name: str = "'glyph_cnn'") -> Path:
    """A submission file that runs ``attack`` (Python source) when imported, then names itself ``name`` (an
    expression over what the attack left) and builds the honest model."""
    return cnn_variant(folder / "hostile.py", f"{attack}\nNAME = {name}\nbuild_model = cnn.build_model\n")


def run(path: Path, benchmark: Path, **options) -> list[dict]:
    return evaluate(
        path, benchmark=benchmark, kappas=KAPPAS, progress=False, **{"order_seed": ORDER_SEED, **options}
    ).records


def run_cli(*args, wrap=(), **options) -> subprocess.CompletedProcess:
    """``cood-harness ARGS`` in a subprocess (under ``wrap``, such as ``unshare -r``), its output captured as text
    unless ``text=False``."""
    return subprocess.run(
        [*wrap, sys.executable, "-c", "from harness.cli import main; main()", *map(str, args)],
        capture_output=True,
        timeout=300,
        **{"text": True, **options},
    )


def same_scores(records: list[dict], honest: list[dict]) -> bool:
    """The same levels, ID metrics and summaries as the honest run, kappa by kappa (the name aside)."""

    def kept(record):
        return {k: v for k, v in record.items() if k not in (*NOT_COMPARED, "model")}

    return [kept(r) for r in records] == [kept(r) for r in honest] and [
        r["model"]["weights_sha256"] for r in records
    ] == [r["model"]["weights_sha256"] for r in honest]


def processes_with(marker: str, wait_s: float = 3.0) -> list[int]:
    """Host processes whose command line holds ``marker`` (waiting a little for a dying namespace to go)."""
    deadline = time.monotonic() + wait_s
    while True:
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and int(entry.name) != os.getpid():
                try:
                    if marker.encode() in (entry / "cmdline").read_bytes():
                        found.append(int(entry.name))
                except OSError:
                    continue
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)
