"""Ctrl-C in each command line, at three points of its work: exit status 130, one line on stderr saying what the
interruption left (``interrupted; ...``), no traceback (not from a worker either), every process of the command gone
within a few seconds, and nothing of the user's lost.

Ctrl-C reaches every process of a terminal's foreground group, so each command runs in a process group of its own,
with Ctrl-C's default handling restored (a process started in the background ignores it), and the test sends SIGINT
to the group. A command is caught at a point by what it leaves (a worker starting, a score cache entry, a submission
that says it is building its model) or stopped there by a fault point (``COOD_FAULT=<point>=stop``, see
:mod:`dataset_builder.faults`), signalled, then continued.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from glyph_fixtures import cnn_variant
from image_fixtures import write_class

sys.path.insert(0, str(Path(__file__).parents[1] / "leaderboard"))
from lb_records import GLYPHS, record

pytestmark = pytest.mark.slow  # real commands, each signalled: the quick loop (-m 'not slow') leaves them to CI

REPO = Path(__file__).resolve().parents[2]
EXIT_S = 5.0  # from the signal to the exit of every process of the command
PROGRAMS = {"cood-dataset": "dataset_builder.cli", "cood-harness": "harness.cli", "cood-leaderboard": "leaderboard.cli"}
# A process of a test runner started in the background ignores SIGINT, and its children inherit that: the command is
# started with SIGINT's default restored, as a terminal's foreground job has it.
RESTORED = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)
BAR = re.compile(r"^[\w ]+: +\d+%\|")  # a progress bar's line (the builders show theirs on stderr)
GLYPH_ARGS = ["--pool-size", "2", "--images-per-class", "3", "--n-test", "1", "--id-test-per-class", "1"]
GLYPH_ARGS += ["--id-train-per-class", "0", "--workers", "2"]
FOLDER_ARGS = ["--images-per-class", "4", "--test-fraction", "0.25", "--min-images", "4", "--workers", "2"]
SLEEPS_WHILE_BUILT = """
def build_model():
    import ctypes, time
    ctypes.CDLL(None).prctl(15, {token!r}.encode(), 0, 0, 0)  # PR_SET_NAME: seen from the host, the model is built now
    time.sleep(600)
"""
SLOW_BATCHES = """
import time
class M(cnn.GlyphCNN):
    def forward(self, x):
        if len(x) > 1:
            time.sleep(0.5)
        return super().forward(x)
def build_model():
    return variant(M)
"""


class Command:
    """A command line running in a process group of its own, its output in files."""

    def __init__(self, program: str, args: list, tmp_path: Path, fault: str | None = None, env: dict | None = None):
        self.logs = tmp_path / f"logs-{time.monotonic_ns()}"
        self.logs.mkdir()
        environment = {k: v for k, v in os.environ.items() if k not in ("COOD_FAULT", "COOD_DEBUG")}
        environment.update(PYTHONPATH=str(REPO), COOD_FAULT=fault or "", **(env or {}))
        code = f"import sys; sys.argv[0] = {program!r}; from {PROGRAMS[program]} import main; main()"
        with open(self.logs / "stdout", "wb") as out, open(self.logs / "stderr", "wb") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-c", RESTORED, "-c", code, *map(str, args)],
                stdout=out,
                stderr=err,
                env=environment,
                start_new_session=True,  # its own process group, as a terminal's job
            )
        self.pid = self.process.pid

    def stderr(self) -> str:
        return (self.logs / "stderr").read_text(errors="replace")

    def processes(self) -> dict[int, bytes]:
        """Every live process of the command's group, with its command line."""
        found = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text()
                    fields = stat.rsplit(")", 1)[1].split()
                    if int(fields[2]) == self.pid and fields[0] != "Z":
                        found[int(entry.name)] = (entry / "cmdline").read_bytes()
                except (OSError, ValueError, IndexError):
                    continue
        return found

    def stopped(self) -> bool:
        """Whether a process of the group stopped itself at a fault point."""
        for pid in self.processes():
            try:
                if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T":
                    return True
            except OSError:
                continue
        return False

    def wait_for(self, condition, what: str, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert self.process.poll() is None, (
                f"the command ended ({self.process.returncode}) before {what}: " + (self.stderr()[-2000:])
            )
            assert time.monotonic() < deadline, f"no {what} within {timeout} s"
            time.sleep(0.02)

    def interrupt(self) -> float:
        """Ctrl-C to the whole group (then continue a process a fault point stopped); the seconds until the command
        and every process of its group are gone."""
        status = Path(f"/proc/{self.pid}/status").read_text()
        caught = int(re.search(r"SigCgt:\s*([0-9a-f]+)", status).group(1), 16)
        ignored = int(re.search(r"SigIgn:\s*([0-9a-f]+)", status).group(1), 16)
        assert caught >> (signal.SIGINT - 1) & 1 and not ignored >> (signal.SIGINT - 1) & 1, "SIGINT would not arrive"
        sent = time.monotonic()
        os.killpg(self.pid, signal.SIGINT)
        os.killpg(self.pid, signal.SIGCONT)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.pid, signal.SIGKILL)
            raise AssertionError(f"still running 60 s after Ctrl-C: {self.stderr()[-2000:]}") from None
        while self.processes() and time.monotonic() - sent < 30:
            time.sleep(0.02)
        left = self.processes()
        if left:
            os.killpg(self.pid, signal.SIGKILL)
        assert not left, f"processes left after Ctrl-C: {left}"
        return time.monotonic() - sent


def assert_interrupted(command: Command, seconds: float, note: str) -> None:
    """Exit 130 within :data:`EXIT_S`, and stderr (progress bars aside) exactly ``interrupted; <note>``."""
    stderr = command.stderr()
    lines = [line for line in re.split(r"[\r\n]+", stderr) if line.strip() and not BAR.match(line)]
    assert command.process.returncode == 130, stderr
    assert "Traceback" not in stderr and lines == [f"interrupted; {note}"], stderr
    assert seconds < EXIT_S, f"{seconds:.1f} s from Ctrl-C to the exit"
    print(f"{os.environ.get('PYTEST_CURRENT_TEST', '?').split(' ')[0]}: exit {seconds:.2f} s after Ctrl-C")


def spawned_worker(command: Command) -> bool:
    """Whether a worker process of the command has started (spawned, not yet past its start-up)."""
    return any(b"spawn_main" in cmdline for cmdline in command.processes().values())


def assert_workers_shielded(command: Command) -> None:
    """Every worker the command has started, from its first instruction on, has Ctrl-C blocked or ignored (else a
    Ctrl-C during its start-up imports prints its traceback)."""
    for pid, cmdline in command.processes().items():
        if b"spawn_main" in cmdline:
            status = Path(f"/proc/{pid}/status").read_text()
            masks = [int(re.search(rf"{field}:\s*([0-9a-f]+)", status).group(1), 16) for field in ("SigBlk", "SigIgn")]
            assert any(mask >> (signal.SIGINT - 1) & 1 for mask in masks), f"worker {pid} would take Ctrl-C"


def tree(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


# ------------------------------------------------------------------------------------------------------ the builder


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> dict[str, Path]:
    """ID and OOD class folders for ``cood-dataset folder`` (the image builder ``imagenet`` runs too)."""
    root = tmp_path_factory.mktemp("sources")
    for cid in ("cat", "dog"):
        write_class(root / "id", cid, 3)
    for cid in ("ant", "bee", "cow", "elk"):
        write_class(root / "ood", cid, 5)
    return {"id": root / "id", "ood": root / "ood"}


def test_glyphs_interrupted_while_its_workers_start(tmp_path):
    command = Command("cood-dataset", ["glyphs", tmp_path / "out", *GLYPH_ARGS], tmp_path)
    command.wait_for(lambda: spawned_worker(command), "worker process", timeout=120)
    assert_workers_shielded(command)
    assert_interrupted(command, command.interrupt(), "nothing was written")
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("logs-")) == []


@pytest.mark.parametrize("point", ["shard-done", "swap-before"])  # rendering and writing shards; the swap into place
def test_glyphs_interrupted_at_a_point_leaves_nothing(point, tmp_path):
    command = Command("cood-dataset", ["glyphs", tmp_path / "out", *GLYPH_ARGS], tmp_path, fault=f"{point}=stop")
    command.wait_for(command.stopped, f"stop at {point}")
    assert_interrupted(command, command.interrupt(), "nothing was written")
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("logs-")) == []


@pytest.mark.parametrize("point", ["workers", "block-done", "swap-before"])
def test_an_image_build_interrupted_keeps_what_resumes(point, images, tmp_path):
    out = tmp_path / "bench"
    args = ["folder", out, "--id", images["id"], "--ood", images["ood"], *FOLDER_ARGS]
    command = Command("cood-dataset", args, tmp_path, fault=None if point == "workers" else f"{point}=stop")
    command.wait_for(lambda: spawned_worker(command) if point == "workers" else command.stopped(), point)
    assert_workers_shielded(command)
    partial = out.with_name("bench.partial")
    kept = point != "swap-before"  # a finished build, stopped before its swap, cannot resume: it leaves nothing
    note = f"the finished part of the build is kept in {partial}: rerun the same command to resume"
    assert_interrupted(command, command.interrupt(), note if kept else "nothing was written")
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("logs-")) == ["bench.partial"] * kept
    resumed = Command("cood-dataset", args, tmp_path)
    assert resumed.process.wait(timeout=300) == 0, resumed.stderr()
    assert (out / "manifest.json").is_file() and not partial.exists()


def test_a_ctrl_c_while_the_workers_start_ends_them(monkeypatch):
    """Ctrl-C while the pool starts its workers waits until the pool exists, then ends it at once."""
    import multiprocessing

    from dataset_builder.workers import worker_pool

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as a command's main thread has it
    real, made = multiprocessing.context.SpawnContext.Pool, []

    def then_ctrl_c(self, *args, **kwargs):
        made.append(real(self, *args, **kwargs))
        os.kill(os.getpid(), signal.SIGINT)  # while the workers start
        return made[-1]

    monkeypatch.setattr(multiprocessing.context.SpawnContext, "Pool", then_ctrl_c)
    before = {p.pid for p in multiprocessing.active_children()}
    try:
        with pytest.raises(KeyboardInterrupt), worker_pool(2):
            pytest.fail("the block ran")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert made and not {p.pid for p in multiprocessing.active_children()} - before


# ------------------------------------------------------------------------------------------------------ the harness


def harness_run(tmp_path: Path, benchmark: Path, path: Path, *options) -> tuple[Command, Path]:
    """``cood-harness submit`` of ``path`` with a temporary folder of its own (where the bundle's copy goes)."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    args = ["submit", path, "--benchmark", benchmark, "--quiet", "-k", "softmax", "--workers", "0"]
    args += ["--out", tmp_path / "out", "--cache-dir", tmp_path / "cache", *options]
    return Command("cood-harness", args, tmp_path, env={"TMPDIR": str(temporary)}), temporary


def sleeping_submission(folder: Path) -> tuple[Path, str]:
    """A submission whose ``build_model`` names its process with a token of its own, then sleeps."""
    folder.mkdir()
    token = f"cood-{os.urandom(4).hex()}"
    return cnn_variant(folder / "slow.py", SLEEPS_WHILE_BUILT.format(token=token)), token


def pids_with(what: str, marker: str) -> list[int]:
    """Host processes whose ``what`` (``comm``, ``cmdline``) holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / what).read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def left_behind(temporary: Path, token: str | None = None, wait_s: float = 10) -> list:
    """The bundle copies in ``temporary`` and the sandbox's processes (bubblewrap names the copy; the child, the token)
    still there after at most ``wait_s`` seconds."""
    deadline = time.monotonic() + wait_s
    while True:
        left = [*temporary.glob("cood-bundle-*"), *pids_with("cmdline", str(temporary))]
        left += pids_with("comm", token) if token else []
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


SCORES_KEPT = (
    "nothing was written to the outputs; the score cache keeps every shard scored so far: rerun the same command to "
    "resume"
)


@pytest.mark.parametrize("point", ["starting", "loading", "scoring"])
def test_the_harness_interrupted_keeps_only_whole_cache_entries(point, tiny_glyphs, tmp_path):
    if point == "scoring":
        (tmp_path / "file").mkdir()
        path, token = cnn_variant(tmp_path / "file" / "slow.py", SLOW_BATCHES), None
    else:
        path, token = sleeping_submission(tmp_path / "file")
    command, temporary = harness_run(tmp_path, tiny_glyphs, path)
    if point == "starting":  # its sandbox started, PyTorch being imported
        command.wait_for(lambda: any(temporary.glob("cood-bundle-*")), "bundle copy")
    elif point == "loading":
        command.wait_for(lambda: pids_with("comm", token), "model being built")
    else:
        command.wait_for(lambda: any((tmp_path / "cache").rglob("*.scores")), "score cache entry")
    assert_interrupted(command, command.interrupt(), SCORES_KEPT)
    assert not (tmp_path / "out").exists() and left_behind(temporary, token) == []
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.name.endswith(".partial")]


def test_the_harness_without_a_cache_writes_nothing(tiny_glyphs, tmp_path):
    path, token = sleeping_submission(tmp_path / "file")
    command, temporary = harness_run(tmp_path, tiny_glyphs, path, "--no-cache")
    command.wait_for(lambda: pids_with("comm", token), "model being built")
    assert_interrupted(command, command.interrupt(), "nothing was written")
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()
    assert left_behind(temporary, token) == []


def test_the_harness_stopped_by_sigterm_removes_its_bundle_copy(tiny_glyphs, tmp_path):
    path, token = sleeping_submission(tmp_path / "file")
    command, temporary = harness_run(tmp_path, tiny_glyphs, path)
    try:
        command.wait_for(lambda: pids_with("comm", token), "model being built")
        assert list(temporary.glob("cood-bundle-*"))
        os.kill(command.pid, signal.SIGTERM)
        assert command.process.wait(timeout=30) == -signal.SIGTERM  # it still ends as SIGTERM ends it
        assert left_behind(temporary, token) == []
    finally:
        if command.processes():
            os.killpg(command.pid, signal.SIGKILL)


# -------------------------------------------------------------------------------------------------- the leaderboard


@pytest.fixture
def board(tmp_path) -> Path:
    from leaderboard.store import add_records, init_leaderboard

    directory = tmp_path / "board"
    init_leaderboard(directory, GLYPHS)
    add_records(directory, [record()])
    return directory


@pytest.fixture
def batch(tmp_path) -> list[Path]:
    import json

    paths = []
    for kappa in ("entropy", "energy", "max_logit"):
        (tmp_path / f"{kappa}.json").write_text(json.dumps(record(kappa=kappa)))
        paths.append(tmp_path / f"{kappa}.json")
    return paths


@pytest.mark.parametrize(
    "point,added",
    [("add:after-stage", False), ("add:before-commit", False), ("add:after-commit", True)],
)
def test_an_interrupted_add_says_whether_it_added(point, added, board, batch, tmp_path):
    from leaderboard.store import accepted_files

    before = tree(board)
    command = Command("cood-leaderboard", ["add", *batch, "-d", board], tmp_path, fault=f"{point}=stop")
    command.wait_for(command.stopped, f"stop at {point}")
    note = f"the entries were added to {board}" if added else "nothing was written"
    assert_interrupted(command, command.interrupt(), note)
    assert len(accepted_files(board)) == (4 if added else 1)
    if not added:
        assert {k: v for k, v in tree(board).items() if k in before} == before
