"""The per-image scores a run publishes with every record: the file reproduces the record's numbers from its columns
alone, holds no private image, and a store refuses a file that is not the record's."""

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dataset_builder.benchmark import Benchmark
from harness.method.metrics import id_metrics, level_metrics, summary_intervals, summary_metrics
from harness.method.registry import LevelSet
from harness.method.selective import _EPS
from harness.run import evaluate
from leaderboard.errors import LeaderboardError
from leaderboard.per_image import SCHEMA
from leaderboard.publish import _stage_per_image
from leaderboard.store import accepted_files, add_files, add_records, current_table

pytestmark = pytest.mark.slow  # a real run

CNN = Path(__file__).resolve().parents[1] / "examples" / "glyph_cnn.py"
KAPPAS = ["softmax", "entropy", "max_logit"]


@pytest.fixture(scope="module")
def run(private_glyphs, tmp_path_factory):
    out = tmp_path_factory.mktemp("per-image") / "run"
    return evaluate(CNN, benchmark=str(private_glyphs), kappas=KAPPAS, out=out, progress=False), out


def _close(got: dict, want: dict) -> None:
    for name, value in want.items():
        assert got[name] == pytest.approx(value, abs=1e-12, nan_ok=False) if value is not None else got[name] is None


def test_the_file_alone_reproduces_every_number_of_its_record(run):
    evaluation, out = run
    for kappa in KAPPAS:
        record = json.loads((out / "records" / f"{kappa}.json").read_text())
        field = record["per_image"]
        assert field["file"] == f"per_image/{kappa}.parquet"
        table = pd.read_parquet(out / field["file"])
        assert len(table) == field["rows"] and list(table.columns) == SCHEMA.names
        pairs = list(zip(table.split, table.key))
        assert pairs == sorted(pairs) and len(set(pairs)) == len(pairs)
        ids, ood = table[table.split == "id_test"], table[table.split == "ood_test"]
        members = [np.flatnonzero([level in held for held in ood["levels"]]) for level in range(record["num_levels"])]
        for level, row in zip(members, record["levels"]):
            got = level_metrics(
                ids.score.to_numpy(), ood.score.to_numpy()[level], ids.value.to_numpy(), ood.value.to_numpy()[level]
            )
            _close(got, {k: row[k] for k in got})
            assert row["num_ood"] == len(level) and row["num_id"] == len(ids)
        correct = ids.correct.to_numpy(bool)
        got = id_metrics(ids.score.to_numpy(), correct, ids.value.to_numpy(), record["kappa"]["probability"])
        _close(got, {k: record["id"][k] for k in got if not k.endswith("multiclass")})
        assert record["id"]["nll_multiclass"] == pytest.approx(ids.nll.mean(), abs=1e-12)
        assert record["id"]["brier_multiclass"] == pytest.approx(ids.brier.mean(), abs=1e-12)
        assert ids.nll.min() >= -np.log1p(-_EPS) and ood.nll.isna().all() and ood.correct.isna().all()
        summary = {
            **summary_metrics(record["levels"]),
            **summary_intervals(LevelSet(ids.score.to_numpy(), ood.score.to_numpy(), members)),
        }
        _close(summary, record["summary"])
        # the levels themselves: each estimation class's mean value, ranked, gives the record's level scores
        estimation = table[table.split == "ood_estimation"]
        means = estimation.groupby("class_id").value.mean()
        level_of = estimation.groupby("class_id").levels.first()
        for level, row in enumerate(record["levels"]):
            held = [c for c, levels in level_of.items() if level in levels]
            assert row["level_score"] == pytest.approx(means[held].mean(), abs=1e-12)


def test_no_private_image_is_written(run, private_glyphs):
    evaluation, out = run
    private = Benchmark.open(private_glyphs).private_part()
    assert "id_test_private" in evaluation.scores  # the run scored the private part
    keys = {k for split in ("id_test", "ood_test") for k in evaluation.scores[f"{split}_private"].keys}
    table = pd.read_parquet(out / "per_image" / "softmax.parquet")
    assert len(keys) == 144 + 192 and not keys & set(table.key)
    assert set(table.split) == {"id_test", "ood_estimation", "ood_test"} and private.root != out


def test_a_tampered_file_is_refused_at_add_with_its_sha256(run, tmp_path):
    _, out = run
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    path = copy / "per_image" / "entropy.parquet"
    table = pd.read_parquet(path)
    table.loc[0, "score"] += 1e-9
    pq.write_table(pa.Table.from_pandas(table, schema=SCHEMA, preserve_index=False), path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    board = tmp_path / "board"
    with pytest.raises(LeaderboardError, match=rf"per_image names per_image/entropy.parquet, whose sha256 is {digest}"):
        add_files(board, [copy / "records" / "entropy.json"], create=True)
    assert not (board / "records").exists() or not accepted_files(board)
    add_files(board, [out / "records" / "entropy.json"], create=True)  # the run's own file is taken, and kept
    stored = next((board / "attachments").iterdir()) / "per_image" / "entropy.parquet"
    assert stored.read_bytes() == (out / "per_image" / "entropy.parquet").read_bytes()


def test_publish_stages_the_file_of_the_record_that_stands_and_a_verified_run_replaces_it(run, tmp_path):
    _, out = run
    board, rerun = tmp_path / "board", tmp_path / "rerun"
    add_files(board, [out / "records" / "softmax.json"], create=True)
    shutil.copytree(out, rerun)  # the worker's run: the same numbers, a file whose last bits differ
    path = rerun / "per_image" / "softmax.parquet"
    table = pd.read_parquet(path)
    table.loc[0, "value"] = np.nextafter(table.loc[0, "value"], 2.0)
    pq.write_table(pa.Table.from_pandas(table, schema=SCHEMA, preserve_index=False), path)
    record = json.loads((rerun / "records" / "softmax.json").read_text())
    record["per_image"]["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    verified = {"request": "0" * 12, "requests_repo": "org/requests", "worker": "gpu-1"}
    staged = []
    for added in ([], [record]):
        if added:
            add_records(board, added, folder=rerun, verified=verified)
        staging = tmp_path / f"staging-{len(staged)}"
        staging.mkdir()
        _stage_per_image(board, current_table(board), staging)
        staged.append(list(staging.glob("per_image/*.parquet")))
    entry = current_table(board)["entry_id"].tolist()
    assert [[p.name for p in files] for files in staged] == [[f"{entry[0]}.parquet"]] * 2 and len(entry) == 1
    assert staged[0][0].read_bytes() == (out / "per_image" / "softmax.parquet").read_bytes()
    assert staged[1][0].read_bytes() == path.read_bytes() != staged[0][0].read_bytes()
