"""Records any board can read: a metric this board does not know (a later build's, a plugin's) and a severity rule it
does not know are read, kept byte for byte, shown from the record's own definition, and published; a record that does
not describe such a field, or one of a schema version ahead, is refused in one line that says what is missing."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
from huggingface_hub import hf_hub_download
from markupsafe import escape
from typer.testing import CliRunner

from dataset_builder.errors import CoodError
from harness.method.metrics import fpr_at_tpr
from harness.method.registry import Metric, register_metric, registered, unregister_metric
from lb_records import record
from leaderboard import record as shape
from leaderboard.cli import app
from leaderboard.errors import LeaderboardError
from leaderboard.foreign import MARK, NOTE
from leaderboard.publish import publish
from leaderboard.release import release
from leaderboard.schema import validate_record
from leaderboard.site import page_name
from leaderboard.store import current_table

runner = CliRunner()
LATER_ERROR = "0.5 * (1 - TPR) + 0.5 * FPR at the threshold that minimises it"
SPREAD = "levels by a spread rule: each window's start spread evenly over the sorted classes"


def _gap(d) -> float:
    return float(np.median(d.id_scores) - np.median(d.ood_scores))


GAP = Metric(
    "x_lab_median_gap", "level", _gap, True, "median gap", "median ID score minus median OOD score", unit=False
)


# a later release's built-in level metric (its function, never called here, one of the harness's own), under a name
# that no build declares (test_no_build_declares_the_later_metric)
DETECTION = Metric("later_err", "level", fpr_at_tpr, False, "det-err", LATER_ERROR, aggregate="mean")


def made_with(metric: Metric, model: str, values: list[float], **changes) -> dict:
    """A record made by the one constructor where ``metric`` is registered (a later release, a plugin installed), its
    level values ``values``; ``changes``: other parts as that build writes them."""
    register_metric(metric)
    try:
        parts = record(model=model, weights=f"{len(model):02d}" * 32)
        del parts["schema_version"], parts["num_levels"]
        for level, value in zip(parts["levels"], values):
            level[metric.name] = value
        parts["metric_definitions"] = {**parts["metric_definitions"], metric.name: metric.definition}
        return shape.make_record(**{**parts, **changes})
    finally:
        unregister_metric(metric)


def later_build() -> dict:
    """A record as a release with one more level metric (added without a schema version) and one more severity rule
    writes it."""
    definitions = {**record()["metric_definitions"], "later_err": LATER_ERROR, "severity_levels": SPREAD}
    values = [round(0.1 + 0.02 * i, 6) for i in range(11)]
    return made_with(DETECTION, "later", values, severity_rule="spread", metric_definitions=definitions)


def plugin_record() -> dict:
    """A record made where the plugin's metric is registered."""
    return made_with(GAP, "plugged", [1.0 - 0.1 * i for i in range(11)])


def test_the_constructor_describes_a_metric_added_without_a_version():
    made = plugin_record()
    assert made["metrics"] == {"x_lab_median_gap": {"scope": "level", "label": "median gap", "higher_is_better": True}}
    assert later_build()["metrics"] == {"later_err": {"scope": "level", "label": "det-err", "higher_is_better": False}}
    assert made["schema_version"] == shape.SCHEMA_VERSION  # no version bump for an optional metric
    assert "metrics" not in record()  # a record of built-in metrics only is written as before
    assert "x_lab_median_gap" not in {m.name for m in registered()}  # this board does not know it
    validate_record(made)


def test_the_optional_metrics_every_board_knows_are_built_in_and_undescribed():
    optional = {m.name for m in registered() if m.since is None}
    assert set(shape.KNOWN_OPTIONAL) <= optional  # a name there is one the registry declares, unprefixed
    assert not any(name.startswith("x_") for name in shape.KNOWN_OPTIONAL)
    parts = {k: v for k, v in record().items() if k not in ("schema_version", "num_levels")}
    parts["id"] = {**parts["id"], "nll_multiclass": 0.5}
    assert "metrics" not in shape.make_record(**parts)


def test_a_plugins_metric_is_namespaced():
    with pytest.raises(CoodError, match=r"^metric 'median_gap' is a plugin's: name it x_<plugin>_<name> "):
        register_metric(Metric("median_gap", "level", _gap, True, "gap", "x"))
    with pytest.raises(CoodError, match=r"^metric 'x_median' is a plugin's: name it x_<plugin>_<name> "):
        register_metric(Metric("x_median", "level", _gap, True, "gap", "x"))
    assert "median_gap" not in {m.name for m in registered()}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r.pop("metrics"), "levels[0]: unknown field 'later_err' (a metric this leaderboard does not"),
        (lambda r: r["metric_definitions"].pop("later_err"), "levels[0]: unknown field 'later_err'"),
        (lambda r: r["metrics"]["later_err"].update(scope="id"), "levels[0]: unknown field 'later_err'"),
        (lambda r: r["levels"][2].update(later_err="x"), "levels[2].later_err: must be a finite number"),
        (lambda r: r["levels"][2].update(later_err=float("inf")), "levels[2].later_err: must be a finite"),
        (lambda r: r["metrics"]["later_err"].pop("label"), "metrics.later_err: must be an object of"),
        (
            lambda r: r.update(schema_version=3),
            "schema_version: unsupported 3 (this leaderboard reads 1, 2): version 3",
        ),
    ],
)
def test_refusals_say_what_is_missing_in_one_line(change, message):
    made = later_build()
    validate_record(made)
    change(made)
    with pytest.raises(LeaderboardError) as info:
        validate_record(made)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_a_version_ahead_says_what_to_upgrade():
    with pytest.raises(LeaderboardError, match="newer than this leaderboard; upgrade cood-bench to read it$"):
        validate_record({**record(), "schema_version": 3})


def test_todays_board_adds_shows_builds_and_publishes_them(tmp_path, hub_server):
    board, files = tmp_path / "board", []
    for name, made in (("today", record()), ("later", later_build()), ("plugged", plugin_record())):
        files.append(tmp_path / f"{name}.json")
        files[-1].write_text(json.dumps(made, indent=1))
    result = runner.invoke(app, ["init", "-d", str(board), "--record", str(files[0])])
    assert result.exit_code == 0, result.output
    for path in files:
        result = runner.invoke(app, ["add", str(path), "-d", str(board)])
        assert result.exit_code == 0, (path.name, result.output)
    stored = {p.read_bytes() for p in (board / "records").glob("*.json")}
    assert {p.read_bytes() for p in files} <= stored  # kept as written

    table = current_table(board).set_index("model")
    assert table.loc["later", "mean_later_err"] == pytest.approx(0.2)
    assert table.loc["plugged", "mean_x_lab_median_gap"] == pytest.approx(0.5)
    assert pd.isna(table.loc["glyph_cnn", "mean_later_err"]) and table.loc["later", "severity_rule"] == "spread"
    csv = pd.read_csv(board / "table.csv").set_index("model")
    assert csv.loc["later", "mean_later_err"] == pytest.approx(0.2)

    shown = runner.invoke(app, ["show", "-d", str(board)])
    assert shown.exit_code == 0, shown.output
    header = next(line for line in shown.output.splitlines() if line.lstrip().startswith("rank"))
    assert f"mean det-err{MARK}" in header and f"mean median gap{MARK}" in header
    assert f"mean det-err{MARK} (later_err): {NOTE}: {LATER_ERROR}" in shown.output
    later_line = next(line for line in shown.output.splitlines() if " later " in line)
    assert "softmax [spread]" in later_line and "0.2000" in later_line  # the rule as named, the metric's mean

    site = tmp_path / "site"
    result = runner.invoke(app, ["site", str(site), "-d", str(board)])
    assert result.exit_code == 0, result.output
    html = (site / "index.html").read_text()
    data = json.loads(re.search(r'id="board-data">(.*?)</script>', html).group(1))
    assert {"mean_later_err", "mean_x_lab_median_gap"} <= set(data["cols"]) and "mean_later_err" in data["lower"]
    assert 'data-sort="mean_later_err"' in html and f">mean det-err{MARK}</th>" in html
    legend = str(escape(f"mean det-err{MARK} (later_err): {NOTE}: {LATER_ERROR}"))
    assert legend in html
    page = (site / "models" / page_name("later")).read_text()
    assert f"<th>mean det-err{MARK}</th>" in page and legend in page and "<td>0.2000" in page
    gaps = {m["m"]: m["e"][0].get("mean_x_lab_median_gap") for m in data["models"]}
    assert gaps == {"glyph_cnn": None, "later": None, "plugged": pytest.approx(0.5)}

    release(board, note="records of another build")
    assert publish(board, "cood/foreign-test", endpoint=hub_server)["tag"] == "v1"
    path = hf_hub_download(
        "cood/foreign-test",
        "results/table.parquet",
        repo_type="dataset",
        revision="v1",
        endpoint=hub_server,
        cache_dir=tmp_path / "cache",
    )
    published = pd.read_parquet(path).set_index("model")
    assert published.loc["plugged", "mean_x_lab_median_gap"] == pytest.approx(0.5)


def test_no_build_declares_the_later_metric():
    """The later release's metric is one this build does not know, whatever metrics it has gained."""
    assert DETECTION.name not in {m.name for m in registered()}, "rename the test's later metric"
