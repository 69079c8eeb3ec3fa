"""The metric registry (harness/method/registry.py): a metric declared once, in one file, reaches the record, the JSON
Schema, the validator, the table, per_level.csv and the site; and a board of records written before a metric existed
keeps working (the metric blank for them, never a KeyError)."""

from __future__ import annotations

import copy
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from dataset_builder.errors import CoodError
from harness.method import registry
from harness.method.metrics import fpr_at_tpr, level_metrics
from harness.method.registry import Metric, register_metric, unregister_metric
from lb_records import record
from leaderboard import record as shape
from leaderboard.cli import app
from leaderboard.errors import LeaderboardError
from leaderboard.schema import validate_record
from leaderboard.site import build_site, page_name
from leaderboard.store import add_records, current_table
from leaderboard.table import CSV, PARQUET, build_table, read_table, record_row

V1_RECORD = Path(__file__).with_name("data") / "record_v1.json"  # a record as the leaderboard wrote them before v2
runner = CliRunner()


def _median_gap(d) -> float:
    return float(np.median(d.id_scores) - np.median(d.ood_scores))


# the one declaration a new metric needs (a plugin's or a test's module, like this one: namespaced, x_<plugin>_<name>)
MEDIAN_GAP = Metric(
    "x_lab_median_gap",
    "level",
    _median_gap,
    higher_is_better=True,
    label="median gap",
    definition="median ID score minus median OOD score",
    unit=False,
    aggregate="mean",
)


PAPER_COLUMNS = [  # per_level.csv's first columns, the paper's
    *("severity level", "percentile", "ood-auroc", "ood_avg_conf", "id-acc", "id-auroc", "id_avg_conf"),
    *("model name", "confidence function", "model name - confidence function"),
]
PAPER_METRICS = {"level": ("ood_auroc", "ood_avg_conf"), "id": ("acc", "auroc", "avg_conf")}  # in those columns


def later_columns() -> list[str]:
    """per_level.csv's columns after the paper's, by the order rule: every other level metric under its label (a
    test's after the built-in ones), the level score, the window percentile, the severity rule, every other ID metric
    as ``id-<label>``, then the ends of the level metrics' intervals."""
    levels, ids = (
        [m for m in registry.registered(scope) if m.name not in PAPER_METRICS[scope]] for scope in ("level", "id")
    )
    ends = [f"{m.label} {side}" for m in registry.registered("level") if m.bounds for side in ("low", "high")]
    return [
        *(m.label for m in levels),
        *("level score", "window percentile", "severity rule"),
        *(f"id-{m.label}" for m in ids),
        *ends,
    ]


@pytest.fixture
def median_gap():
    register_metric(MEDIAN_GAP)
    yield MEDIAN_GAP
    unregister_metric(MEDIAN_GAP)


def _with_gap(rec: dict, base: float = 1.0) -> dict:
    rec = copy.deepcopy(rec)
    for i, level in enumerate(rec["levels"]):
        level["x_lab_median_gap"] = base - 0.1 * i
    return rec


def test_fpr_at_99_tpr_is_a_level_metric():
    id_scores = np.arange(100, dtype=float)  # keep 99% of 100 = 99 positives: threshold 1.0
    ood_scores = np.array([0.5, 1.0, 2.0, 50.0, -3.0])  # accepted: 1.0, 2.0, 50.0
    metrics = level_metrics(id_scores, ood_scores)
    assert metrics["fpr_at_99_tpr"] == 0.6 == fpr_at_tpr(id_scores, ood_scores, 0.99)
    assert metrics["fpr_at_95_tpr"] == 0.2  # keep 95 positives: threshold 5.0, accepted: 50.0
    declared = registry.registered("level")
    ends = [end for m in declared if m.bounds for end in m.bounds]
    assert list(metrics) == [*(m.name for m in declared), *ends]  # each level metric in declaration order, then ends
    declared = {m.name: m for m in registry.registered("level")}["fpr_at_99_tpr"]
    assert (declared.higher_is_better, declared.aggregate, declared.table_column, declared.since) == (
        False,
        "mean",
        "mean_fpr_at_99_tpr",
        2,
    )


def test_a_registered_metric_reaches_the_record_schema_table_and_site(median_gap, tmp_path):
    id_scores, ood_scores = np.array([3.0, 4.0, 5.0]), np.array([1.0, 2.0, 6.0])
    assert level_metrics(id_scores, ood_scores)["x_lab_median_gap"] == 2.0  # computed by the harness's method

    rec = _with_gap(record())
    parts = {k: v for k, v in rec.items() if k not in ("schema_version", "num_levels")}
    built = shape.make_record(**parts)  # the record
    assert [level["x_lab_median_gap"] for level in built["levels"]][:3] == [1.0, 0.9, 0.8]
    validate_record(built)
    unmeasured = shape.make_record(**{k: v for k, v in record().items() if k not in ("schema_version", "num_levels")})
    assert "x_lab_median_gap" not in unmeasured["levels"][0]  # a maker that does not measure it leaves it out, not null
    validate_record(unmeasured)
    with pytest.raises(LeaderboardError, match=r"^levels\[0\]\.x_lab_median_gap: must be a number, got str$"):
        validate_record({**built, "levels": [{**built["levels"][0], "x_lab_median_gap": "x"}, *built["levels"][1:]]})

    schema = shape.json_schema()  # the schema
    level_schema = schema["properties"]["levels"]["items"]
    assert level_schema["properties"]["x_lab_median_gap"]["anyOf"][0] == {
        "type": "number",
        "minimum": -1e300,
        "maximum": 1e300,
    }
    assert "x_lab_median_gap" not in level_schema["required"]  # records made before it lack it
    jsonschema.Draft202012Validator(schema).validate(built)

    row = record_row(built, 1, "records/a.json", "00" * 32)  # the table
    assert row["mean_x_lab_median_gap"] == pytest.approx(0.5)  # mean of 1.0 .. 0.0
    table = build_table([row], built["num_levels"])
    assert table["mean_x_lab_median_gap"].dtype == "float64"

    board = tmp_path / "b"  # the site
    add_records(board, [built, record(model="older", weights="33" * 32)], create=True)
    out = tmp_path / "site"
    build_site(current_table(board), out, "current", board=board)
    html = (out / "index.html").read_text()
    data = json.loads(re.search(r'id="board-data">(.*?)</script>', html).group(1))
    assert (
        "x_lab_median_gap" in data["cols"]
        and 'data-sort="x_lab_median_gap"' in html
        and ">mean median gap</th>" in html
    )
    gaps = {m["m"]: m["e"][0].get("x_lab_median_gap") for m in data["models"]}
    assert gaps["glyph_cnn"] == pytest.approx(0.5) and gaps["older"] is None  # blank for a record without it
    page = (out / "models" / page_name("glyph_cnn")).read_text()
    assert "<th>mean median gap</th>" in page and "<th>mean median gap</th>" in page


def test_per_level_csv_and_the_record_of_the_harness_carry_it(median_gap):
    outputs = pytest.importorskip("harness.outputs")
    from harness.method.evaluation import KappaResult

    base = _with_gap(record())
    result = KappaResult("softmax", None, base["levels"], base["id"])
    frame = outputs.per_level_frame("glyph_cnn", [result])
    assert list(frame.columns) == [*PAPER_COLUMNS, *later_columns()]
    assert "median gap" in frame.columns and "fpr@95 (ID+)" in frame.columns  # a test's metric, a built-in one
    assert frame["median gap"].tolist()[:2] == [1.0, 0.9] and frame["fpr@99 (ID+)"].tolist()[0] == 0.5
    assert frame["fpr@95 (OOD+)"].isna().all()
    made = outputs.record(
        result,
        benchmark=base["benchmark"],
        model=base["model"],
        kappa_params={},
        probability=False,
        seed=0,
        version="0.1.0",
        created=base["created"],
        timings=base["timings"],
        metric_definitions=outputs.metric_definitions(),
    )
    validate_record(made)
    assert made["schema_version"] == shape.SCHEMA_VERSION and made["levels"][1]["x_lab_median_gap"] == 0.9
    assert made["summary"]["mean_ood_auroc"] == pytest.approx(
        math.fsum(base_l["ood_auroc"] for base_l in base["levels"]) / 11
    )
    assert made["metric_definitions"]["x_lab_median_gap"] == "median ID score minus median OOD score"
    assert made["metric_definitions"]["fpr_at_99_tpr"].startswith("fpr_at_99_tpr: ID positive")


def test_a_metric_is_declared_once():
    with pytest.raises(CoodError, match="^metric 'fpr_at_99_tpr' \\(level\\) is registered twice$"):
        register_metric(Metric("fpr_at_99_tpr", "level", len, False, "x", "x"))
    with pytest.raises(CoodError, match="scope 'run' is not one of level, id, summary"):
        register_metric(Metric("x", "run", len, False, "x", "x"))
    with pytest.raises(CoodError, match="is not a lower-case letter"):
        register_metric(Metric("Fpr 99", "level", len, False, "x", "x"))
    with pytest.raises(CoodError, match="aggregate 'mean' is for level metrics"):
        register_metric(Metric("x", "id", len, False, "x", "x", aggregate="mean"))
    assert "x" not in {m.name for m in registry.registered()}


def test_a_version_1_record_is_read_and_its_new_fields_are_blank():
    old = json.loads(V1_RECORD.read_text())
    since = {m.name: m for m in registry.registered("level")}["fpr_at_99_tpr"].since  # the version that added it
    assert old["schema_version"] < since and "fpr_at_99_tpr" not in old["levels"][0]
    validate_record(old)
    row = record_row(old, 1, "records/old.json", "00" * 32)
    assert row["mean_fpr_at_99_tpr"] is None and row["mean_fpr_at_95_tpr"] == pytest.approx(0.35)
    with pytest.raises(
        LeaderboardError, match=rf"^levels\[0\]: missing field 'fpr_at_99_tpr' \(schema version {since}"
    ):
        validate_record({**old, "schema_version": since})


def test_a_board_written_before_a_metric_takes_records_with_it(tmp_path, median_gap):
    board = tmp_path / "board"
    old = V1_RECORD.read_bytes()
    (tmp_path / "old.json").write_bytes(old)
    result = runner.invoke(app, ["init", "-d", str(board), "--record", str(tmp_path / "old.json")])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["add", str(tmp_path / "old.json"), "-d", str(board)])
    assert result.exit_code == 0, result.output
    # the table as the leaderboard wrote it before fpr@99 and the median gap existed
    table = read_table(board / PARQUET).drop(columns=["mean_fpr_at_99_tpr", "mean_x_lab_median_gap"])
    table.to_parquet(board / PARQUET, index=False)
    table.to_csv(board / CSV, index=False)

    new = _with_gap(record(model="new_model", weights="44" * 32))
    (tmp_path / "new.json").write_text(json.dumps(new))
    for args in (
        ["add", str(tmp_path / "new.json"), "-d", str(board)],
        ["show", "-d", str(board)],
        ["report", "-d", str(board)],
        ["release", "-d", str(board), "--note", "with fpr@99"],
        ["site", str(tmp_path / "site"), "-d", str(board)],
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, (args, result.output, result.exception)

    table = current_table(board)
    by_model = table.set_index("model")
    assert pd.isna(by_model.loc["resnet_v1_record", "mean_fpr_at_99_tpr"])
    assert by_model.loc["new_model", "mean_fpr_at_99_tpr"] == pytest.approx(0.55)
    assert pd.isna(by_model.loc["resnet_v1_record", "mean_x_lab_median_gap"])
    assert by_model.loc["new_model", "mean_x_lab_median_gap"] == pytest.approx(0.5)
    assert (board / "records").is_dir() and old in [p.read_bytes() for p in (board / "records").glob("*.json")]
    page = (tmp_path / "site" / "models" / page_name("resnet_v1_record")).read_text()
    assert "<th>fpr@95 (ID+)</th>" in page and "<th>fpr@99 (ID+)</th>" not in page  # the old record has none
    page = (tmp_path / "site" / "models" / page_name("new_model")).read_text()
    assert "<th>fpr@99 (ID+)</th>" in page and "<td>0.5500</td>" in page


def test_an_old_table_file_reads_with_blank_new_columns(tmp_path):
    add_records(tmp_path / "b", [json.loads(V1_RECORD.read_text())], create=True)
    path = tmp_path / "b" / PARQUET
    read_table(path).drop(columns=["mean_fpr_at_99_tpr"]).to_parquet(path, index=False)
    table = read_table(path)
    columns = list(table.columns)
    assert columns.index("mean_fpr_at_99_tpr") == columns.index("mean_fpr_at_95_tpr") + 1
    assert table["mean_fpr_at_99_tpr"].isna().all() and table["mean_fpr_at_99_tpr"].dtype == "float64"


def test_a_metric_registered_first_comes_after_the_built_in_ones():
    code = (
        "from harness.method.registry import Metric, register_metric, registered\n"
        "register_metric(Metric('x_lab_early', 'level', len, True, 'early', 'registered before the built-in ones'))\n"
        "print(' '.join(m.name for m in registered('level')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    built_in = [m.name for m in registry.registered("level") if not m.name.startswith("x_")]  # not a test's own
    assert done.stdout.split() == [*built_in, "x_lab_early"], done.stderr


def test_the_terminal_summary_names_a_registered_summary_metric():
    outputs = pytest.importorskip("harness.outputs")
    from harness.method.evaluation import KappaResult

    worst = Metric(
        "x_lab_worst_ood_auroc",
        "summary",
        lambda rows: min(row["ood_auroc"] for row in rows),
        True,
        "worst ood-auroc",
        "the lowest of the levels' ood_auroc",
    )
    base = record()
    result = KappaResult("softmax", None, base["levels"], {**base["id"], "auroc": None})
    register_metric(worst)
    try:
        line = " ".join(outputs.summary_table([result]).split("\n\n")[-1].split())  # the kappa's lines
    finally:
        unregister_metric(worst)
    assert line.split() == ["softmax:", "mean", "ood-auroc", "0.8500", "worst", "ood-auroc", "0.7500"] + [
        "id-acc",
        "0.8100",
        "id-auroc",
        "n/a",
    ] + [
        word
        for label in ("aurc", "e-aurc", "sac@95", "sac@99", "ece", "ece-mass", "brier (correctness)")  # not here
        for word in [*label.split(), "n/a"]
    ]
    assert "worst" not in outputs.summary_table([result])


def _calibrated(rec: dict, probability: bool, values: dict | None) -> dict:
    rec = copy.deepcopy(rec)
    rec["kappa"]["probability"] = probability
    rec["id"].update(values or dict.fromkeys(("ece", "ece_mass", "nll", "brier")))
    return rec


def test_the_calibration_metrics_and_kappa_probability_are_optional_fields(tmp_path):
    calibrated = _calibrated(record(), True, {"ece": 0.031, "ece_mass": 0.029, "nll": 0.52, "brier": 0.14})
    uncalibrated = _calibrated(record(model="m2", weights="44" * 32, kappa="energy"), False, None)
    older = record(model="older", weights="33" * 32)  # written before them: neither field
    schema = jsonschema.Draft202012Validator(shape.json_schema())
    assert schema.schema["properties"]["kappa"]["properties"]["probability"]["type"] == "boolean"
    assert "probability" not in schema.schema["properties"]["kappa"]["required"]
    for rec in (calibrated, uncalibrated, older, json.loads(V1_RECORD.read_text())):
        validate_record(rec)
        schema.validate(rec)
    for path, value, message in (
        ("kappa", {**calibrated["kappa"], "probability": "yes"}, "kappa.probability: must be true or false, got 'yes'"),
        ("id", {**calibrated["id"], "ece": 1.5}, "id.ece: out of range [0, 1]: 1.5"),
        ("id", {**calibrated["id"], "brier": -0.1}, "id.brier: out of range [0, 1]: -0.1"),
    ):
        bad = {**calibrated, path: value}
        with pytest.raises(LeaderboardError, match=f"^{re.escape(message)}$"):
            validate_record(bad)
        assert not schema.is_valid(bad)
    validate_record({**calibrated, "id": {**calibrated["id"], "nll": 3.2}})  # NLL is not bounded by 1

    board = tmp_path / "b"
    add_records(board, [calibrated, uncalibrated, older], create=True)
    table = current_table(board).set_index("model")
    assert table.loc["glyph_cnn", ["id_ece", "id_ece_mass", "id_nll", "id_brier"]].tolist() == [
        0.031,
        0.029,
        0.52,
        0.14,
    ]
    assert table.loc[["m2", "older"], "id_ece"].isna().all()  # null, and absent: both blank
    out = tmp_path / "site"
    build_site(current_table(board), out, "current", board=board)
    page = (out / "models" / page_name("glyph_cnn")).read_text()
    assert "<th>ece</th><th>ece-mass</th><th>nll (correctness)</th><th>brier (correctness)</th>" in page
    assert "<td>0.0310</td>" in page
    assert "<th>ece</th>" not in (out / "models" / page_name("older")).read_text()  # no entry has it: no column
