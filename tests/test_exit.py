"""A command line that imported torch ends without the interpreter's module-by-module teardown (about a second), yet
as ``sys.exit`` would: its status, its whole output, its exit handlers; a thread still running is waited for."""

import os
import subprocess
import sys

import pytest

COMMAND = """
import atexit, os, sys, threading, time
from pathlib import Path
import typer
if os.environ.get("TORCH"):
    import torch  # what makes the teardown long
from dataset_builder.console import make_app, run_app

marks = Path(os.environ["MARKS"])
class Teardown:  # the interpreter's teardown of the modules would end it
    def __del__(self):
        (marks / "teardown").write_text("torn down")
TORN = Teardown()
app = make_app("a test command", "0")

@app.command()
def go(code: int = 0, thread: bool = False):
    atexit.register(lambda: (marks / "atexit").write_text("ran"))
    sys.stdout.write("the last words, with no newline")
    if thread:
        threading.Thread(target=lambda: (time.sleep(0.5), (marks / "thread").write_text("done"))).start()
    if code:
        raise typer.Exit(code)

@app.command()
def refuse():
    from dataset_builder.errors import CoodError
    raise CoodError("a user's mistake")

run_app(app, "tested")
"""


def command(tmp_path, *args, torch: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "MARKS": str(tmp_path), "TORCH": "1" if torch else ""}
    return subprocess.run([sys.executable, "-c", COMMAND, *args], capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.parametrize("code", [0, 3])
def test_a_command_exits_with_its_status_output_and_exit_handlers_but_no_teardown(tmp_path, code):
    done = command(tmp_path, "go", "--code", str(code))
    assert done.returncode == code and done.stdout == "the last words, with no newline"
    assert (tmp_path / "atexit").read_text() == "ran" and not (tmp_path / "teardown").exists()


def test_a_users_mistake_still_exits_2_in_one_line(tmp_path):
    done = command(tmp_path, "refuse")
    assert (done.returncode, done.stderr) == (2, "tested: error: a user's mistake\n")
    assert not (tmp_path / "teardown").exists()


def test_a_thread_still_running_is_waited_for(tmp_path):
    done = command(tmp_path, "go", "--thread")
    assert done.returncode == 0 and (tmp_path / "thread").read_text() == "done"
    assert (tmp_path / "atexit").exists()  # the normal exit: the thread was not cut off half a second in


def test_a_command_without_torch_exits_normally(tmp_path):
    done = command(tmp_path, "go", "--code", "3", torch=False)
    assert done.returncode == 3 and done.stdout == "the last words, with no newline"
    assert (tmp_path / "atexit").exists() and (tmp_path / "teardown").exists()
