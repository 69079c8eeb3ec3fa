"""A stranger's submission file that misbehaves: a hang, a crash, a memory grab or a failing pass ends in one line
naming the shard, and nothing is written; where no sandbox can be had, a file is refused in one line."""

import os
import re
import tempfile
import time
from pathlib import Path

import pytest

from attacks import MIXED, QUICK, USERS, run_cli
from glyph_fixtures import cnn_variant
from harness import HarnessError, evaluate
from harness.runtime import sandbox
from harness.runtime.isolation import Limits

pytestmark = pytest.mark.slow  # real runs: the quick loop (-m 'not slow') leaves them to CI


def test_a_submission_cannot_patch_the_harness(tiny_glyphs, tmp_path, honest):
    cheat = cnn_variant(
        tmp_path / "cheat.py",
        """
NAME = 'glyph_cnn'

def build_model():
    import harness.method.evaluation as evaluation, harness.method.metrics as metrics, harness.outputs as outputs
    metrics.auroc = lambda *a, **k: 0.999
    evaluation.level_metrics = lambda *a, **k: dict(ood_auroc=0.999, fpr_at_95_tpr=0.0, aupr_in=1.0, \
aupr_out=1.0, ood_avg_conf=0.0)
    outputs.record = lambda *a, **k: {}
    return cnn.build_model()
""",
    )
    records = evaluate(cheat, benchmark=tiny_glyphs, kappas=["softmax", "energy"], progress=False).records
    assert [r["model"]["file_sha256"] for r in records] != [r["model"]["file_sha256"] for r in honest]
    for ours, theirs in zip(records, honest):  # the same numbers as the honest run, whatever the file patched
        assert ours["levels"] == theirs["levels"] and ours["id"] == theirs["id"]
        assert ours["model"]["weights_sha256"] == theirs["model"]["weights_sha256"]


def test_a_trusted_file_runs_in_process(tiny_glyphs, tmp_path, monkeypatch):
    monkeypatch.setenv("COOD_PLANTED_SECRET", "s3cret")
    trusted = cnn_variant(
        tmp_path / "trusted.py",
        "import os\nNAME = 'seen_' + os.environ.get('COOD_PLANTED_SECRET', 'none')\nbuild_model = cnn.build_model\n",
    )
    records = evaluate(
        trusted, benchmark=tiny_glyphs, kappas=["softmax"], progress=False, trust_submission=True
    ).records
    isolation = records[0]["timings"]["isolation"]
    assert records[0]["model"]["name"] == "seen_s3cret" and isolation["mode"] == "in-process"
    assert len(isolation["bundle_sha256"]) == 64  # the same identity of the code as a sandboxed run's


FAULTS = {
    "hang": (
        "import time\nclass M(cnn.GlyphCNN):\n    def forward(self, x):\n        if len(x) > 1:\n"
        "            time.sleep(600)\n        return super().forward(x)\n",
        ["--timeout", "3"],
        (r"error: " + MIXED + r"the submission did not answer within 3 s \(see --timeout\)"),
    ),
    "crash": (
        "import os\nclass M(cnn.GlyphCNN):\n    def forward(self, x):\n        if len(x) > 1:\n"
        "            os._exit(7)\n        return super().forward(x)\n",
        [],
        r"error: " + MIXED + r"the submission's process died \(exit code 7\)",
    ),
    "segfault": (
        "import ctypes\nclass M(cnn.GlyphCNN):\n    def forward(self, x):\n        if len(x) > 1:\n"
        "            ctypes.string_at(0)\n        return super().forward(x)\n",
        [],
        r"error: " + MIXED + r"the submission's process died \(signal SIGSEGV\)",
    ),
    "memory": (
        "import numpy as np\nclass M(cnn.GlyphCNN):\n    def forward(self, x):\n        if len(x) > 1:\n"
        "            np.ones(2**34, dtype=np.uint8)\n        return super().forward(x)\n",
        ["--memory-limit", "4"],
        r"error: " + MIXED + r"(kappa|the model's forward pass failed|the submission ran out of memory).*",
    ),
    "raises": (
        "class M(cnn.GlyphCNN):\n    def forward(self, x):\n        if len(x) > 1:\n"
        "            raise ValueError('only on real batches')\n        return super().forward(x)\n",
        [],
        r"error: " + MIXED + r"the model's forward pass failed: ValueError: only on real batches",
    ),
    "dict_output": (
        "class M(cnn.GlyphCNN):\n    def forward(self, x):\n        return {'logits': super().forward(x)}\n",
        [],
        r"error: .*the model returned a dict; it must return a logits tensor or a tuple \(logits, features\)",
    ),
    "kappa_raises": (
        "KAPPAS = {'boom': lambda logits: 1 / 0}\nclass M(cnn.GlyphCNN):\n    pass\n",
        ["-k", "boom"],
        r"error: " + MIXED + r"kappa 'boom' failed: ZeroDivisionError: division by zero",
    ),
    "custom_transform": (
        "def transform():\n    return lambda image: image\nclass M(cnn.GlyphCNN):\n    pass\n",
        [],
        r"error: submission .* defines transform\(\), which would run outside the sandbox.*",
    ),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_misbehaving_submission_is_one_line(tiny_glyphs, tmp_path, fault):
    body, options, message = FAULTS[fault]
    path = cnn_variant(tmp_path / f"{fault}.py", body + "def build_model():\n    return variant(M)\n")
    done = run_cli(
        "submit",
        path,
        "--benchmark",
        tiny_glyphs,
        "--out",
        tmp_path / "out",
        *QUICK,
        *options,
    )
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.splitlines()) == 1 and re.fullmatch(message, done.stderr.strip()), done.stderr
    assert not (tmp_path / "out").exists()


def timed_run(user: str, path, benchmark, *options, env=None) -> tuple[float, str]:
    """``cood-harness submit`` of ``path`` as ``user``, which must fail: its seconds and its one line of error."""
    began = time.monotonic()
    done = run_cli(
        "submit",
        path,
        "--benchmark",
        benchmark,
        *QUICK,
        *options,
        wrap=USERS[user],
        **({} if env is None else {"env": env}),
    )
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    return time.monotonic() - began, done.stderr.strip()


@pytest.mark.parametrize("user", sorted(USERS))
def test_a_spinning_build_model_ends_at_the_load_limit(tiny_glyphs, tmp_path, user):
    path = cnn_variant(
        tmp_path / "spin.py",
        "def build_model():\n    print('building, forever', flush=True)\n    while True:\n        pass\n",
    )
    seconds, line = timed_run(user, path, tiny_glyphs, "--load-timeout", "3", "--out", tmp_path / "out")
    assert line == "error: the submission did not load within 3 s (see --load-timeout): building, forever"
    assert 3 < seconds < 60 and not (tmp_path / "out").exists()  # the default, 600 s, was the only limit


@pytest.mark.parametrize("user", sorted(USERS))
def test_a_child_that_closes_its_channel_and_lives_on_is_one_line(tiny_glyphs, tmp_path, user):
    path = cnn_variant(
        tmp_path / "closing.py",
        "import json, os, socket, sys, time\n"
        "socket.socket(fileno=os.dup(json.loads(sys.argv[1])['channel'])).shutdown(socket.SHUT_RDWR)\n"
        "print('closed it', flush=True)\ntime.sleep(600)\n",
    )
    seconds, line = timed_run(user, path, tiny_glyphs, "--out", tmp_path / "out")
    assert line == "error: the submission's process closed its channel: closed it"
    assert seconds < 30 and not (tmp_path / "out").exists()  # no wait of 30 s for it to end


@pytest.mark.parametrize("user", sorted(USERS))
def test_the_harnesss_own_failure_is_its_own_line(tiny_glyphs, tmp_path, user):
    path = cnn_variant(tmp_path / "plain.py", "build_model = cnn.build_model\n")
    env = {**os.environ, "COOD_FAULT": "map-answer=ENOMEM"}  # its mapping of the child's load answer fails
    seconds, line = timed_run(user, path, tiny_glyphs, "--out", tmp_path / "out", env=env)
    assert re.fullmatch(r"error: cannot map the answer \(\d+ bytes\): Cannot allocate memory", line), line
    assert seconds < 30 and not (tmp_path / "out").exists()


def test_limits_must_be_positive():
    with pytest.raises(HarnessError, match="must be positive"):
        Limits(batch_timeout_s=0)


def test_without_a_sandbox_a_file_is_refused_in_one_line(tiny_glyphs, tmp_path, monkeypatch):
    refusing = tmp_path / "bwrap"
    refusing.write_text("#!/bin/sh\necho 'bwrap: No permissions to create a new namespace' >&2\nexit 1\n")
    refusing.chmod(0o755)
    monkeypatch.setattr(sandbox, "bwrap", lambda: str(refusing))
    path = cnn_variant(tmp_path / "plain.py", "build_model = cnn.build_model\n")
    with pytest.raises(
        HarnessError,
        match=r"^cannot sandbox the submission: the sandbox did not start \(the submission's process "
        r"died \(exit code 1\): bwrap: No permissions to create a new namespace\); pass "
        r"--trust-submission .*",
    ):
        evaluate(path, benchmark=tiny_glyphs, kappas=["softmax"], progress=False, out=tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("cgroups", ["the host's", "none"])  # without, nothing kills a cgroup's processes
def test_ctrl_c_just_after_the_sandboxs_fork_leaves_no_process(cgroups, tmp_path, monkeypatch):
    """Ctrl-C's KeyboardInterrupt raised after bubblewrap was forked and before the harness kept its handle (it comes
    at any Python instruction): the sandbox, found by its copy's folder, is ended all the same."""
    if cgroups == "none":
        monkeypatch.setattr(sandbox, "host_cgroup_parents", dict)
    started, real = [], sandbox.subprocess.Popen

    def interrupted(command, **kwargs):
        if sandbox.bwrap() not in command:  # another command (the C library's lookup of libseccomp)
            return real(command, **kwargs)
        started.append(real(command, **kwargs))
        raise KeyboardInterrupt

    monkeypatch.setattr(sandbox.subprocess, "Popen", interrupted)
    path = cnn_variant(tmp_path / "plain.py", "build_model = cnn.build_model\n")
    with pytest.raises(KeyboardInterrupt):
        sandbox.Sandbox(path, cuda=False)
    [process] = started  # bubblewrap did start, then its handle was dropped
    assert process.poll() is not None and not Path(f"/proc/{process.pid}").exists()  # killed and reaped: no zombie
    assert not list(Path(tempfile.gettempdir()).glob("cood-bundle-*/plain.py"))


def test_compile_without_a_memory_cgroup_is_refused_in_one_line(tiny_glyphs, tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox, "host_cgroup_parents", dict)  # the rlimits alone: one process, threads only
    path = cnn_variant(tmp_path / "plain.py", "build_model = cnn.build_model\n")
    with pytest.raises(HarnessError, match=r"^--compile needs a memory cgroup for the sandbox \(.*\); run without"):
        evaluate(path, benchmark=tiny_glyphs, kappas=["softmax"], progress=False, compile=True, out=tmp_path / "out")
    assert not (tmp_path / "out").exists() and not list(Path(tempfile.gettempdir()).glob("cood-bundle-*/plain.py"))
