"""Nothing in a batch tells ID from OOD: hostile models that look for sample keys on their end of the channel, for the
splits' order, or at the other images of their batch, run sandboxed as root and as root of a user namespace, and win
nothing. Each proves it ran through ``probe``, a kappa of its own computed in its process: its per-sample values say
what it saw."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from attacks import KAPPAS, ORDER_SEED, same_scores
from glyph_fixtures import cnn_variant
from harness import HarnessError, evaluate

pytestmark = pytest.mark.slow

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
ATTACKS = {
    # the keys (class id, file stem) the batch messages used to carry: certain of the right class for ID, unsure else
    "keys": """
ID = {line.split()[0] for line in open(Path(__file__).with_name("id_classes.txt"))}
class Cheat(cnn.GlyphCNN):
    def forward(self, x):
        logits = super().forward(x)
        keys = SEEN[-1].get("keys") if SEEN else None
        if keys is None or len(keys) != len(x):
            return logits
        certain = torch.tensor([k.split("__")[0] in ID for k in keys])
        return torch.where(certain[:, None], logits * 100, torch.zeros_like(logits))
def probe(logits):  # 1: batches were seen, and none held anything but pixels, a seed and the kappas asked for
    fields = set().union(*(body.keys() for body in SEEN))
    return np.full(len(logits), 1.0 if SEEN and fields == {"images", "seed", "kappas"} else -1.0)
""",
    # the order: id_test used to come first, so every full batch before the first short one was ID
    "order": """
STATE = {"full": 0, "short": False, "batches": 0}
class Cheat(cnn.GlyphCNN):
    def forward(self, x):
        logits = super().forward(x)
        STATE["batches"] += 1
        STATE["short"] |= 0 < len(x) < STATE["full"]
        STATE["full"] = max(STATE["full"], len(x))
        return torch.zeros_like(logits) if STATE["short"] else logits * 100
def probe(logits):
    return np.full(len(logits), float(STATE["batches"]))
""",
    # the batch's context: its mean confidence is high on ID batches, low on OOD ones
    "context": """
STATE = {"batches": 0}
class Cheat(cnn.GlyphCNN):
    def forward(self, x):
        logits = super().forward(x)
        STATE["batches"] += 1
        return logits * 10 * logits.softmax(1).amax(1).mean()
def probe(logits):
    return np.full(len(logits), float(STATE["batches"]))
""",
    # honest in the pass, but answers otherwise once a lone image follows full batches (the old re-check's first)
    "recheck": """
STATE = {"full": 0, "rechecked": False, "batches": 0}
class Cheat(cnn.GlyphCNN):
    def forward(self, x):
        logits = super().forward(x)
        STATE["batches"] += 1
        STATE["rechecked"] |= len(x) == 1 and STATE["full"] > 1
        STATE["full"] = max(STATE["full"], len(x))
        return logits * 2 if STATE["rechecked"] else logits
def probe(logits):  # 1 in a process that has answered a batch (a count would differ between the pass and re-check)
    return np.full(len(logits), float(STATE["batches"] > 0))
""",
    # honest in the first batches of a process (as long as a re-check lasts), then sure of everything
    "late": """
STATE = {"batches": 0}
class Cheat(cnn.GlyphCNN):
    def forward(self, x):
        logits = super().forward(x)
        STATE["batches"] += 1
        return logits * 10 if STATE["batches"] > 16 else logits
def probe(logits):
    return np.full(len(logits), float(STATE["batches"] > 0))
""",
    # the batch's context, and every image it has seen answered again from memory: a re-check in its own process passes
    "memory": """
import hashlib
MEMORY = {}
class Cheat(cnn.GlyphCNN):
    def forward(self, x):
        logits = super().forward(x) * 10 * super().forward(x).softmax(1).amax(1).mean()
        keys = [hashlib.sha256(image.numpy().tobytes()).hexdigest() for image in x]
        return torch.stack([MEMORY.setdefault(key, row) for key, row in zip(keys, logits)])
def probe(logits):
    return np.full(len(logits), float(len(MEMORY)))
""",
}


def hostile_file(folder, attack: str, benchmark) -> str:
    """The example CNN's weights behind an attack's forward, named as the honest model, with the probe kappa."""
    (folder / "id_classes.txt").write_text("\n".join(_id_classes(benchmark)))
    body = (
        PROBE
        + ATTACKS[attack]
        + ("KAPPAS = {'probe': probe}\nNAME = 'glyph_cnn'\ndef build_model():\n    return variant(Cheat)\n")
    )
    return str(cnn_variant(folder / f"{attack}.py", body))


def _id_classes(benchmark) -> list[str]:
    import pandas as pd

    return pd.read_parquet(benchmark / "classes" / "id.parquet")["id"].tolist()


RUN = """
import json, sys
from harness import HarnessError, evaluate
path, benchmark, kappas, batch, seed = sys.argv[1:6]
kappas, batch, seed = kappas.split(","), int(batch), int(seed)
try:
    run = evaluate(path, benchmark=benchmark, kappas=kappas, batch_size=batch, order_seed=seed, progress=False)
except HarnessError as exc:
    print(json.dumps({"error": str(exc)}))
else:
    probe = {split: scores.scores["probe"].tolist() for split, scores in run.scores.items()}
    print(json.dumps({"records": run.records, "probe": probe}))
"""


def user_namespaces() -> bool:
    return bool(shutil.which("unshare")) and subprocess.run(["unshare", "-r", "true"]).returncode == 0


def attacked(path: str, benchmark, where: str) -> dict:
    """The run's records and the probe's values per split, or its one-line error, as root or as root of a user
    namespace (a subprocess under ``unshare -r``)."""
    kappas = [*KAPPAS, "probe"]
    if where == "root":
        try:
            run = evaluate(
                path, benchmark=benchmark, kappas=kappas, batch_size=BATCH, order_seed=ORDER_SEED, progress=False
            )
        except HarnessError as exc:
            return {"error": str(exc)}
        return {"records": run.records, "probe": {s: v.scores["probe"].tolist() for s, v in run.scores.items()}}
    args = [path, str(benchmark), ",".join(kappas), str(BATCH), str(ORDER_SEED)]
    done = subprocess.run(
        ["unshare", "-r", sys.executable, "-c", RUN, *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def honest_in_batches(tiny_glyphs, tmp_path_factory):
    path = cnn_variant(tmp_path_factory.mktemp("honest") / "honest.py", "build_model = cnn.build_model\n")
    return evaluate(
        path, benchmark=tiny_glyphs, kappas=KAPPAS, batch_size=BATCH, order_seed=ORDER_SEED, progress=False
    ).records


WHERE = ["root", pytest.param("user namespace", marks=pytest.mark.skipif(not user_namespaces(), reason="no userns"))]


@pytest.mark.parametrize("where", WHERE)
def test_a_model_that_reads_keys_finds_none_and_wins_nothing(tiny_glyphs, tmp_path, honest_in_batches, where):
    run = attacked(hostile_file(tmp_path, "keys", tiny_glyphs), tiny_glyphs, where)
    probed = np.concatenate([np.asarray(v) for v in run["probe"].values()])
    assert probed.size and np.all(probed == 1.0)  # it read every batch message: pixels, a seed, the kappas
    records = [r for r in run["records"] if r["kappa"]["name"] != "probe"]
    assert same_scores(records, honest_in_batches)


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("attack", ["order", "context", "memory", "late"])
def test_a_model_whose_answers_depend_on_more_than_its_image_fails_the_re_check(
    tiny_glyphs, tmp_path, honest_in_batches, attack, where
):
    run = attacked(hostile_file(tmp_path, attack, tiny_glyphs), tiny_glyphs, where)
    assert "records" not in run, "the attack went unnoticed"
    assert run["error"].startswith("the model answered ") and "asked again" in run["error"], run["error"]
    assert "\n" not in run["error"]
    assert not list(tmp_path.glob("**/records"))  # nothing written


@pytest.mark.parametrize("where", WHERE)
def test_a_model_that_would_answer_the_re_check_otherwise_is_never_asked_it(
    tiny_glyphs, tmp_path, honest_in_batches, where
):
    """The re-check asks the file loaded anew in batches of the pass's size: the cheat's trigger (a lone image after
    full batches) never fires, and the run's records are the honest ones (its probe answered in every batch)."""
    run = attacked(hostile_file(tmp_path, "recheck", tiny_glyphs), tiny_glyphs, where)
    assert "records" in run, run.get("error")
    answered = np.concatenate([np.asarray(v) for v in run["probe"].values()])
    assert answered.size and np.all(answered == 1.0)
    records = [r for r in run["records"] if r["kappa"]["name"] != "probe"]
    assert same_scores(records, honest_in_batches)
    assert {r["timings"]["recheck_process"] for r in records} == {"a fresh sandbox"}
