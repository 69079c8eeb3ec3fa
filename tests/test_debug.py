"""``COOD_DEBUG=1``: every command line prints the full traceback, causes included, instead of its one-line error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dataset_builder.errors import CoodError, fail

ROOT = Path(__file__).resolve().parents[1]
# command line -> (module, arguments that fail fast, exit status, the one line, the error's type); {tmp}: a fresh folder
FAILING = {
    "cood-dataset": (
        "dataset_builder.cli",
        ["glyphs", "--overwrite"],
        2,
        "error: --overwrite needs an OUT folder (the cache is built once per set of options)",
        "dataset_builder.errors.BenchmarkError",
    ),
    "cood-harness": (
        "harness.cli",
        ["submit", "{tmp}/missing.py"],
        2,
        "error: submission file {tmp}/missing.py not found",
        "harness.errors.HarnessError",
    ),
    "cood-leaderboard": (
        "leaderboard.cli",
        ["show", "-d", "{tmp}"],
        2,
        "cood-leaderboard: error: {tmp} is not a leaderboard (no leaderboard.json); create it with "
        "`cood-leaderboard init`",
        "leaderboard.errors.LeaderboardError",
    ),
}


def run(module: str, args: list[str], debug: str | None) -> subprocess.CompletedProcess:
    env = {**{k: v for k, v in os.environ.items() if k != "COOD_DEBUG"}, "PYTHONPATH": str(ROOT)}
    if debug is not None:
        env["COOD_DEBUG"] = debug
    return subprocess.run(
        [sys.executable, "-c", f"from {module} import main; main()", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("command", list(FAILING))
def test_cood_debug_turns_the_one_line_into_the_traceback(command, tmp_path):
    module, args, status, line, error = FAILING[command]
    args, line = [a.format(tmp=tmp_path) for a in args], line.format(tmp=tmp_path)
    for off in (None, "0"):
        quiet = run(module, args, off)
        assert (quiet.returncode, quiet.stderr) == (status, line + "\n")
    loud = run(module, args, "1")
    assert loud.returncode == status
    assert loud.stderr.startswith("Traceback (most recent call last):\n"), loud.stderr
    assert loud.stderr.endswith(f"{error}: {line.split('error: ', 1)[1]}\n"), loud.stderr
    assert line not in loud.stderr.splitlines()


def test_the_traceback_shows_the_causes(monkeypatch, capsys):
    monkeypatch.setenv("COOD_DEBUG", "1")
    try:
        try:
            {}["shard"]
        except KeyError as exc:
            raise CoodError("the manifest lists no shard") from exc
    except CoodError as exc:
        error = exc
    with pytest.raises(SystemExit) as done:
        fail(error, "error: the manifest lists no shard", 2)
    assert done.value.code == 2
    err = capsys.readouterr().err
    cause, _, effect = err.partition("\nThe above exception was the direct cause of the following exception:\n")
    assert cause.startswith("Traceback") and cause.endswith("KeyError: 'shard'\n")
    assert effect.endswith("dataset_builder.errors.CoodError: the manifest lists no shard\n")
