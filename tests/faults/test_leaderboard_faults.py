"""Faults in leaderboard commands: killed, out of disk, unwritable, fed bad files, or losing a Hub reply.

Every case runs the real command line in a subprocess, stopped at a named fault point
(``COOD_FAULT``, see ``dataset_builder/faults.py``) or given bad input, and checks the exit status,
that stderr is at most one line, and the sha256 of every file of the leaderboard before and after.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from huggingface_hub import HfApi

from leaderboard.errors import LeaderboardError
from leaderboard.publish import publish
from leaderboard.release import release
from leaderboard.store import accepted_files, add_records, current_table, init_leaderboard

sys.path.insert(0, str(Path(__file__).parents[1] / "leaderboard"))
from lb_records import GLYPHS, record

ERROR = "cood-leaderboard: error: "
TABLE_FILES = {"index.txt", "table.csv", "table.parquet"}  # what an add changes by design


def _cli(*args, fault: str | None = None) -> subprocess.CompletedProcess:
    env = {**{k: v for k, v in os.environ.items() if k != "COOD_DEBUG"}, "COOD_FAULT": fault or ""}
    return subprocess.run(
        [sys.executable, "-c", "from leaderboard.cli import main; main()", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def _snapshot(directory: Path) -> dict[str, str]:
    """Every file under ``directory`` (except the lock) with its sha256."""
    return {
        p.relative_to(directory).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


def _one_line_error(result: subprocess.CompletedProcess, pattern: str, status: int = 2) -> None:
    """One line on stderr, nothing on stdout, and the status: 2 for a user's problem, 1 for the system's (an OSError
    the leaderboard did not explain)."""
    assert result.returncode == status, result.stderr
    assert result.stdout == ""
    assert re.fullmatch(re.escape(ERROR) + pattern + r"\n", result.stderr), result.stderr


def _table_lists_every_record(directory: Path) -> bool:
    listed = pd.read_parquet(directory / "table.parquet")["record_file"].tolist()
    return listed == [f"records/{name}" for name in accepted_files(directory)]


def _write(path: Path, data) -> Path:
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def board(tmp_path) -> Path:
    """A leaderboard with one entry and release v1."""
    directory = tmp_path / "board"
    init_leaderboard(directory, GLYPHS)
    add_records(directory, [record()])
    release(directory, note="first")
    return directory


@pytest.fixture
def batch(tmp_path) -> list[Path]:
    """Three valid record files, new to ``board``."""
    return [_write(tmp_path / f"{kappa}.json", record(kappa=kappa)) for kappa in ("entropy", "energy", "max_logit")]


# ---------------------------------------------------------------- a 3-record add killed at each step

KILLS = [("add:after-stage", 1, 0), ("add:before-commit", 3, 0), ("add:after-commit", 3, 3), ("table:after-csv", 3, 3)]


@pytest.mark.parametrize(("point", "count", "visible"), KILLS, ids=[p for p, _, _ in KILLS])
def test_killed_add_leaves_none_or_all(board, batch, point, count, visible):
    before = _snapshot(board)
    killed = _cli("add", *batch, "-d", board, fault=point)
    assert (killed.returncode, killed.stdout, killed.stderr) == (137, "", "")
    after = _snapshot(board)
    kept = {name: digest for name, digest in before.items() if visible == 0 or name not in TABLE_FILES}
    assert {name: after[name] for name in kept} == kept  # nothing already written was lost or changed
    written = sorted(set(after) - set(before))  # the record files the killed add wrote
    assert [name[:14] for name in written] == [f"records/{seq:06d}" for seq in range(2, 2 + count)]
    assert len(accepted_files(board)) == 1 + visible  # unlisted files are leftovers: ignored, removed by the next add
    table = current_table(board)
    assert table["kappa"].tolist() == ["softmax", "entropy", "energy", "max_logit"][: 1 + visible]
    assert table["seq"].tolist() == list(range(1, 2 + visible))

    rerun = _cli("add", *batch, "-d", board)  # the same command again: what the killed add made visible is skipped
    assert rerun.returncode == 0, rerun.stderr
    if visible:
        assert re.fullmatch(
            rf"{re.escape(str(batch[0]))}: entry [0-9a-f]{{16}} \(model 'glyph_cnn', kappa entropy\) is already in "
            r"000002-[0-9a-f]{16}\.json with the same results; skipped\n(.*skipped\n){2}"
            rf"added 0 entries to {re.escape(str(board))} \(3 already there\): .*\n",
            rerun.stdout,
        ), rerun.stdout
        assert _table_lists_every_record(board)  # the stale table rewritten by the rerun
        assert _cli("add", _write(batch[0].with_name("new.json"), record(kappa="odin")), "-d", board).returncode == 0
    else:
        assert rerun.stdout.startswith(f"added 3 entries to {board}: ")
    final = _snapshot(board)
    assert sorted(n for n in final if n.startswith("records/")) == [
        f"records/{n}" for n in accepted_files(board)
    ]  # no leftovers
    assert current_table(board)["kappa"].tolist()[:4] == ["softmax", "entropy", "energy", "max_logit"]
    assert (
        _cli("show", "-d", board)
        .stdout.splitlines()[0]
        .endswith(f"table current (unreleased): {len(accepted_files(board))} entries")
    )


# ---------------------------------------------------------------- disk full (ENOSPC) at each step

FULL = [
    ("add:after-stage", 0, r"\S+/records/000002-[0-9a-f]{16}\.json: No space left on device"),
    ("add:before-commit", 0, r"\S+/index\.txt: No space left on device"),
    (
        "add:after-commit",
        3,
        r"the records are added, but the table could not be written \(No space left on device\); "
        r"the next add rewrites it",
    ),
    (
        "table:after-csv",
        3,
        r"the records are added, but the table could not be written \(No space left on device\); "
        r"the next add rewrites it",
    ),
]


@pytest.mark.parametrize(("point", "visible", "message"), FULL, ids=[p for p, _, _ in FULL])
def test_disk_full_during_add(board, batch, point, visible, message):
    before = _snapshot(board)
    _one_line_error(_cli("add", *batch, "-d", board, fault=f"{point}=ENOSPC"), message, 1 if visible == 0 else 2)
    after = _snapshot(board)
    if visible == 0:
        assert after == before  # rolled back: not even a leftover
    else:
        assert {n: after[n] for n in before if n not in TABLE_FILES} == {
            n: d for n, d in before.items() if n not in TABLE_FILES
        }
        assert set(after) - set(before) == {f"records/{n}" for n in accepted_files(board)[1:]}
    assert len(current_table(board)) == 1 + visible


def test_disk_full_during_release_leaves_no_half_release(board, batch):
    _cli("add", batch[0], "-d", board)
    before = _snapshot(board)
    _one_line_error(
        _cli("release", "-d", board, fault="table:after-csv=ENOSPC"),
        r"\S+/releases/\.v2\.partial/table\.parquet: No space left on device",
        1,
    )
    assert _snapshot(board) == before
    assert sorted(p.name for p in (board / "releases").iterdir()) == ["v1"]
    assert _cli("release", "-d", board).stdout == "released v2: 2 entries, 1 new\n"


# ---------------------------------------------------------------- unwritable paths


def _under_a_file(tmp_path: Path) -> Path:
    blocker = tmp_path / "plain-file"
    blocker.write_bytes(b"not a folder\n")
    return blocker


@pytest.mark.parametrize("command", ["init", "add", "site"])
def test_unwritable_path(tmp_path, batch, command):
    blocker = _under_a_file(tmp_path)
    target = blocker / "board"
    args = {
        "init": ["init", "--record", batch[0], "-d", target],
        "add": ["add", *batch, "--init", "-d", target],
        "site": ["site", target, "-d", tmp_path / "nothing"],
    }[command]
    if command == "site":
        init_leaderboard(tmp_path / "nothing", GLYPHS)
    before = _snapshot(tmp_path)
    _one_line_error(_cli(*args), rf"{re.escape(str(target))}\S*: Not a directory", 1)
    assert _snapshot(tmp_path) == before
    assert blocker.read_bytes() == b"not a folder\n"


# ---------------------------------------------------------------- bad files: the leaderboard's own and submitted ones


def _corrupt_config(board: Path, tmp_path: Path) -> list:
    (board / "leaderboard.json").write_bytes(b'{"format_version": 1, "benchmark": ')
    return ["show", "-d", board]


def _config_field(board: Path, tmp_path: Path) -> list:
    config = json.loads((board / "leaderboard.json").read_text())
    (board / "leaderboard.json").write_text(json.dumps({**config, "num_levels": "11"}))
    return ["add", _write(tmp_path / "r.json", record(kappa="entropy")), "-d", board]


def _deep_config(board: Path, tmp_path: Path) -> list:
    (board / "leaderboard.json").write_bytes(b"[" * 100_000 + b"]" * 100_000)
    return ["show", "-d", board]


def _corrupt_index(board: Path, tmp_path: Path) -> list:
    (board / "index.txt").write_text((board / "index.txt").read_text() + "../../etc/passwd\n")
    return ["release", "-d", board]


def _corrupt_release(board: Path, tmp_path: Path) -> list:
    path = board / "releases" / "v1" / "release.json"
    path.chmod(0o644)
    path.write_text('{"version": 1')
    return ["publish", "cood/faults-corrupt-release", "-d", board]


def _deep_record(board: Path, tmp_path: Path) -> list:
    path = tmp_path / "deep.json"
    path.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    return ["add", path, "-d", board]


def _nested_field(board: Path, tmp_path: Path) -> list:
    bad = record(kappa="entropy")
    for _ in range(20):
        bad["model"]["preprocessing"] = {"inner": bad["model"]["preprocessing"]}
    return ["add", _write(tmp_path / "nested.json", bad), "-d", board]


def _huge_record(board: Path, tmp_path: Path) -> list:
    bad = record(kappa="entropy")
    bad["timings"] = {"log": "x" * (1 << 20)}
    return ["add", _write(tmp_path / "huge.json", bad), "-d", board]


def _named(model: str = "glyph_cnn", kappa: str = "entropy"):
    def setup(board: Path, tmp_path: Path) -> list:
        return [
            "add",
            _write(tmp_path / "named.json", record(model=model, kappa=kappa, weights="33" * 32)),
            "-d",
            board,
        ]

    return setup


BAD_FILES = [
    (
        "corrupt config",
        _corrupt_config,
        r"\S+/board/leaderboard\.json: malformed JSON: Expecting value: line 1 column 36 \(char 35\)",
    ),
    ("config field", _config_field, r"\S+/board/leaderboard\.json: num_levels: must be an integer, got str"),
    ("deep config", _deep_config, r"\S+/board/leaderboard\.json: JSON nested deeper than 16 levels"),
    (
        "corrupt index",
        _corrupt_index,
        r"\S+/board/index\.txt: line 2: not the name of record file 2: '\.\./\.\./etc/passwd'",
    ),
    ("corrupt release", _corrupt_release, r"\S+/releases/v1/release\.json: malformed JSON: .+"),
    ("deep record", _deep_record, r"\S+/deep\.json: JSON nested deeper than 16 levels"),
    ("nested field", _nested_field, r"\S+/nested\.json: JSON nested deeper than 16 levels"),
    ("huge record", _huge_record, r"\S+/huge\.json: over the size limit of 1,048,576 bytes"),
    ("long model name", _named(model="é" * 101), r"\S+/named\.json: model\.name: longer than 200 bytes: 'é{40}'\.\.\."),
    (
        "model name with a path",
        _named(model="../../x"),
        r"\S+/named\.json: model\.name: contains a path separator \('/'\): '\.\./\.\./x'",
    ),
    (
        "model name with a newline",
        _named(model="a\nb"),
        r"\S+/named\.json: model\.name: contains a control character \('\\n'\): 'a\\nb'",
    ),
    ("long kappa name", _named(kappa="k" * 201), r"\S+/named\.json: kappa\.name: longer than 200 bytes: 'k{40}'\.\.\."),
]


@pytest.mark.parametrize(("setup", "message"), [(s, m) for _, s, m in BAD_FILES], ids=[n for n, _, _ in BAD_FILES])
def test_bad_file_is_one_line_and_changes_nothing(board, tmp_path, setup, message):
    args = setup(board, tmp_path)
    before = _snapshot(board)
    _one_line_error(_cli(*args), message)
    assert _snapshot(board) == before


# ---------------------------------------------------------------- publish: the reply is lost, the rerun succeeds


@pytest.mark.parametrize("point", ["publish:after-upload", "publish:after-tag"])
def test_publish_rerun_after_lost_reply(board, hub_server, point):
    repo = f"cood/faults-{point.split(':')[1]}"
    before = _snapshot(board)
    killed = _cli("publish", repo, "-d", board, "--no-space", fault=point)
    assert (killed.returncode, killed.stdout, killed.stderr) == (137, "", "")
    api = HfApi(endpoint=hub_server)
    tags = {ref.name: ref.target_commit for ref in api.list_repo_refs(repo, repo_type="dataset").tags}
    assert set(tags) == ({"v1"} if point == "publish:after-tag" else set())
    rerun = _cli("publish", repo, "-d", board, "--no-space")
    assert rerun.returncode == 0, rerun.stderr
    tagged = {ref.name: ref.target_commit for ref in api.list_repo_refs(repo, repo_type="dataset").tags}
    if tags:
        assert rerun.stdout == f"v1 was already published to {repo} (commit {tags['v1']}); nothing to upload\n"
        assert tagged == tags
    else:
        assert rerun.stdout == f"published v1 to {repo} (commit {tagged['v1']})\n"
    assert sorted(api.list_repo_files(repo, repo_type="dataset", revision="v1")) == [
        ".gitattributes",
        "CHANGELOG.md",
        "README.md",
        "records/records.jsonl",
        "release.json",
        "results/table.csv",
        "results/table.parquet",
    ]
    assert _snapshot(board) == before


def test_publish_reply_lost_after_the_tag_is_set(board, hub_server, monkeypatch):
    repo = "cood/faults-lost-reply"
    real = HfApi.create_tag

    def tag_then_hang_up(self, *args, **kwargs):
        real(self, *args, **kwargs)
        raise ConnectionResetError(104, "Connection reset by peer")

    before = _snapshot(board)
    monkeypatch.setattr(HfApi, "create_tag", tag_then_hang_up)
    with pytest.raises(
        LeaderboardError,
        match=rf"publishing to {repo} failed: ConnectionResetError: \[Errno 104\] Connection reset by peer",
    ):
        publish(board, repo, endpoint=hub_server)
    monkeypatch.undo()
    [tag] = HfApi(endpoint=hub_server).list_repo_refs(repo, repo_type="dataset").tags
    assert publish(board, repo, endpoint=hub_server) == {
        "repo_id": repo,
        "tag": "v1",
        "commit": tag.target_commit,
        "uploaded": False,
    }
    assert _snapshot(board) == before
