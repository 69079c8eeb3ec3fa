"""The metrics' names on a board: records made before the OOD-positive FPRs and the classifier's multi-class NLL and
Brier existed are added and shown beside records with them; show, the CSV and the site carry the new names."""

from __future__ import annotations

import json
from html import unescape

import pandas as pd
import pytest
from typer.testing import CliRunner

from lb_boards import MULTICLASS, harness_record
from lb_records import record
from leaderboard.cli import app
from leaderboard.site import page_name
from leaderboard.table import CSV

runner = CliRunner()


def test_records_without_the_new_metrics_are_added_and_shown_beside_records_with_them(tmp_path):
    old = record(model="older", weights="33" * 32)  # as the previous harness wrote it
    assert "fpr_at_95_tpr_ood" not in old["levels"][0] and "nll_multiclass" not in old["id"]
    new = harness_record(record(model="newer", weights="44" * 32))
    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "new.json").write_text(json.dumps(new))
    board, site = tmp_path / "b", tmp_path / "site"
    for args in (
        ["init", "-d", str(board), "--record", str(tmp_path / "old.json")],
        ["add", str(tmp_path / "old.json"), "-d", str(board)],
        ["add", str(tmp_path / "new.json"), "-d", str(board)],
        ["site", str(site), "-d", str(board)],
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, (args, result.output)
    shown = runner.invoke(app, ["show", "-d", str(board), "--sort", "fpr_at_95_tpr_ood"])
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    header = next(line for line in lines if line.startswith("rank"))
    assert header.split()[-4:] == ["mean", "fpr@95", "(OOD+)", "flag"]
    rows = {cells[1]: cells for cells in map(str.split, lines) if cells and cells[0].isdigit()}
    assert rows["newer"][-1] == "0.2500" and rows["older"][-1] == "-"  # levels' 0.2 .. 0.3: mean 0.25; blank

    table = pd.read_csv(board / CSV).set_index("model")
    for column, value in (
        ("mean_fpr_at_95_tpr", 0.35),
        ("mean_fpr_at_95_tpr_ood", 0.25),
        ("mean_fpr_at_99_tpr_ood", 0.45),
        ("id_nll_multiclass", MULTICLASS["nll_multiclass"]),
        ("id_brier_multiclass", MULTICLASS["brier_multiclass"]),
    ):
        assert table.loc["newer", column] == pytest.approx(value), column
        assert column == "mean_fpr_at_95_tpr" or pd.isna(table.loc["older", column]), column

    index = unescape((site / "index.html").read_text())
    assert ">mean fpr@95 (ID+)</th>" in index and ">mean fpr@95 (OOD+)</th>" in index
    assert 'title="fpr@95 (OOD+), mean over the levels: fpr_at_95_tpr_ood: OOD positive' in index
    page = (site / "models" / page_name("newer")).read_text()
    assert "<th>nll (multi-class)</th><th>brier (multi-class)</th>" in page and "<td>0.1312</td>" in page
    assert "<th>fpr@95 (OOD+)</th>" in page  # the per-level table
    older = (site / "models" / page_name("older")).read_text()
    assert "<th>fpr@95 (ID+)</th>" in older and "(OOD+)" not in older and "multi-class" not in older
