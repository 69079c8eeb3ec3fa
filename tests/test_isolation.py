"""A stranger's submission file runs in a child process: no network, no secrets, no reach into the harness, and
a hang, a crash or a memory grab ends in one line naming the shard."""

import socket
import subprocess
import sys
import threading

import pytest

from glyph_fixtures import cnn_variant
from harness import HarnessError, evaluate
from harness.isolation import Limits

STABLE = ("created", "timings")


def run_cli(*args, env=None):
    return subprocess.run([sys.executable, "-c", "from harness.cli import main; main()", *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=300)


def same_results(a: dict, b: dict) -> bool:
    return {k: v for k, v in a.items() if k not in STABLE} == {k: v for k, v in b.items() if k not in STABLE}


@pytest.fixture(scope="module")
def honest(tiny_glyphs, tmp_path_factory):
    path = cnn_variant(tmp_path_factory.mktemp("honest") / "honest.py", "build_model = cnn.build_model\nNAME = 'glyph_cnn'\n")
    return evaluate(path, benchmark=tiny_glyphs, kappas=["softmax", "energy"], progress=False).records


def test_the_record_names_the_guards(honest):
    isolation = honest[0]["timings"]["isolation"]
    assert isolation["mode"] == "child process" and isolation["environment"] == "scrubbed"
    assert isolation["network"] in ("network namespace", "user and network namespace")  # root here: the OS guard
    assert isolation["filesystem"] == "read-only except its home"
    assert isolation["batch_timeout_s"] == 600 and isolation["memory_limit_bytes"] > 2**30


def test_a_submission_cannot_patch_the_harness(tiny_glyphs, tmp_path, honest):
    cheat = cnn_variant(tmp_path / "cheat.py", """
NAME = 'glyph_cnn'

def build_model():
    import harness.method.evaluation as evaluation, harness.method.metrics as metrics, harness.outputs as outputs
    metrics.auroc = lambda *a, **k: 0.999
    evaluation.level_metrics = lambda *a, **k: dict(ood_auroc=0.999, fpr_at_95_tpr=0.0, aupr_in=1.0, aupr_out=1.0, ood_avg_conf=0.0)
    outputs.record = lambda *a, **k: {}
    return cnn.build_model()
""")
    records = evaluate(cheat, benchmark=tiny_glyphs, kappas=["softmax", "energy"], progress=False).records
    assert [r["model"]["file_sha256"] for r in records] != [r["model"]["file_sha256"] for r in honest]
    for ours, theirs in zip(records, honest):  # the same numbers as the honest run, whatever the file patched
        assert ours["levels"] == theirs["levels"] and ours["id"] == theirs["id"]
        assert ours["model"]["weights_sha256"] == theirs["model"]["weights_sha256"]


def test_no_network_and_no_secrets(tiny_glyphs, tmp_path, monkeypatch):
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    accepted = []
    threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True).start()
    monkeypatch.setenv("HF_TOKEN", "hf_planted_secret")
    monkeypatch.setenv("COOD_PLANTED_SECRET", "s3cret")
    spy = cnn_variant(tmp_path / "spy.py", f"""
import os, socket

def _try_network():
    try:
        socket.create_connection(("127.0.0.1", {port}), timeout=5).sendall(os.environ.get("HF_TOKEN", "none").encode())
        return "sent"
    except OSError:
        return "blocked"

NAME = "spy_" + _try_network() + "_" + os.environ.get("HF_TOKEN", "no-token") + "_" + os.environ.get("COOD_PLANTED_SECRET", "no-secret")
build_model = cnn.build_model
""")
    records = evaluate(spy, benchmark=tiny_glyphs, kappas=["softmax"], progress=False).records
    assert records[0]["model"]["name"] == "spy_blocked_no-token_no-secret"
    server.close()
    assert accepted == []


def test_the_file_systems_are_read_only(tiny_glyphs, tmp_path):
    planted = tmp_path / "planted.txt"
    planted.write_text("the harness's")
    vandal = cnn_variant(tmp_path / "vandal.py", f"""
import os, pathlib

def _try_write(path):
    try:
        pathlib.Path(path).write_text("the submitter's")
        return "written"
    except OSError:
        return "refused"

NAME = "_".join(_try_write(p) for p in ({str(planted)!r}, {str(tmp_path / "new.txt")!r}, os.environ["HOME"] + "/scratch"))
build_model = cnn.build_model
""")
    records = evaluate(vandal, benchmark=tiny_glyphs, kappas=["softmax"], progress=False).records
    assert records[0]["model"]["name"] == "refused_refused_written"  # only its own home is writable
    assert planted.read_text() == "the harness's" and not (tmp_path / "new.txt").exists()
    assert not list(tmp_path.glob("__pycache__"))


def test_a_trusted_file_runs_in_process(tiny_glyphs, tmp_path, monkeypatch):
    monkeypatch.setenv("COOD_PLANTED_SECRET", "s3cret")
    trusted = cnn_variant(tmp_path / "trusted.py", "import os\nNAME = 'seen_' + os.environ.get('COOD_PLANTED_SECRET', 'none')\n"
                                                    "build_model = cnn.build_model\n")
    records = evaluate(trusted, benchmark=tiny_glyphs, kappas=["softmax"], progress=False, trust_submission=True).records
    assert records[0]["model"]["name"] == "seen_s3cret" and records[0]["timings"]["isolation"] == {"mode": "in-process"}


FAULTS = {
    "hang": ("import time\nclass M(cnn.GlyphCNN):\n    def forward(self, x):\n        if len(x) > 1:\n            time.sleep(600)\n"
             "        return super().forward(x)\n", ["--timeout", "3"], r"error: shard id/test/000000\.tar: the submission did not answer within 3 s \(see --timeout and --run-timeout\)"),
    "crash": ("import os\nclass M(cnn.GlyphCNN):\n    def forward(self, x):\n        if len(x) > 1:\n            os._exit(7)\n"
              "        return super().forward(x)\n", [], r"error: shard id/test/000000\.tar: the submission's process died \(exit code 7\)"),
    "segfault": ("import ctypes\nclass M(cnn.GlyphCNN):\n    def forward(self, x):\n        if len(x) > 1:\n            ctypes.string_at(0)\n"
                 "        return super().forward(x)\n", [], r"error: shard id/test/000000\.tar: the submission's process died \(signal SIGSEGV\)"),
    "memory": ("import numpy as np\nclass M(cnn.GlyphCNN):\n    def forward(self, x):\n        if len(x) > 1:\n"
               "            np.ones(2**34, dtype=np.uint8)\n        return super().forward(x)\n", ["--memory-limit", "4"],
               r"error: shard id/test/000000\.tar: (kappa|the model's forward pass failed|the submission ran out of memory).*"),
    "raises": ("class M(cnn.GlyphCNN):\n    def forward(self, x):\n        if len(x) > 1:\n            raise ValueError('only on real batches')\n"
               "        return super().forward(x)\n", [],
               r"error: shard id/test/000000\.tar: the model's forward pass failed: ValueError: only on real batches"),
    "dict_output": ("class M(cnn.GlyphCNN):\n    def forward(self, x):\n        return {'logits': super().forward(x)}\n", [],
                    r"error: .*the model returned a dict; it must return a logits tensor or a tuple \(logits, features\)"),
    "kappa_raises": ("KAPPAS = {'boom': lambda logits: 1 / 0}\nclass M(cnn.GlyphCNN):\n    pass\n", ["-k", "boom"],
                     r"error: shard id/test/000000\.tar: kappa 'boom' failed: ZeroDivisionError: division by zero"),
    "custom_transform": ("def transform():\n    return lambda image: image\nclass M(cnn.GlyphCNN):\n    pass\n", [],
                         r"error: submission .* defines transform\(\), which would run outside the sandbox.*"),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_misbehaving_submission_is_one_line(tiny_glyphs, tmp_path, fault):
    body, options, message = FAULTS[fault]
    path = cnn_variant(tmp_path / f"{fault}.py", body + "def build_model():\n    return variant(M)\n")
    done = run_cli("submit", path, "--benchmark", tiny_glyphs, "--out", tmp_path / "out", "--no-progress", "--no-cache",
                   "--workers", "0", *options)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.splitlines()) == 1 and __import__("re").fullmatch(message, done.stderr.strip()), done.stderr
    assert not (tmp_path / "out").exists()


def test_limits_must_be_positive():
    with pytest.raises(HarnessError, match="must be positive"):
        Limits(batch_timeout_s=0)
