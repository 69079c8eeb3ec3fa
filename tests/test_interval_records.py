"""A glyph run's records carry the 95% intervals of docs/method.md section 4 ("Intervals"), equal to the pure
functions of ``harness.method.intervals`` on the run's own per-sample scores."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.method.intervals import accuracy_interval, auroc_interval, mean_auroc_interval
from harness.run import submit
from leaderboard.schema import validate_record

pytestmark = pytest.mark.slow  # a real run

CNN = Path(__file__).resolve().parents[1] / "examples" / "glyph_cnn.py"


@pytest.fixture(scope="module")
def run(tiny_glyphs, tmp_path_factory):
    out = tmp_path_factory.mktemp("intervals") / "run"
    evaluation = submit(CNN, benchmark=tiny_glyphs, kappas=["softmax", "energy"], out=out, progress=False, workers=1)
    return evaluation, out


def _ends(interval) -> list[float]:
    return [interval.low, interval.high]


@pytest.mark.parametrize("kappa", ["softmax", "energy"])
def test_records_carry_intervals_that_equal_the_pure_functions_on_the_runs_scores(run, kappa):
    evaluation, out = run
    record = json.loads((out / "records" / f"{kappa}.json").read_text())
    validate_record(record)
    assert record["intervals"] == {
        "confidence": 0.95,
        "methods": {
            "levels.ood_auroc": "binormal-score-adapted",
            "id.acc": "sterne-midp",
            "id.auroc": "binormal-score-adapted",
            "summary.mean_ood_auroc": "binormal-score-adapted-mean-delong-correlation",
        },
    }
    result = next(r for r in evaluation.results if r.kappa == kappa)
    id_test, ood_test = evaluation.scores["id_test"], evaluation.scores["ood_test"]
    positives = id_test.scores[kappa]
    members = [np.flatnonzero(np.isin(ood_test.labels, classes)) for classes in result.levels.classes]
    for level, index in zip(record["levels"], members):
        expected = auroc_interval(positives, ood_test.scores[kappa][index])
        assert [level["ood_auroc_low"], level["ood_auroc_high"]] == pytest.approx(_ends(expected), abs=1e-12)
        assert level["ood_auroc_low"] < level["ood_auroc"] < level["ood_auroc_high"]  # glyph levels are not perfect
    mean = mean_auroc_interval(positives, ood_test.scores[kappa], members)
    summary = record["summary"]
    assert [summary["mean_ood_auroc_low"], summary["mean_ood_auroc_high"]] == pytest.approx(_ends(mean), abs=1e-12)
    assert summary["mean_ood_auroc_low"] < summary["mean_ood_auroc"] < summary["mean_ood_auroc_high"]
    correct = id_test.preds == id_test.labels
    ids = record["id"]
    assert [ids["acc_low"], ids["acc_high"]] == pytest.approx(
        _ends(accuracy_interval(int(correct.sum()), len(correct)))
    )
    assert ids["acc_low"] < ids["acc"] < ids["acc_high"]
    id_auroc = auroc_interval(positives[correct], positives[~correct])
    assert [ids["auroc_low"], ids["auroc_high"]] == pytest.approx(_ends(id_auroc), abs=1e-12)
    assert ids["auroc_low"] <= ids["auroc"] <= ids["auroc_high"]


def test_the_mean_interval_counts_the_covariance_of_the_levels(run):
    """The levels share every ID image and overlapping windows share OOD images, so their AUROCs covary: the mean's
    interval is wider than one that took the levels as independent (their variances alone)."""
    evaluation, out = run
    record = json.loads((out / "records" / "softmax.json").read_text())
    widths = [level["ood_auroc_high"] - level["ood_auroc_low"] for level in record["levels"]]
    mean_width = record["summary"]["mean_ood_auroc_high"] - record["summary"]["mean_ood_auroc_low"]
    independent = np.sqrt(np.sum(np.square(widths))) / len(widths)  # half-widths add in quadrature if independent
    assert mean_width > independent


def test_per_level_csv_carries_the_level_intervals(run):
    _, out = run
    csv = pd.read_csv(out / "per_level.csv")
    record = json.loads((out / "records" / "softmax.json").read_text())
    rows = csv[csv["confidence function"] == "softmax"].sort_values("severity level")
    assert rows["ood-auroc low"].tolist() == pytest.approx([level["ood_auroc_low"] for level in record["levels"]])
    assert rows["ood-auroc high"].tolist() == pytest.approx([level["ood_auroc_high"] for level in record["levels"]])
    assert (rows["ood-auroc low"] < rows["ood-auroc"]).all() and (rows["ood-auroc"] < rows["ood-auroc high"]).all()


def test_the_severity_curves_draw_the_records_level_intervals(run):
    from matplotlib.container import ErrorbarContainer

    from harness.outputs import curves_figure

    evaluation, out = run
    left = curves_figure("glyph_cnn", evaluation.results, evaluation.records[0]["benchmark"]).axes[0]
    bars = {c.get_label(): c for c in left.containers if isinstance(c, ErrorbarContainer)}
    assert sorted(bars) == ["energy", "softmax"]
    for kappa, bar in bars.items():
        levels = json.loads((out / "records" / f"{kappa}.json").read_text())["levels"]
        drawn = np.array([segment[:, 1] for segment in bar.lines[2][0].get_segments()])
        assert drawn == pytest.approx(np.array([[lv["ood_auroc_low"], lv["ood_auroc_high"]] for lv in levels]))
    assert (out / "severity_curves.png").read_bytes()[:4] == b"\x89PNG"
