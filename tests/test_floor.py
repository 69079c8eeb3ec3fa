"""The floor every package stands on: the one atomic write and the one fault-point syntax."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from dataset_builder import faults
from dataset_builder.files import write_atomic, written_for

ROOT = Path(__file__).resolve().parents[1]


def test_a_write_replaces_the_target_whole_and_leaves_nothing_beside_it(tmp_path):
    target = tmp_path / "index.txt"
    target.write_bytes(b"old\n")
    write_atomic(target, b"new\n")
    assert target.read_bytes() == b"new\n"
    write_atomic(target, lambda tmp: tmp.write_text("newer\n"))
    assert target.read_bytes() == b"newer\n"
    assert [p.name for p in tmp_path.iterdir()] == ["index.txt"]


def test_a_failed_write_leaves_the_target_as_it_was(tmp_path):
    target = tmp_path / "table.csv"
    target.write_bytes(b"old\n")

    def half(tmp: Path) -> None:
        tmp.write_bytes(b"ne")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp))

    with pytest.raises(OSError, match="No space left on device"):
        write_atomic(target, half)
    assert target.read_bytes() == b"old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["table.csv"]


def test_concurrent_writers_of_one_path_each_write_their_own_file(tmp_path):
    target, both_open, names = tmp_path / "entry.scores", threading.Barrier(2, timeout=30), []

    def writer(data: bytes) -> None:
        def write(tmp: Path) -> None:
            tmp.write_bytes(data[:1])
            names.append(tmp.name)
            both_open.wait()  # both temporary files exist now
            with open(tmp, "ab") as handle:
                handle.write(data[1:])

        write_atomic(target, write)

    threads = [threading.Thread(target=writer, args=(data,)) for data in (b"a" * 1000, b"b" * 1000)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(names)) == 2 and {written_for(name) for name in names} == {"entry.scores"}
    assert target.read_bytes() in (b"a" * 1000, b"b" * 1000)
    assert [p.name for p in tmp_path.iterdir()] == ["entry.scores"]


@pytest.mark.parametrize(
    "name,target",
    [
        ("000003-fedcba9876543210.json.partial", "000003-fedcba9876543210.json"),
        ("000003-fedcba9876543210.json.0123456789ab.partial", "000003-fedcba9876543210.json"),
        ("000003-fedcba9876543210.json", None),
    ],
)
def test_the_file_a_temporary_one_was_for(name, target):
    assert written_for(name) == target


def test_a_fault_point_raises_the_named_error_about_its_file(monkeypatch, tmp_path):
    monkeypatch.setenv("COOD_FAULT", "swap-aside=EACCES")
    faults.point("swap-in", tmp_path)  # another point: nothing happens
    with pytest.raises(PermissionError) as raised:
        faults.point("swap-aside", tmp_path)
    assert (raised.value.errno, raised.value.filename) == (errno.EACCES, str(tmp_path))


@pytest.mark.parametrize(
    "value,message",
    [
        ("swap-asid", "COOD_FAULT names an unknown point 'swap-asid'; known: shard-done, "),
        ("swap-aside=ENOSPACE", "COOD_FAULT names an unknown error 'ENOSPACE'"),
    ],
)
def test_a_mistyped_fault_is_refused(monkeypatch, value, message):
    monkeypatch.setenv("COOD_FAULT", value)
    with pytest.raises(ValueError) as raised:
        faults.point("swap-aside")
    assert str(raised.value).startswith(message)


def test_a_fault_point_kills_as_kill_9_would():
    code = (
        "from dataset_builder import faults\ntry:\n    faults.point('add:after-stage')\n"
        "finally:\n    print('cleaned up')\n"
    )
    env = {**os.environ, "COOD_FAULT": "add:after-stage", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (137, "", "")
