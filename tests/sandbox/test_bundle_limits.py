"""What a submission's folder may hold to be a bundle: folders and regular files of one link, with UTF-8 names free of
control characters, up to a byte cap counted before anything is read; anything else is refused in one line naming it,
at once (no hang on a FIFO, no copy of a sparse file), and a file changed after it was counted is not read."""

import os
import re
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness import HarnessError, bundle
from harness.bundle import Bundle, limited_to
from harness.runtime import sandbox

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def folder(tmp_path) -> Path:
    """A submission's folder: the file and its weights."""
    (tmp_path / "sub" / "weights").mkdir(parents=True)
    (tmp_path / "sub" / "model.py").write_text("x = 1\n")
    (tmp_path / "sub" / "weights" / "w.bin").write_bytes(b"\0" * 10)
    return tmp_path / "sub"


def fifo(path: Path) -> None:
    os.mkfifo(path)


def unix_socket(path: Path) -> None:
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.close()  # the socket file stays


def device(path: Path) -> None:
    os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))  # what /dev/null is


def hard_link(path: Path) -> None:
    token = path.parents[2] / "token"  # outside the folder
    token.write_text("s3cret\n")
    os.link(token, path)


SPECIAL = {
    "fifo": (fifo, "pipe", "weights/pipe, a FIFO; a bundle holds regular files and folders only"),
    "socket": (unix_socket, "sock", "weights/sock, a socket; a bundle holds regular files and folders only"),
    "device": (device, "null", "weights/null, a character device; a bundle holds regular files and folders only"),
    "hard_link": (
        hard_link,
        "token",
        "weights/token, a file with 2 hard links; a link could be a file from outside the folder: copy the file "
        "instead of linking it",
    ),
}


def submit(*args, env=None, timeout=120) -> subprocess.CompletedProcess:
    """``cood-harness submit`` as a user runs it (a refusal comes before the benchmark is read)."""
    environment = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    environment.pop("COOD_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-c", "from harness.cli import main; main()", "submit", *map(str, args)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=timeout,
    )


@pytest.mark.parametrize("kind", sorted(SPECIAL))
def test_an_entry_that_is_not_a_regular_file_of_one_link_is_refused(kind, folder):
    make, name, message = SPECIAL[kind]
    if kind == "device" and os.geteuid() != 0:
        pytest.skip("making a device node needs root")
    make(folder / "weights" / name)
    with pytest.raises(HarnessError, match=f"^the submission's folder {re.escape(str(folder))} holds "):
        Bundle.of(folder / "model.py")
    with pytest.raises(HarnessError, match=re.escape(message) + "$"):
        Bundle.of(folder / "model.py")


@pytest.mark.parametrize("kind", ["fifo", "hard_link"])
def test_the_command_line_refuses_it_in_one_line_at_once(kind, folder, tmp_path):
    make, name, message = SPECIAL[kind]
    make(folder / "weights" / name)
    done = submit(folder / "model.py", "--out", tmp_path / "out", timeout=60)  # a FIFO opened would hang here
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.endswith(message + "\n") and len(done.stderr.splitlines()) == 1, done.stderr
    assert not (tmp_path / "out").exists()


BAD_NAMES = {
    "newline": ("a\nb.txt", r"'a\nb.txt'"),
    "escape": ("colour\x1b[31m.txt", r"'colour\x1b[31m.txt'"),
    "line_separator": ("one\u2028two", r"'one\u2028two'"),
    "not_utf8": (os.fsdecode(b"caf\xe9.bin"), r"'caf\xe9.bin'"),
}


@pytest.mark.parametrize("case", sorted(BAD_NAMES))
def test_a_name_that_is_not_utf8_or_holds_a_control_character_is_refused_escaped(case, folder, tmp_path):
    name, shown = BAD_NAMES[case]
    (folder / "weights" / name).write_bytes(b"1")
    message = f"holds an entry named 'weights/{shown[1:]}, not valid UTF-8 or with a control character; rename it"
    with pytest.raises(HarnessError, match=re.escape(message) + "$"):
        Bundle.of(folder / "model.py")
    done = submit(folder / "model.py", "--out", tmp_path / "out")
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.endswith(message + "\n"), done.stderr


def test_a_folder_with_a_bad_name_is_refused_too(folder):
    (folder / "bad\tfolder").mkdir()
    with pytest.raises(HarnessError, match=re.escape(r"an entry named 'bad\tfolder'")):
        Bundle.of(folder / "model.py")


def test_the_byte_cap_counts_sizes_before_reading(folder, tmp_path):
    sparse = folder / "weights" / "huge.bin"
    with open(sparse, "wb") as handle:
        handle.truncate(bundle.DEFAULT_MAX_BYTES + 2**30)  # a sparse file: no disk, but its copy would be that size
    with pytest.raises(HarnessError, match=r"holds 9 GiB of files, more than the 8 GiB a bundle may hold; .*"):
        Bundle.of(folder / "model.py")
    with limited_to(bundle.DEFAULT_MAX_BYTES + 2**31):
        assert Bundle.of(folder / "model.py").size == bundle.DEFAULT_MAX_BYTES + 2**30 + len("x = 1\n") + 10
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    done = submit(folder / "model.py", "--out", tmp_path / "out", env={"TMPDIR": str(temporary)})
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.endswith(
        "put model.py and the files it reads in a folder of their own, or raise --max-bundle-gb\n"
    )
    assert list(temporary.iterdir()) == []  # nothing was copied


def test_max_bundle_gb_sets_the_cap(folder, tmp_path):
    with open(folder / "weights" / "big.bin", "wb") as handle:
        handle.truncate(2**30)
    done = submit(folder / "model.py", "--out", tmp_path / "out", "--max-bundle-gb", "0.5")
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert "holds 1 GiB of files, more than the 0.5 GiB a bundle may hold" in done.stderr
    done = submit(folder / "model.py", "--max-bundle-gb", "-1")
    assert done.returncode == 2 and done.stderr == "error: --max-bundle-gb must be positive, got -1\n"


CHANGES = {
    "a_fifo_in_its_place": lambda path: (path.unlink(), os.mkfifo(path)),
    "grown": lambda path: path.write_bytes(b"\0" * 11),
    "replaced": lambda path: (path.unlink(), path.write_bytes(b"\1" * 10)),  # its inode's number may come back
    "a_hard_link_made": lambda path: os.link(path, path.parents[1] / "elsewhere"),
    "its_folder_a_link": lambda path: (
        path.parent.rename(path.parents[1] / "moved"),
        path.parent.symlink_to(path.parents[1] / "moved"),
    ),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_file_changed_after_it_was_counted_is_not_read(change, folder, tmp_path):
    counted = Bundle.of(folder / "model.py")
    time.sleep(0.05)  # a change in the same tick of the clock as the count could keep its status change time
    CHANGES[change](folder / "weights" / "w.bin")
    with pytest.raises(HarnessError, match=r"weights/w\.bin changed while it was read; run again once the folder"):
        counted.hash(copy_to=tmp_path / "copy")


def test_a_copy_that_cannot_fit_is_refused_before_it_is_made(folder, monkeypatch, tmp_path):
    monkeypatch.setattr(sandbox.shutil, "disk_usage", lambda path: SimpleNamespace(free=5))
    monkeypatch.setattr(sandbox.tempfile, "tempdir", str(tmp_path))
    with pytest.raises(HarnessError, match=r"its copy for the sandbox would not fit in the temporary folder"):
        sandbox.Sandbox(folder / "model.py", cuda=False)
    assert not list(tmp_path.glob("cood-bundle-*"))
