"""What a leaderboard trusts: a name is never a path, every CSV the project writes opens in a spreadsheet as data,
and a record's attachments are only the drill-down's own files."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lb_boards import drilldown_record, png
from lb_records import record
from leaderboard import drilldown
from leaderboard.csvsafe import csv_bytes, safe_cell
from leaderboard.errors import LeaderboardError
from leaderboard.schema import validate_record
from leaderboard.site import build_site
from leaderboard.store import add_files, add_records, current_table
from leaderboard.table import CSV


def _snapshot(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


# names


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (".", "model.name: '.' is not a name"),
        ("..", "model.name: '..' is not a name"),
        ("a/b", "model.name: contains a path separator"),
        ("a\\b", "model.name: contains a path separator"),
        ("a\nb", "model.name: contains a control character"),
        ("a\x7fb", "model.name: contains a control character"),
    ],
)
def test_names_that_are_paths_are_refused(name, message):
    with pytest.raises(LeaderboardError, match="^" + re.escape(message)):
        validate_record(record(model=name))
    validate_record(record(model="...dots"))  # a name that only starts with dots is a name


# CSV


FORMULAS = ['=HYPERLINK(CONCAT("http:",CHAR(47),CHAR(47),"evil.example"),"x")', "@SUM(1+1)", "+1+1", "-2+3"]


def _cells(data: bytes) -> list[list[str]]:
    return list(csv.reader(io.StringIO(data.decode())))


def _no_formula(rows: list[list[str]]) -> None:
    for row in rows:
        for cell in row:
            if cell[:1] in ("=", "+", "-", "@", "\t", "\r"):
                float(cell)  # only a number may start so


def test_safe_cells_keep_numbers():
    assert [safe_cell(v) for v in ["=1", "@a", "+a", "-a", "\ta", "\ra", "a=1", "", -1.5, -2, None]] == [
        "'=1",
        "'@a",
        "'+a",
        "'-a",
        "'\ta",
        "'\ra",
        "a=1",
        "",
        -1.5,
        -2,
        None,
    ]
    frame = pd.DataFrame({"name": ["=cmd", "ok"], "score": [-0.5, 2.0], "n": pd.array([-3, None], dtype="Int64")})
    back = pd.read_csv(io.BytesIO(csv_bytes(frame)))
    assert back["name"].tolist() == ["'=cmd", "ok"] and back["score"].tolist() == [-0.5, 2.0]
    assert back["n"].tolist()[0] == -3


def test_the_table_and_the_sites_download_hold_no_formula(tmp_path):
    board = tmp_path / "b"
    records = [record(model=name, weights=f"{i:02d}" * 32) for i, name in enumerate(FORMULAS)]
    records[0]["id"]["avg_conf"] = -3.5  # a negative number stays a number
    add_records(board, records, create=True)
    build_site(current_table(board), tmp_path / "site", "current", board=board)
    for path in (board / CSV, tmp_path / "site" / "downloads" / "leaderboard.csv"):
        rows = _cells(path.read_bytes())
        _no_formula(rows)
        table = pd.read_csv(path)
        assert table["model"].tolist() == [f"'{name}" for name in FORMULAS]
        assert table["id_avg_conf"].tolist()[0] == -3.5


def test_the_harness_per_level_csv_holds_no_formula(tmp_path):
    outputs = pytest.importorskip("harness.outputs")
    from harness.method.evaluation import KappaResult
    from harness.method.severity import SeverityLevels

    base = record()
    levels = SeverityLevels(
        classes=np.array([[0, 1]] * 11),
        level_scores=np.linspace(-1.0, 0.0, 11),
        percentiles=np.linspace(0.0, 1.0, 11),
        starts=np.zeros(11, dtype=np.int64),
        class_scores=np.array([-1.0, -0.5]),
    )
    results = [KappaResult(kappa, levels, base["levels"], base["id"]) for kappa in ("@SUM(1+1)", "softmax")]
    paths = outputs.write_outputs(
        tmp_path / "run", "=HYPERLINK(1)", results, [base, base], ["n0", "n1"], base["benchmark"]
    )
    rows = _cells(paths["csv"].read_bytes())
    _no_formula(rows)
    table = pd.read_csv(paths["csv"])
    assert set(table["model name"]) == {"'=HYPERLINK(1)"}
    assert set(table["confidence function"]) == {"'@SUM(1+1)", "softmax"}
    assert table["level score"].tolist()[0] == -1.0  # numbers stay numbers


# attachments


def _run(tmp_path: Path) -> tuple[Path, dict]:
    run = tmp_path / "run"
    return run, drilldown_record(run)


def _thumbnail(rec: dict, name: str) -> dict:
    rec["per_class"]["levels"][0]["hardest"][0]["thumbnails"].append(name)
    return rec


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _extra(name: str, data: bytes | None = None):
    """A change that lists one more thumbnail, ``name`` (written into the run with ``data``)."""

    def change(run: Path, rec: dict) -> None:
        if data is not None:
            _write(run / name, data)
        _thumbnail(rec, name)

    return change


def _sidecar(name: str):
    return lambda run, rec: rec["per_class"].update(file=name)


def _not_parquet(run: Path, rec: dict) -> None:
    _write(run / "per_class" / "per_class.parquet", b"<html></html>")


def _link_to_hidden(run: Path, rec: dict) -> None:
    _write(run / ".secret" / "x.png", png((1, 2, 3)))
    os.symlink(run / ".secret" / "x.png", run / "link.png")
    _thumbnail(rec, "link.png")


HTML = b"<script>alert(1)</script>"
THUMB = "per_class.levels[0].hardest[0].thumbnails[2]"
REFUSED = {
    "git": (_extra(".git/config", b"[core]"), f"{THUMB}: names a hidden file or folder ('.git')"),
    "token": (_extra(".cache/huggingface/token", b"hf_x"), f"{THUMB}: names a hidden file or folder ('.cache')"),
    "hidden-file": (_extra("per_class/.t.png", png((0, 0, 0))), f"{THUMB}: names a hidden file or folder ('.t.png')"),
    "hidden-sidecar": (_sidecar(".per_class.parquet"), "per_class.file: names a hidden file or folder"),
    "absolute": (_extra("/etc/passwd"), f"{THUMB}: not a relative path"),
    "up": (_extra("../x.png"), f"{THUMB}: not a relative path"),
    "html": (_extra("x.html", HTML), "per_class names 'x.html', which is not a .png or .jpg or .jpeg file"),
    "html-as-png": (_extra("x.png", HTML), "per_class names x.png, which is not a PNG or JPEG image (by its first"),
    "not-parquet": (_not_parquet, "per_class names per_class/per_class.parquet, which is not a parquet file (no PAR1)"),
    "png-as-sidecar": (
        _sidecar("per_class/thumbnails/0-0.png"),
        "per_class names 'per_class/thumbnails/0-0.png', which is not a .parquet file",
    ),
    "link-to-hidden": (_link_to_hidden, "per_class names link.png, which leads to a hidden file"),
}


@pytest.mark.parametrize(("change", "message"), REFUSED.values(), ids=REFUSED.keys())
def test_add_takes_only_the_drill_downs_own_files(tmp_path, change, message):
    run, rec = _run(tmp_path)
    board = tmp_path / "b"
    add_records(board, [record(kappa="entropy")], create=True)
    before = _snapshot(board)
    change(run, rec)
    path = run / "records" / "softmax.json"
    _write(path, json.dumps(rec).encode())
    with pytest.raises(LeaderboardError) as error:
        add_files(board, [path])
    assert str(error.value).startswith(f"{path}: {message}"), error.value
    assert "\n" not in str(error.value)
    assert _snapshot(board) == before


def test_attachments_have_a_size_cap_per_file_and_per_record(tmp_path, monkeypatch):
    run, rec = _run(tmp_path)
    sizes = [p.stat().st_size for p in (run / "per_class").rglob("*") if p.is_file()]
    monkeypatch.setattr(drilldown, "MAX_FILE_BYTES", max(sizes) - 1)
    limit = f"{max(sizes) - 1:,}"
    with pytest.raises(
        LeaderboardError, match=rf"^record 1: per_class/per_class.parquet is over the size limit of {limit}"
    ):
        add_records(tmp_path / "b", [rec], create=True, folder=run)
    monkeypatch.setattr(drilldown, "MAX_FILE_BYTES", max(sizes))
    monkeypatch.setattr(drilldown, "MAX_RECORD_BYTES", sum(sizes) - 1)
    with pytest.raises(LeaderboardError, match="^record 1: the files per_class names are over the size limit of .*"):
        add_records(tmp_path / "b", [rec], create=True, folder=run)
    assert not (tmp_path / "b").exists()
    monkeypatch.setattr(drilldown, "MAX_RECORD_BYTES", sum(sizes))
    add_records(tmp_path / "b", [rec], create=True, folder=run)
    assert len(list((tmp_path / "b" / "attachments").rglob("*.png"))) == len(sizes) - 1


def test_the_site_never_publishes_a_hidden_file_or_another_type(tmp_path):
    run, rec = _run(tmp_path)
    board = tmp_path / "b"
    [key] = add_records(board, [rec], create=True, folder=run)
    # a board holding what an add took before these checks: a hidden file, an HTML page, a PNG that is not one
    stored = board / "records" / f"000001-{key}.json"
    old = json.loads(stored.read_text())
    hardest = old["per_class"]["levels"][0]["hardest"][0]["thumbnails"]
    hardest += [".git/config", "per_class/.token.png", "x.html", "fake.png"]
    stored.write_text(json.dumps(old))
    folder = drilldown.stored_folder(board, stored.name)
    _write(folder / ".git" / "config", b"[core]")
    _write(folder / "per_class" / ".token.png", png((0, 0, 0)))
    _write(folder / "x.html", b"<script>alert(1)</script>")
    _write(folder / "fake.png", b"<script>alert(1)</script>")
    out = tmp_path / "site"
    build_site(current_table(board), out, "current", board=board)
    published = [p.relative_to(out) for p in out.rglob("*") if p.is_file()]
    assert not [p for p in published if any(part.startswith(".") for part in p.parts)]
    assert not [p for p in published if p.name in ("x.html", "fake.png")]
    assert len([p for p in published if p.suffix == ".png"]) == 44  # the drill-down's own thumbnails
