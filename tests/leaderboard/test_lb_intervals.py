"""Intervals on the board: records that carry them (validated, in the JSON Schema), the table's low/high columns,
``show``'s marks where adjacent rows are not separable, the site's error bars and [low, high] cells; a version-1
record and the paper's entries show "no interval"."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from lb_records import interval_records, record, with_intervals
from leaderboard import record as shape
from leaderboard.cli import app
from leaderboard.errors import LeaderboardError
from leaderboard.pairs import board_pairs
from leaderboard.schema import validate_record
from leaderboard.site import build_site, page_name
from leaderboard.store import add_records, current_table
from leaderboard.table import record_row, table_columns
from leaderboard.views import format_rows, select

V1_RECORD = Path(__file__).with_name("data") / "record_v1.json"
runner = CliRunner()


def test_a_record_with_intervals_is_valid_to_the_validator_and_the_json_schema():
    rec = with_intervals(record())
    validate_record(rec)
    check = jsonschema.Draft202012Validator(shape.json_schema())
    check.validate(rec)
    assert not check.is_valid({**rec, "summary": {**rec["summary"], "mean_ood_auroc_low": 1.5}})
    assert not check.is_valid({**rec, "intervals": {"confidence": 0.95}})
    validate_record({**rec, "id": {**rec["id"], "auroc": None, "auroc_low": None, "auroc_high": None}})


@pytest.mark.parametrize(
    "path, value, message",
    [
        ("levels.3.ood_auroc_low", 0.95, r"levels\[3\].ood_auroc_low: \[0.95, 0.9\] does not hold ood_auroc 0.89"),
        ("id.acc_high", None, r"id.acc_low: acc's interval needs both ends and the value"),
        ("summary.mean_ood_auroc_high", 1.2, r"summary.mean_ood_auroc_high: out of range \[0, 1\]: 1.2"),
        ("intervals", None, r"record: missing field 'intervals' \(it says how the intervals were computed\)"),
        ("intervals.confidence", "95%", r"intervals.confidence: must be a number, got str"),
    ],
)
def test_the_validator_refuses_a_bad_interval(path, value, message):
    rec = with_intervals(record())
    *parents, last = path.split(".")
    target = rec
    for key in parents:
        target = target[int(key)] if isinstance(target, list) else target[key]
    if value is None and last == "intervals":
        del target[last]
    else:
        target[last] = value
    with pytest.raises(LeaderboardError, match=f"^{message}$"):
        validate_record(rec)


def test_the_table_has_low_and_high_columns_blank_for_a_v1_record_and_a_paper_entry(paper_table):
    from leaderboard.paper import paper_records

    columns = table_columns(11)
    for name in ("id_acc", "id_auroc", "mean_ood_auroc"):
        assert columns[columns.index(name) + 1 : columns.index(name) + 3] == [f"{name}_low", f"{name}_high"]
    row = record_row(with_intervals(record()), 1, "records/a.json", "00" * 32)
    assert row["mean_ood_auroc_low"] == pytest.approx(row["mean_ood_auroc"] - 0.01)
    assert row["id_acc_high"] == pytest.approx(0.82)
    old = json.loads(V1_RECORD.read_text())
    validate_record(old)
    paper = paper_records(paper_table.head(11))[0]
    validate_record(paper)
    assert "intervals" not in paper and "ood_auroc_low" not in paper["levels"][0] and "acc_low" not in paper["id"]
    for rec in (old, paper):
        row = record_row(rec, 1, "records/old.json", "00" * 32)
        assert all(row[f"{name}_{side}"] is None for name in ("id_acc", "mean_ood_auroc") for side in ("low", "high"))


def interval_board(folder: Path, halves: dict[str, float | None]) -> Path:
    add_records(folder / "board", interval_records(halves), create=True)
    return folder / "board"


def test_show_marks_no_row_by_overlapping_intervals_without_per_image_scores(tmp_path):
    board = interval_board(tmp_path, {"first": 0.02, "second": 0.02, "third": 0.005, "fourth": None})
    table = current_table(board)
    rows = select(table)
    assert rows["model"].tolist() == ["first", "second", "third", "fourth"]
    # first 0.80 [0.78, 0.82], second 0.79 [0.77, 0.81] overlap, but only the paired test marks a row, and it needs
    # the per-image scores these records do not keep
    lines = format_rows(rows, pairs=board_pairs(board, rows["record_file"].tolist())).splitlines()
    assert [line.split()[0] for line in lines[2:6]] == ["1", "2", "3", "4"]
    assert lines[0].split()[:2] == ["rank", "model"]  # no ranks column
    assert (
        lines[-1] == "no \u2248 marks or rank ranges: no entry shown has per-image scores (the paired test needs them)"
    )
    result = runner.invoke(app, ["show", "-d", str(board)])
    assert result.exit_code == 0, result.output
    assert "\u2248 marks" in result.output and re.search(r"^\s*2\s+second", result.output, re.M)


def _site_data(page: str, element: str) -> dict:
    found = re.search(rf'<script type="application/json" id="{element}">(.*?)</script>', page, re.S)
    return json.loads(found.group(1))


def test_the_site_shows_error_bars_intervals_and_no_interval(tmp_path):
    board = interval_board(tmp_path, {"first": 0.02, "second": 0.02, "third": 0.005, "fourth": None})
    out = tmp_path / "site"
    build_site(current_table(board), out, "v1", board=board)
    recs = [json.loads(path.read_text()) for path in (board / "records").rglob("*.json")]
    rec = next(r for r in recs if r["model"]["name"] == "first")
    first = (out / "models" / page_name(rec["model"]["name"])).read_text()
    curve = _site_data(first, "model-data")["curves"][0]
    assert curve["lo"] == [level["ood_auroc_low"] for level in rec["levels"]]
    assert curve["hi"] == [level["ood_auroc_high"] for level in rec["levels"]]
    assert f'<span class="ci">[{rec["summary"]["mean_ood_auroc_low"]:.4f}, ' in first
    assert f'{rec["levels"][0]["ood_auroc"]:.4f} <span class="ci">[{rec["levels"][0]["ood_auroc_low"]:.4f}, ' in first
    fourth = (out / "models" / page_name("fourth")).read_text()
    assert "lo" not in _site_data(fourth, "model-data")["curves"][0]
    assert '<span class="ci none">no interval</span>' in fourth and '<span class="ci">' not in fourth
    index = _site_data((out / "index.html").read_text(), "board-data")
    entries = {m["m"]: m["e"][0] for m in index["models"]}
    assert entries["first"]["ci"]["mean"] == pytest.approx([0.78, 0.82])
    assert entries["first"]["ci"]["acc"] == pytest.approx([0.79, 0.83])
    assert "ci" not in entries["fourth"]
    legend = " ".join((out / "index.html").read_text().split())  # this board keeps no per-image scores
    assert "no entry of this table keeps per-image scores, so no row is marked" in legend


def test_the_paper_entries_show_no_interval(paper_board, tmp_path):
    table = current_table(paper_board).head(3)
    out = tmp_path / "site"
    build_site(table, out, "v1", board=paper_board)
    page = (out / "models" / page_name(table["model"].iloc[0])).read_text()
    assert '<span class="ci none">no interval</span>' in page and '<span class="ci">' not in page
    assert all("lo" not in curve for curve in _site_data(page, "model-data")["curves"])
    assert all(
        "ci" not in e for m in _site_data((out / "index.html").read_text(), "board-data")["models"] for e in m["e"]
    )


def test_a_version_1_record_shows_no_interval_on_the_site(tmp_path):
    old = json.loads(V1_RECORD.read_text())
    add_records(tmp_path / "b", [old], create=True)
    out = tmp_path / "site"
    build_site(current_table(tmp_path / "b"), out, "v1", board=tmp_path / "b")
    page = (out / "models" / page_name(old["model"]["name"])).read_text()
    assert '<span class="ci none">no interval</span>' in page and '<span class="ci">' not in page
    assert "lo" not in _site_data(page, "model-data")["curves"][0]
