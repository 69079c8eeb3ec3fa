"""What the sandbox tests share besides fixtures: hostile variants of the example CNN (its model, with an attack run
when the file is imported or the model built), a sandboxed run, the command line in a subprocess, the comparison with
the honest run, and a look for processes left behind."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from glyph_fixtures import cnn_variant
from harness import HarnessError, evaluate

KAPPAS = ["softmax", "energy"]
MIXED = r"shard \S+\.tar \(and \d+ more shards in its batch\): "  # a failing batch, of rows of many shards
ORDER_SEED = 1  # one secret order for the honest and the hostile runs: the same batches, so the same bytes
NOT_COMPARED = ("created", "timings", "order_seed", "order_seed_drawn")
USERS = {"root": (), "user_namespace": ("unshare", "-r")}  # the harness as root, and as root of a user namespace
QUICK = ("--quiet", "--no-cache", "--workers", "0")  # a run with nothing printed or kept, its images read in one thread


BATCH = 16  # the tiny benchmark in many batches
PROBE = """
import harness.runtime.channel as channel
SEEN = []  # the body of every batch message, as the child's end of the channel receives it
_receive = channel.Channel.receive
def receive(self, timeout=None):
    kind, body = _receive(self, timeout)
    if kind == "batch":
        SEEN.append(body)
    return kind, body
channel.Channel.receive = receive
"""


def hostile_file(folder, attack: str, benchmark, name: str = "cheat") -> str:
    """The example CNN's weights behind an attack's forward (``attack``: source defining ``Cheat`` and ``probe``, and
    maybe more ``KAPPAS``), named as the honest model, with the probe kappa; the ID classes' ids are in
    ``id_classes.txt`` beside it."""
    (folder / "id_classes.txt").write_text("\n".join(_id_classes(benchmark)))
    body = (
        PROBE
        + "KAPPAS = {}\n"
        + attack
        + ("KAPPAS['probe'] = probe\nNAME = 'glyph_cnn'\ndef build_model():\n    return variant(Cheat)\n")
    )
    return str(cnn_variant(folder / f"{name}.py", body))


def _id_classes(benchmark) -> list[str]:
    import pandas as pd

    return pd.read_parquet(benchmark / "classes" / "id.parquet")["id"].tolist()


RUN = """
import json, sys
from harness import HarnessError, evaluate
path, benchmark, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
try:
    run = evaluate(path, benchmark=benchmark, progress=False, **options)
except HarnessError as exc:
    print(json.dumps({"error": str(exc)}))
else:
    probe = {split: scores.scores["probe"].tolist() for split, scores in run.scores.items()}
    print(json.dumps({"records": run.records, "probe": probe}))
"""


def user_namespaces() -> bool:
    return bool(shutil.which("unshare")) and subprocess.run(["unshare", "-r", "true"]).returncode == 0


def attacked(path: str, benchmark, where: str, kappas: tuple[str, ...] = (), **options) -> dict:
    """The run's records and the probe's values per split, or its one-line error, as root or as root of a user
    namespace (a subprocess under ``unshare -r``): ``KAPPAS``, ``kappas`` and the probe, in batches of ``BATCH``, in
    the secret order of ``ORDER_SEED`` unless ``options`` say otherwise."""
    options = {"kappas": [*KAPPAS, *kappas, "probe"], "batch_size": BATCH, "order_seed": ORDER_SEED, **options}
    if where == "root":
        try:
            run = evaluate(path, benchmark=benchmark, progress=False, **options)
        except HarnessError as exc:
            return {"error": str(exc)}
        return {"records": run.records, "probe": {s: v.scores["probe"].tolist() for s, v in run.scores.items()}}
    done = subprocess.run(
        ["unshare", "-r", sys.executable, "-c", RUN, path, str(benchmark), json.dumps(options, default=str)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


WHERE = ["root", pytest.param("user namespace", marks=pytest.mark.skipif(not user_namespaces(), reason="no userns"))]


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
