"""The severity rule is part of what a record is: a record names it (``severity_rule``) and its levels' real window
percentiles (``window_percentile``), both optional; the entry id holds the rule only where it is not the canonical
one, so every entry id made before it is unchanged and two rules give two entries on one board."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import jsonschema
import pandas as pd
import pytest

from harness.method.severity_names import declared
from lb_records import record
from leaderboard.errors import LeaderboardError
from leaderboard.record import CANONICAL_SEVERITY_RULE, SCHEMA_FILE
from leaderboard.schema import entry_id, validate_record
from leaderboard.site import build_site
from leaderboard.store import add_records, current_table
from leaderboard.table import PARQUET, read_table
from leaderboard.views import format_rows, rule_lines, select

V1_RECORD = Path(__file__).parent / "data" / "record_v1.json"
STARTS = [0, 1, 3, 4, 5, 7, 8, 9, 11, 12, 13]  # integer window starts of 11 levels among N = 14 windows


def ruled(rule: str | None, starts: list[int] = STARTS, windows: int = 14, **kwargs) -> dict:
    """A harness record whose levels' windows started at ``starts`` among ``windows`` windows by ``rule``."""
    made = record(**kwargs)
    if rule is not None:
        made["severity_rule"] = rule
        for level, start in zip(made["levels"], starts):
            level["window_percentile"] = start / (windows - 1)
    return made


def test_the_canonical_rule_is_the_harness_default():
    severity = pytest.importorskip("harness.method.severity")
    assert CANONICAL_SEVERITY_RULE == severity.DEFAULT_RULE == "integer"


def test_entry_ids_made_before_the_rule_are_unchanged():
    old = record()
    assert "severity_rule" not in old
    assert entry_id(ruled("integer")) == entry_id(old)  # the canonical rule named: the same entry
    assert entry_id(ruled("original")) != entry_id(old)  # another rule: another entry
    v1 = json.loads(V1_RECORD.read_text())
    validate_record(v1)
    assert entry_id({**v1, "severity_rule": "integer"}) == entry_id(v1)


@pytest.mark.parametrize("rule", [None, "integer", "original"])
def test_records_with_and_without_the_fields_pass_the_validator_and_the_schema(rule):
    schema = json.loads(SCHEMA_FILE.read_text())
    made = ruled(rule)
    validate_record(made)
    jsonschema.validate(made, schema)
    assert ("window_percentile" in made["levels"][5]) == (rule is not None)


@pytest.mark.parametrize(
    "change,message,in_schema",
    [
        (lambda r: r.update(severity_rule="Float Rule"), "severity_rule: not a severity rule's name", True),
        (lambda r: r.update(severity_rule=None), "severity_rule: must be a non-empty string", True),
        (lambda r: r["levels"][3].update(window_percentile=1.5), r"levels\[3\]\.window_percentile: out of range", True),
        (lambda r: r["levels"][4].pop("window_percentile"), r"levels\[4\]: missing field 'window_percentile'", False),
        (lambda r: r["levels"][6].update(window_percentile=0.1), r"levels\[6\]\.window_percentile: decreases", False),
    ],
    ids=["rule-name", "rule-null", "out-of-range", "some-levels-only", "decreasing"],
)
def test_the_validator_refuses_bad_rule_fields(change, message, in_schema):
    made = copy.deepcopy(ruled("original"))
    change(made)
    with pytest.raises(LeaderboardError, match=message):
        validate_record(made)
    if in_schema:  # the other two are the validator's cross-level rules, which JSON Schema cannot say
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(made, json.loads(SCHEMA_FILE.read_text()))


def test_two_rules_are_two_entries_the_table_and_site_show_the_rule(tmp_path):
    board = tmp_path / "board"
    integer, original = ruled("integer"), ruled("original", aurocs=[round(0.94 - 0.02 * i, 6) for i in range(11)])
    ids = add_records(board, [integer, original], create=True)
    assert ids == [entry_id(integer), entry_id(original)] and len(set(ids)) == 2
    table = current_table(board)
    assert table["severity_rule"].tolist() == ["integer", "original"]
    assert table["kappa"].tolist() == ["softmax", "softmax"]
    shown = format_rows(select(table)).splitlines()
    assert [line.split()[2:4] for line in shown[2:4]] == [["softmax", "0.8100"], ["softmax", "[original]"]]
    assert shown[4:] == [f"[original]: the levels' windows start by {declared()[1]['original']}"]
    assert rule_lines(pd.Series(["integer", "wider", None])) == [
        "[wider]: the levels' windows start by the rule wider, which this board's build does not describe"
    ]
    build_site(table, tmp_path / "site", "current", board=board)
    index = (tmp_path / "site" / "index.html").read_text()
    assert index.count('"rule":"original"') == 1 and '"rule":"integer"' not in index  # the default goes unsaid
    [page] = (tmp_path / "site" / "models").glob("*.html")
    text = page.read_text()
    assert text.count("[original]</span>") == 2 and "severity rule original" in text  # its row, its section
    assert "<th>window percentile</th>" in text


def test_a_board_of_records_before_the_rule_shows_blanks(tmp_path):
    board = tmp_path / "board"
    add_records(board, [json.loads(V1_RECORD.read_text()), record(model="other", weights="22" * 32)], create=True)
    path = board / PARQUET
    table = read_table(path)
    assert table["severity_rule"].isna().all()
    table.drop(columns=["severity_rule"]).to_parquet(path, index=False)  # a table file written before the column
    again = read_table(path)
    assert again["severity_rule"].isna().all() and list(again.columns) == list(table.columns)
    assert all("[" not in line for line in format_rows(select(again)).splitlines())
    build_site(again, tmp_path / "site", "current", board=board)
    assert '"rule"' not in (tmp_path / "site" / "index.html").read_text()


@pytest.mark.browser
@pytest.mark.skipif(
    shutil.which("chromium") is None, reason="the browser tests need chromium (Debian: apt-get install chromium)"
)
def test_the_index_page_shows_a_rule_other_than_the_default_in_a_browser(tmp_path):
    from playwright.sync_api import sync_playwright

    board = tmp_path / "board"
    add_records(
        board, [ruled("integer", model="a_net"), ruled("original", model="b_net", weights="22" * 32)], create=True
    )
    build_site(current_table(board), tmp_path / "site", "current", board=board)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
        page = browser.new_page()
        page.goto((tmp_path / "site" / "index.html").as_uri())
        page.wait_for_function("!document.getElementById('leaderboard').dataset.pending")
        cells = page.eval_on_selector_all(
            "#leaderboard tbody tr", "rows => rows.map(r => [r.dataset.model, r.querySelector('td.kap').innerText])"
        )
        browser.close()
    assert sorted(cells) == [["a_net", "softmax"], ["b_net", "softmax [original]"]]
