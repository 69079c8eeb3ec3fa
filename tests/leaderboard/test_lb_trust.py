"""What a leaderboard trusts: every CSV the project writes opens in a spreadsheet as data."""

from __future__ import annotations

import csv
import io

import numpy as np
import pandas as pd
import pytest

from lb_records import record
from leaderboard.csvsafe import csv_bytes, safe_cell
from leaderboard.site import build_site
from leaderboard.store import add_records, current_table
from leaderboard.table import CSV

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
