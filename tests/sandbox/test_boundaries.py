"""The pieces of the boundary on their own: the channel refuses what is not a well-formed message of data, the bundle
is the file's folder without links, and the queue's worker runs library models only."""

import json
import os
import socket
from pathlib import Path

import numpy as np
import pytest

from harness import HarnessError
from harness.bundle import Bundle, tag_cache
from harness.runtime.channel import ARENA_BYTES, MAX_HEADER_BYTES, Arena, Channel, Malformed
from harness.worker import RequestEvaluator

pytestmark = pytest.mark.slow  # real runs: the quick loop (-m 'not slow') leaves them to CI


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    arenas = Arena(), Arena()
    ours, theirs = (
        Channel(a, arenas[0], arenas[1]),
        Channel(b, Arena(os.dup(arenas[1].fd)), Arena(os.dup(arenas[0].fd))),
    )
    yield ours, theirs
    ours.close()
    theirs.close()


def test_arrays_cross_as_data(pair):
    ours, theirs = pair
    logits = np.arange(12, dtype=np.float32).reshape(3, 4)
    theirs.send(
        "answer",
        {
            "logits": logits,
            "features": None,
            "scores": {"k": np.ones(3)},
            "keys": ["a", "b", "c"],
            "count": np.array(36),
            "columns": logits[:, 1],
        },
    )
    kind, body = ours.receive(5)
    assert kind == "answer" and body["keys"] == ["a", "b", "c"] and body["features"] is None
    assert body["count"].shape == () and int(body["count"]) == 36  # a 0-d array stays 0-d
    np.testing.assert_array_equal(body["columns"], [1, 5, 9])  # a strided view crosses as its values
    np.testing.assert_array_equal(body["logits"], logits)
    np.testing.assert_array_equal(body["scores"]["k"], np.ones(3))


def frame(header: bytes) -> bytes:
    return len(header).to_bytes(4, "big") + header


MALFORMED = {
    "not json": (frame(b"\x80\x04\x95 pickle"), "its header is not JSON"),
    "unknown kind": (frame(b'{"kind": "exec", "body": null, "arrays": []}'), "an unknown header"),
    "extra field": (frame(b'{"kind": "ok", "body": null, "arrays": [], "code": "x"}'), "an unknown header"),
    "object dtype": (frame(b'{"kind": "ok", "body": {"$array": 0}, "arrays": [["|O", [1], 0]]}'), "bad array entry"),
    "outside the arena": (
        frame(b'{"kind": "ok", "body": {"$array": 0}, "arrays": [["<f4", [1000], %d]]}' % (ARENA_BYTES - 64)),
        "lies outside",
    ),
    "dangling reference": (frame(b'{"kind": "ok", "body": {"$array": 3}, "arrays": []}'), "refers to array 3"),
    "too deep": (frame(b'{"kind": "ok", "body": ' + b"[" * 20 + b"]" * 20 + b', "arrays": []}'), "nested deeper"),
    "huge header": ((MAX_HEADER_BYTES + 1).to_bytes(4, "big"), "more than"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_message_is_refused(pair, case):
    ours, theirs = pair
    data, why = MALFORMED[case]
    theirs.sock.sendall(data)
    with pytest.raises(Malformed, match=f"malformed message \\(.*{why}"):
        ours.receive(5)


def test_arrays_over_the_readers_budget_are_refused_before_any_copy(pair):
    ours, theirs = pair
    theirs.send("answer", {"logits": np.ones((10, 10))})
    with pytest.raises(Malformed, match=r"\(its arrays hold at least 800 bytes, more than the 799 bytes expected\)"):
        ours.receive(5, budget=799)
    theirs.send("answer", {"logits": np.ones((10, 10))})
    np.testing.assert_array_equal(ours.receive(5, budget=800)[1]["logits"], np.ones((10, 10)))


def test_the_arenas_cannot_be_grown_shrunk_or_sealed(pair):
    ours, _ = pair
    ours.send("ok", {"x": np.ones(1000)})
    assert os.fstat(ours.out.fd).st_size == ARENA_BYTES  # the harness's size, sparse: only what was written costs
    for size in (10, ARENA_BYTES + 1):
        with pytest.raises(OSError):
            os.ftruncate(ours.out.fd, size)
    with pytest.raises(OSError):
        __import__("fcntl").fcntl(ours.out.fd, __import__("fcntl").F_ADD_SEALS, __import__("fcntl").F_SEAL_WRITE)


def test_each_message_lies_clear_of_the_one_before_where_both_fit():
    # the harness sends the next batch before the child has read the last: the two must not overlap
    arena = Arena(size=1 << 16)
    offsets = [arena.write([np.ones(n, np.float32)])[0][2] for n in (1000, 500, 500, 2000)]
    assert offsets == [0, 4032, 0, 2048]  # after the last; before it where it fits; else after it again
    assert arena.beside(4000) and not arena.beside((1 << 16) - 4000)  # too large to lie clear: the answers are taken
    arena.close()


def test_the_bundle_is_the_folder_without_hidden_files_or_links(tmp_path):
    (tmp_path / "weights").mkdir()
    (tmp_path / "model.py").write_text("x = 1\n")
    (tmp_path / "weights" / "w.bin").write_bytes(b"\0" * 10)
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref")
    (tmp_path / "__pycache__").mkdir()
    tag_cache(tmp_path / "cache")  # a score cache and an output folder beside the file: what the harness wrote
    (tmp_path / "cache" / "entry.scores").write_bytes(b"1")
    (tmp_path / "out" / "records").mkdir(parents=True)
    (tmp_path / "out" / "per_level.csv").write_text("level\n")
    bundle = Bundle.of(tmp_path / "model.py")
    assert bundle.files == ("model.py", "weights/w.bin")
    first, digests = bundle.hash(copy_to=tmp_path.parent / "copy")
    assert digests["model.py"] == __import__("hashlib").sha256(b"x = 1\n").hexdigest()
    assert sorted(
        p.relative_to(tmp_path.parent / "copy").as_posix() for p in (tmp_path.parent / "copy").rglob("*")
    ) == ["model.py", "weights", "weights/w.bin"]
    assert oct((tmp_path.parent / "copy" / "weights" / "w.bin").stat().st_mode & 0o777) == "0o644"
    (tmp_path / "weights" / "w.bin").write_bytes(b"\1" * 10)
    assert Bundle.of(tmp_path / "model.py").hash()[0] != first  # any file of the folder is part of the identity
    (tmp_path / "token").symlink_to("/etc/hostname")
    with pytest.raises(HarnessError, match="holds a link, token; links are not followed"):
        Bundle.of(tmp_path / "model.py")


def test_the_worker_runs_no_file_from_the_queue(tiny_glyphs, tmp_path):
    worker = RequestEvaluator(tiny_glyphs, device="cpu", work_dir=tmp_path, progress=False)
    for target in ("my_model.py", str(tmp_path / "x.py"), "file:my_model.py", None):
        request = {"id": "0123456789ab", "benchmark": worker.identity, "model": {"target": target}}
        with pytest.raises(HarnessError, match="not a library model .* the worker never runs a file from the queue"):
            worker.evaluate(request, tmp_path / "weights.safetensors")
    assert list(tmp_path.iterdir()) == []


def _descendants(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [pid] + [p for child in children for p in _descendants(int(child))]


def _nice(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16])


SETUP_PER_SANDBOX = ("channel", "batches", "answers", "probe_port")  # its own descriptors and probe


def _setup(pid: int) -> dict:
    """The setup a sandbox's child was started with: the last argument of its command line."""
    return json.loads(Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[-2])


def test_prestarted_sandboxes_are_taken_once_each_and_for_their_device_kind_only(tmp_path):
    from harness.runtime import sandbox

    path = tmp_path / "model.py"
    path.write_text("x = 1\n")
    sandbox.prestart(path, cuda=False)
    started = next(iter(sandbox._STARTED.values()))
    assert len(started) == 2  # the run's and the re-check's
    assert sandbox.take(path, cuda=True) is None  # another kind: ended, not handed over
    assert all(s.process.returncode is not None and not s.copy.exists() for s in started)
    sandbox.prestart(path, cuda=False)
    run, recheck = sandbox.take(path, cuda=False), sandbox.take(path, cuda=False)
    try:
        assert sandbox.take(path, cuda=False) is None
        assert run.ready(120)["mode"] == "sandbox" and recheck.ready(120)["mode"] == "sandbox"
        # both start alike: the same priority and a setup of the same fields, so a child cannot tell which it is
        assert {_nice(p) for p in _descendants(run.process.pid) + _descendants(recheck.process.pid)} == {0}
        setups = [_setup(_descendants(s.process.pid)[-1]) for s in (run, recheck)]
        assert setups[0].keys() == setups[1].keys() and "background" not in setups[0]
        assert {k: v for k, v in setups[0].items() if k not in SETUP_PER_SANDBOX} == {
            k: v for k, v in setups[1].items() if k not in SETUP_PER_SANDBOX
        }
    finally:
        run.close()
        recheck.close()


def test_the_childs_openmp_threads_wait_passively_unless_told_otherwise(tiny_glyphs, tmp_path, monkeypatch):
    from attacks import hostile, run

    path = hostile(tmp_path, "import os", "'omp_' + os.environ.get('OMP_WAIT_POLICY', 'unset').lower()")
    assert run(path, tiny_glyphs)[0]["model"]["name"] == "omp_passive"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert run(path, tiny_glyphs)[0]["model"]["name"] == "omp_active"
