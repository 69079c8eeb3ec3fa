"""The per-OOD-class drill-down: per-class ood-auroc and mean confidence, the sidecar and thumbnails a run writes,
``per_class`` in its records, and the leaderboard that validates and keeps them."""

import copy
import dataclasses
import json
import subprocess
import sys
from importlib.resources import files
from itertools import islice
from pathlib import Path

import jsonschema
import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from dataset_builder.benchmark import Benchmark
from dataset_builder.shards import iter_samples
from harness.drilldown import SIDECAR, THUMBNAILS_PER_CLASS, thumbnails
from harness.errors import HarnessError
from harness.method.metrics import auroc
from harness.method.per_class import class_metrics, class_rows, level_summaries
from harness.method.severity import severity_levels
from harness.run import evaluate, submit
from leaderboard.drilldown import level_classes, record_folder, thumbnail_paths
from leaderboard.errors import LeaderboardError
from leaderboard.schema import validate_record
from leaderboard.store import accepted_files, add_files

pytestmark = pytest.mark.slow  # real runs: the quick loop (-m 'not slow') leaves them to CI

RECORD_SCHEMA = jsonschema.Draft202012Validator(
    json.loads(files("leaderboard").joinpath("record.schema.json").read_text())
)

ROOT = Path(__file__).resolve().parents[1]
CNN = ROOT / "examples" / "glyph_cnn.py"


def _expected(id_scores, ood_scores, confs, labels, k):
    """scikit-learn's AUROC (ID positive) and numpy's mean, class by class."""
    out = []
    for c in range(k):
        mine = ood_scores[labels == c]
        truth = np.r_[np.ones(len(id_scores)), np.zeros(len(mine))]
        out.append((roc_auc_score(truth, np.r_[id_scores, mine]), np.mean(confs[labels == c]), len(mine)))
    return np.array(out)


@pytest.mark.parametrize("decimals", [None, 1], ids=["real", "ties"])
def test_class_metrics_match_scikit_learn(decimals):
    rng = np.random.default_rng(7)
    id_scores = rng.normal(1.0, 1.0, 400)
    labels = np.r_[np.repeat(np.arange(6), [50, 31, 7, 80, 12, 2]), 6]  # class 6 has a single sample
    shift = np.array([0.0, 0.4, 0.9, 1.2, 2.0, -1.0, 0.5])[labels]
    ood_scores = rng.normal(0.0, 1.0, len(labels)) + shift
    if decimals is not None:  # coarse values: many ID/OOD ties
        id_scores, ood_scores = np.round(id_scores, decimals), np.round(ood_scores, decimals)
    confs = 1 / (1 + np.exp(-ood_scores))
    order = rng.permutation(len(labels))  # samples in any order
    got = class_metrics(id_scores, ood_scores[order], confs[order], labels[order], 7)
    expected = _expected(id_scores, ood_scores, confs, labels, 7)
    np.testing.assert_allclose(got.ood_auroc, expected[:, 0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(got.mean_confidence, expected[:, 1], rtol=1e-12)
    assert got.count.tolist() == [50, 31, 7, 80, 12, 2, 1]
    for c in range(7):  # the method's own level AUROC gives the same numbers
        assert got.ood_auroc[c] == pytest.approx(auroc(id_scores, ood_scores[labels == c]), abs=1e-12)
    if decimals is not None:
        assert len(np.intersect1d(id_scores, ood_scores)) > 10


def test_a_tie_counts_one_half_and_one_sample_is_a_class():
    got = class_metrics(
        np.array([1.0, 2.0, 3.0]), np.array([2.0, 0.0, 3.0]), np.array([0.2, 0.5, 0.9]), np.array([0, 1, 2]), 3
    )
    assert got.ood_auroc.tolist() == [0.5, 1.0, 1 / 6]  # (0 + 1/2 + 1) / 3, (1 + 1 + 1) / 3, (0 + 0 + 1/2) / 3
    assert got.mean_confidence.tolist() == [0.2, 0.5, 0.9]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((np.array([1.0, np.nan]), np.zeros(2), np.zeros(2), np.array([0, 1]), 2), "ID test scores contain 1 NaN"),
        (
            (np.ones(2), np.zeros(3), np.zeros(3), np.array([0, 1]), 2),
            "3 OOD test scores, 3 confidences and 2 class labels",
        ),
        ((np.ones(2), np.zeros(2), np.zeros(2), np.array([0, 0]), 2), "1 OOD classes have no test images"),
        ((np.ones(2), np.zeros(2), np.zeros(2), np.array([0, 2]), 2), r"labels must lie in \[0, 2\)"),
    ],
)
def test_bad_scores_are_one_line_errors(args, message):
    with pytest.raises(HarnessError, match=message):
        class_metrics(*args)


def test_rows_and_summaries_follow_the_levels():
    k = 12
    rng = np.random.default_rng(3)
    labels = np.repeat(np.arange(k), 5)
    scores = rng.normal(0, 1, len(labels))
    metrics = class_metrics(rng.normal(1, 1, 30), scores, scores, labels, k)
    levels = severity_levels(np.arange(k, dtype=float), window=2, num_levels=3)  # windows [0,2), [5,7), [10,12)
    rows = class_rows(levels.classes, metrics)
    assert [(r["level"], r["class_index"]) for r in rows] == [
        (0, 0),
        (0, 1),
        (1, 5),
        (1, 6),
        (2, 10),
        (2, 11),
        *[(None, c) for c in (2, 3, 4, 7, 8, 9)],
    ]
    assert all(r["n"] == 5 and r["ood_auroc"] == metrics.ood_auroc[r["class_index"]] for r in rows)
    overlapping = severity_levels(np.arange(10, dtype=float), window=3, num_levels=4)  # [0,3) [2,5) [5,8) [7,10)
    assert [r["level"] for r in class_rows(overlapping.classes, metrics) if r["class_index"] in (2, 7)] == [0, 1, 2, 3]

    ids, names = [f"c{c}" for c in range(k)], [f"class {c}" for c in range(k)]
    wide = severity_levels(np.arange(k, dtype=float), window=6, num_levels=2)  # [0,6), [6,12)
    summary = level_summaries(wide.classes, metrics, ids, names, {3: ["t/3-0.png"]}, hardest=4)
    for level, classes in zip(summary, wide.classes):
        aurocs = metrics.ood_auroc[classes]
        assert level["n_classes"] == 6
        assert level["ood_auroc_quantiles"] == pytest.approx(np.quantile(aurocs, [0, 0.25, 0.5, 0.75, 1]))
        assert [e["id"] for e in level["hardest"]] == [ids[c] for c in classes[np.argsort(aurocs, kind="stable")][:4]]
    assert {e["id"]: e["thumbnails"] for e in summary[0]["hardest"]}.get("c3", ["t/3-0.png"]) == ["t/3-0.png"]


def test_ties_in_the_hardest_list_go_by_class_index():
    metrics = class_metrics(np.array([1.0, 2.0]), np.array([1.5, 1.5, 1.5, 0.0]), np.ones(4), np.array([2, 0, 1, 3]), 4)
    summary = level_summaries(np.array([[3, 2, 1, 0]]), metrics, list("abcd"), list("ABCD"), hardest=3)
    assert [e["id"] for e in summary[0]["hardest"]] == ["a", "b", "c"]  # the three tied at 0.5, by index


def test_no_thumbnails_without_per_class_shards(tiny_glyphs):
    bench = Benchmark.open(tiny_glyphs)
    first = bench.ood_classes["id"].tolist()[:2]
    got = thumbnails(bench, first)
    assert [len(got[c]) for c in first] == [THUMBNAILS_PER_CLASS] * 2 and got[first[0]][0][0] == "png"
    shards = [{k: v for k, v in s.items() if k != "class_id"} for s in bench.manifest["shards"]]
    plain = dataclasses.replace(bench, manifest={**bench.manifest, "shards": shards})
    assert thumbnails(plain, first) == {c: [] for c in first}


@pytest.fixture(scope="module")
def glyph_run(default_glyphs, tmp_path_factory):
    out = tmp_path_factory.mktemp("per-class") / "run"
    return submit(CNN, benchmark="glyphs", kappas=["softmax", "energy"], out=out, progress=False), out


def test_submit_writes_the_sidecar_and_per_class(glyph_run):
    result, out = glyph_run
    bench = result.benchmark
    table = pd.read_parquet(out / SIDECAR)
    assert list(table.columns) == [
        "kappa",
        "level",
        "class_id",
        "class_index",
        "name",
        "n",
        "ood_auroc",
        "mean_confidence",
    ]
    all_ood = set(bench.ood_classes["id"])
    labels, keys = result.scores["ood_test"].labels, result.scores["id_test"]
    for rec, _res in zip(result.records, result.results):
        kappa = rec["kappa"]["name"]
        rows = table[table["kappa"] == kappa]
        per_class = json.loads((out / "records" / f"{kappa}.json").read_text())["per_class"]
        assert per_class["file"] == SIDECAR and [lvl["level"] for lvl in per_class["levels"]] == list(range(11))
        # the 11 levels hold the classes of the level manifest: 36 each, disjoint on this benchmark, and with the
        # classes between windows they are every OOD test class, each once
        manifest = pd.read_parquet(out / "levels" / f"glyph_cnn__{kappa}.parquet")
        levelled = rows[rows["level"].notna()]
        for level in range(11):
            mine = levelled[levelled["level"] == level]
            assert mine["class_id"].tolist() == manifest[manifest["level"] == level]["class_id"].tolist()
            assert per_class["levels"][level]["n_classes"] == len(mine) == 36
        assert not levelled["class_id"].duplicated().any()
        assert sorted(rows["class_id"]) == sorted(all_ood) and rows["n"].eq(50 - 7).all()  # 7 held back: private
        # each class's numbers, recomputed with scikit-learn from the run's per-sample scores
        ood = result.scores["ood_test"]
        for row in rows.sample(5, random_state=0).itertuples():
            mine = labels == row.class_index
            truth = np.r_[np.ones(len(keys)), np.zeros(mine.sum())]
            sklearn = roc_auc_score(truth, np.r_[keys.scores[kappa], ood.scores[kappa][mine]])
            assert row.ood_auroc == pytest.approx(sklearn, abs=1e-12)
            assert row.mean_confidence == pytest.approx(np.mean(ood.confs[kappa][mine]), rel=1e-12)
        # the drill-down does not change the level scores: a level's ood-auroc is its classes' n-weighted mean
        for level, summary in zip(rec["levels"], per_class["levels"]):
            mine = levelled[levelled["level"] == level["level"]]
            assert level["ood_auroc"] == pytest.approx(np.average(mine["ood_auroc"], weights=mine["n"]), abs=1e-12)
            assert summary["ood_auroc_quantiles"] == pytest.approx(
                np.quantile(mine["ood_auroc"], [0, 0.25, 0.5, 0.75, 1])
            )
            hardest = mine.sort_values(["ood_auroc", "class_index"]).head(10)
            assert [e["id"] for e in summary["hardest"]] == hardest["class_id"].tolist()
            assert [e["name"] for e in summary["hardest"]] == hardest["name"].tolist()
        assert per_class["levels"][-1]["ood_auroc_quantiles"][2] < per_class["levels"][0]["ood_auroc_quantiles"][2]


def test_thumbnails_are_the_glyphs_themselves(glyph_run):
    result, out = glyph_run
    bench = result.benchmark
    shards = {s["class_id"]: s for s in bench.shards("ood_test")}
    entries = [e for rec in result.records for lvl in rec["per_class"]["levels"] for e in lvl["hardest"]]
    assert len(entries) == 2 * 11 * 10
    for entry in entries[::17]:
        assert len(entry["thumbnails"]) == THUMBNAILS_PER_CLASS
        samples = islice(iter_samples(bench.root / shards[entry["id"]]["path"]), THUMBNAILS_PER_CLASS)
        assert [(out / t).read_bytes() for t in entry["thumbnails"]] == [s["png"] for s in samples]
    listed = {t for e in entries for t in e["thumbnails"]}
    assert {p.relative_to(out).as_posix() for p in (out / "per_class" / "thumbnails").iterdir()} == listed


def test_the_leaderboard_keeps_the_drill_down(glyph_run, tmp_path):
    result, out = glyph_run
    board = tmp_path / "board"
    files = sorted((out / "records").glob("*.json"))
    add_files(board, files[:1], create=True)
    leftover = board / "attachments" / "000009-0123456789abcdef"  # what an interrupted add leaves behind
    (leftover / "per_class").mkdir(parents=True)
    add_files(board, files[1:])
    assert not leftover.exists()
    stored = [board / "records" / name for name in accepted_files(board)]
    for path in stored:
        record = json.loads(path.read_text())
        folder = record_folder(path)
        assert folder == board / "attachments" / path.stem
        assert (folder / SIDECAR).read_bytes() == (out / SIDECAR).read_bytes()
        thumbs = thumbnail_paths(record, folder)
        assert thumbs and all(p.read_bytes() == (out / name).read_bytes() for name, p in thumbs.items())
        everyone = level_classes(record, 10, folder)
        hardest = record["per_class"]["levels"][10]["hardest"]
        assert len(everyone) == 36 and [c["ood_auroc"] for c in everyone] == sorted(c["ood_auroc"] for c in everyone)
        assert [(c["id"], c["thumbnails"]) for c in everyone[:10]] == [(e["id"], e["thumbnails"]) for e in hardest]
        assert [c["id"] for c in level_classes(record, 10)] == [e["id"] for e in hardest]
    assert record_folder(files[0]) == out
    with pytest.raises(LeaderboardError, match="no level 11: the record has levels 0 to 10"):
        level_classes(record, 11)


def test_a_run_without_out_still_gives_the_leaderboard_its_files(tiny_glyphs, tmp_path):
    board = tmp_path / "board"
    result = evaluate(
        CNN, benchmark=tiny_glyphs, kappas=["softmax"], leaderboard=board, progress=False, trust_submission=True
    )
    (name,) = accepted_files(board)
    folder = record_folder(board / "records" / name)
    table = pd.read_parquet(folder / SIDECAR)
    assert len(table) >= 48 and set(table["class_id"]) == set(result.benchmark.ood_classes["id"])
    assert all(p.is_file() for p in thumbnail_paths(result.records[0], folder).values())


def _malformed(record: dict, change) -> dict:
    record = copy.deepcopy(record)
    change(record["per_class"])
    return record


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda p: p.update(file="../outside.parquet"), "per_class.file: not a relative path: '../outside.parquet'"),
        (lambda p: p["levels"].pop(), "per_class.levels: must be a list of num_levels (11) entries"),
        (
            lambda p: p["levels"][3].update(ood_auroc_quantiles=[0.1, 0.2, 0.3, 0.4]),
            "per_class.levels[3].ood_auroc_quantiles: must be a list of 5 numbers",
        ),
        (lambda p: p["levels"][0]["hardest"].reverse(), "per_class.levels[0].hardest[1].ood_auroc: * is out of order"),
        (lambda p: p["levels"][2]["hardest"][0].pop("name"), "per_class.levels[2].hardest[0]: missing field 'name'"),
        (
            lambda p: p["levels"][1]["hardest"][0]["thumbnails"].append("/etc/passwd"),
            "per_class.levels[1].hardest[0].thumbnails[3]: not a relative path",
        ),
        (lambda p: p.update(extra=1), "per_class: unknown field 'extra'"),
    ],
)
def test_a_malformed_per_class_is_refused(glyph_run, change, message):
    record = glyph_run[0].records[0]
    validate_record(record)
    RECORD_SCHEMA.validate(json.loads(json.dumps(record)))  # the published JSON Schema agrees
    with pytest.raises(LeaderboardError) as error:
        validate_record(_malformed(record, change))
    first, *rest = message.split("*")  # the message's fixed parts
    assert str(error.value).startswith(first) and all(part in str(error.value) for part in rest), error.value
    if "out of order" not in message and "num_levels" not in message:  # cross-field checks JSON Schema cannot express
        assert not RECORD_SCHEMA.is_valid(json.loads(json.dumps(_malformed(record, change))))


def test_the_cli_refuses_a_record_without_its_files_in_one_line(glyph_run, tmp_path):
    record = glyph_run[0].records[0]
    alone = tmp_path / "softmax.json"
    alone.write_text(json.dumps(record))
    board = tmp_path / "board"
    cli = [sys.executable, "-c", "from leaderboard.cli import main; main()"]
    result = subprocess.run(
        [*cli, "add", str(alone), "--init", "-d", str(board)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        f"cood-leaderboard: error: {alone}: per_class names {SIDECAR}, which is not in {tmp_path}\n"
    )
    assert not (board / "leaderboard.json").exists()


def test_the_per_class_method_needs_no_torch():
    code = "import sys, harness.method.per_class; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout == "False\n", result.stderr
