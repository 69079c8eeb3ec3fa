"""``cood-harness submit --severity-rule``: a run with the original code's float rule, on a glyph benchmark whose
windows it starts one lower than the integer rule, reuses the scores of a run with the integer rule (the rule is
applied after scoring), writes records, ``per_level.csv`` and level manifests that name the rule and the windows' real
percentiles, and both runs' records are two entries of one leaderboard."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from dataset_builder.errors import BenchmarkError
from dataset_builder.glyphs.build import build
from dataset_builder.levels import LEVEL_COLUMNS, RULE_COLUMNS, read_level_table
from glyph_fixtures import CNN, TINY, built_once, session_folder
from harness.cli import app
from harness.method.severity_names import rules_described
from leaderboard.record import SCHEMA_VERSION
from leaderboard.schema import entry_id

POOL = {**TINY, "pool_size": 49}  # 49 OOD classes in windows of 36 (the ID classes): N = 14 windows
LEVELS = 8  # of 14 windows: level 5 starts at window 10 (integer) or 9 (float: int(5/7 * 14) = 9)
STARTS = {"integer": [0, 2, 4, 6, 8, 10, 12, 13], "original": [0, 2, 4, 6, 8, 9, 12, 13]}


def cli(module: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", f"from {module} import main; main()", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[Path, str]]:
    """Both rules' runs of the glyph CNN, the integer one first, sharing one score cache: rule -> (out, stdout)."""
    bench = built_once(
        session_folder(tmp_path_factory) / "rules" / "glyphs", lambda folder: build(folder, progress=False, **POOL)
    )
    folder = tmp_path_factory.mktemp("rules")
    common = ["--benchmark", bench, "--levels", LEVELS, "-k", "softmax", "--device", "cpu", "-q"]
    out = {}
    for rule in ("integer", "original"):
        done = cli(
            "harness.cli", "submit", CNN, *common, "--cache-dir", folder / "scores", "--out", folder / rule,
            *(["--severity-rule", rule] if rule != "integer" else []),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        out[rule] = (folder / rule, done.stdout)
    return out


def record(runs, rule: str) -> dict:
    return json.loads((runs[rule][0] / "records" / "softmax.json").read_text())


def test_the_help_names_the_option():
    done = CliRunner().invoke(app, ["submit", "--help"], prog_name="cood-harness", terminal_width=200)
    assert done.exit_code == 0 and "--severity-rule" in done.output
    assert f"How the levels' windows start: {rules_described()};" in " ".join(done.output.split())


def test_the_second_rule_reuses_the_scores(runs):
    scored = re.search(
        r"scored (\d+) shards \([\d,]+ images forwarded\); 0 shards from the score cache", runs["integer"][1]
    )
    assert scored is not None and int(scored.group(1)) > 0, runs["integer"][1]
    line = f"scored 0 shards (0 images forwarded); {scored.group(1)} shards from the score cache"
    assert line in runs["original"][1]


def test_the_records_name_the_rule_and_the_windows_real_percentiles(runs):
    integer, original = record(runs, "integer"), record(runs, "original")
    for rule, made in (("integer", integer), ("original", original)):
        assert made["severity_rule"] == rule and made["schema_version"] == SCHEMA_VERSION
        assert [level["window_percentile"] for level in made["levels"]] == [s / 13 for s in STARTS[rule]]
        assert [level["percentile"] for level in made["levels"]] == pytest.approx([i / 7 for i in range(LEVELS)])
    assert "the original code's float window starts" in original["metric_definitions"]["severity_levels"]
    assert integer["metric_definitions"]["severity_levels"].endswith("integer window starts")
    assert [a == b for a, b in zip(integer["levels"], original["levels"])] == [True] * 5 + [False] + [True] * 2
    assert original["levels"][5]["level_score"] < integer["levels"][5]["level_score"]  # one window easier


def test_the_level_manifests_and_the_csv_name_the_rule(runs):
    for rule in ("integer", "original"):
        out = runs[rule][0]
        path = out / "levels" / "glyph_cnn__softmax.parquet"
        table = read_level_table(path)  # as `cood-dataset levels` reads it
        assert list(table.columns) == LEVEL_COLUMNS + RULE_COLUMNS and set(table["severity_rule"]) == {rule}
        by_level = table.groupby("level")["window_percentile"].first().tolist()
        assert by_level == [s / 13 for s in STARTS[rule]]
        scores = table.drop_duplicates("class_index").set_index("class_index")["class_score"].sort_index()
        assert len(scores) == 49
        order = scores.index.to_numpy()[np.argsort(scores.to_numpy(), kind="stable")]  # ties by class index
        start = STARTS[rule][5]
        assert set(table[table["level"] == 5]["class_index"]) == set(order[start : start + 36].tolist())
        csv = pd.read_csv(out / "per_level.csv")
        assert set(csv["severity rule"]) == {rule}
        assert csv["window percentile"].tolist() == pytest.approx([s / 13 for s in STARTS[rule]])


def test_a_level_manifest_from_before_the_rule_still_reads(runs, tmp_path):
    table = read_level_table(runs["integer"][0] / "levels" / "glyph_cnn__softmax.parquet")
    table[LEVEL_COLUMNS].to_parquet(tmp_path / "old.parquet", index=False)
    assert read_level_table(tmp_path / "old.parquet").equals(table[LEVEL_COLUMNS])
    table[[*LEVEL_COLUMNS, "severity_rule"]].to_parquet(tmp_path / "odd.parquet", index=False)
    with pytest.raises(BenchmarkError, match="is not a level manifest"):
        read_level_table(tmp_path / "odd.parquet")


def test_two_rules_are_two_entries_on_one_board(runs, tmp_path):
    paths = [runs[rule][0] / "records" / "softmax.json" for rule in ("integer", "original")]
    board, site = tmp_path / "board", tmp_path / "site"
    added = cli("leaderboard.cli", "add", *paths, "--dir", board, "--init")
    assert added.returncode == 0, added.stderr
    integer, original = record(runs, "integer"), record(runs, "original")
    unnamed = {k: v for k, v in integer.items() if k != "severity_rule"}
    assert entry_id(integer) == entry_id(unnamed) != entry_id(original)  # the canonical rule keeps the id it had
    assert added.stdout.strip().endswith(f"added 2 entries to {board}: {entry_id(integer)}, {entry_id(original)}")
    shown = cli("leaderboard.cli", "show", "--dir", board)
    body = shown.stdout.splitlines()[3:5]  # the two entries' rows (a legend line may follow)
    at = shown.stdout.splitlines()[1].split().index("model")  # after rank (and ranks, with per-image scores)
    assert sorted(line.split()[at : at + 2] for line in body) == [["glyph_cnn", "softmax"], ["glyph_cnn", "softmax"]]
    assert sum(line.split()[at + 2] == "[original]" for line in body) == 1
    assert pd.read_parquet(board / "table.parquet")["severity_rule"].tolist() == ["integer", "original"]
    assert cli("leaderboard.cli", "site", site, "--dir", board).returncode == 0
    assert (site / "index.html").read_text().count('"rule":"original"') == 1


@pytest.mark.slow  # the embedded benchmark: the quick loop (-m 'not slow') leaves it to CI
def test_the_embedded_benchmark_with_the_float_rule(default_glyphs, tmp_path):
    """The embedded glyphs: 400 OOD classes in windows of 36 give N = 365 windows, where 74 levels start level 39 at
    window 194 by the float rule and 195 by the integer one."""
    # the session's score cache: the example CNN's logits on these images, kept by whichever of its runs came first
    done = cli(
        "harness.cli", "submit", CNN, "--benchmark", "glyphs", "--levels", 74, "--severity-rule", "original",
        "-k", "softmax", "--device", "cpu", "-q", "--out", tmp_path / "out",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    made = json.loads((tmp_path / "out" / "records" / "softmax.json").read_text())
    assert made["severity_rule"] == "original" and made["num_levels"] == 74
    assert made["levels"][39]["window_percentile"] == 194 / 364 and made["levels"][38]["window_percentile"] == 190 / 364
    assert made["levels"][39]["percentile"] == pytest.approx(39 / 73)
    table = pd.read_parquet(tmp_path / "out" / "levels" / "glyph_cnn__softmax.parquet")
    scores = table.drop_duplicates("class_index").set_index("class_index")["class_score"].sort_index()
    order = scores.index.to_numpy()[np.argsort(scores.to_numpy(), kind="stable")]
    assert set(table[table["level"] == 39]["class_index"]) == set(order[194:230].tolist())
