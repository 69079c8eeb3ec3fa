"""Any ImageFolder pair: class rules, one image field for mixed formats, resume after an interruption, the CLI."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import datasets
import pandas as pd
import pytest
from typer.testing import CliRunner

from dataset_builder import images
from dataset_builder.benchmark import Benchmark
from dataset_builder.cli import app
from dataset_builder.errors import BenchmarkError
from dataset_builder.folder import build_folder
from dataset_builder.images import ImageSettings
from dataset_builder.loading import sample_features
from dataset_builder.shards import iter_samples
from image_fixtures import png, write_class

SETTINGS = ImageSettings(images_per_class=4, n_test=1, min_images=4, ood_classes_per_shard=1, id_classes_per_shard=1)
OOD = ["ant", "bee", "cat", "fox", "owl"]


def folders(root: Path) -> tuple[Path, Path]:
    for cid in ("cat", "dog"):
        write_class(root / "id", cid, 3)
    for cid in OOD:
        write_class(root / "ood", cid, 5)
    for i in (3, 4):
        (root / "ood" / "owl" / f"owl_{i}.JPEG").unlink()
    (root / "ood" / "owl" / "owl_png.png").write_bytes(png("owl"))  # a PNG among JPEGs
    return root / "id", root / "ood"


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_class_rules_and_a_mixed_format_class_loading_through_datasets(tmp_path):
    id_dir, ood_dir = folders(tmp_path)
    build_folder(
        tmp_path / "b",
        id_dir,
        ood_dir,
        exclusions={"fox": ("dog", "canids")},
        settings=SETTINGS,
        workers=1,
        progress=False,
    )
    table = pd.read_parquet(tmp_path / "b" / "classes" / "ood.parquet").set_index("id")
    assert table["status"].to_dict() == {"ant": "ood", "bee": "ood", "cat": "removed", "fox": "removed", "owl": "ood"}
    assert (table.at["cat", "rule"], table.at["fox", "rule"], table.at["fox", "collides_with"]) == (
        "id_class",
        "excluded",
        "dog",
    )
    bench = Benchmark.open(tmp_path / "b")
    assert bench.manifest["image_formats"] == {"JPEG": 2 * 3 + 2 * 4 + 3, "PNG": 1}
    owl = [
        s
        for sh in bench.shards("ood_estimation") + bench.shards("ood_test")
        for s in iter_samples(bench.shard_path(sh))
        if json.loads(s["json"])["class_id"] == "owl"
    ]
    assert len(owl) == 4 and all(set(s) == {"__key__", "jpg", "cls", "json"} for s in owl)
    owl_label = len(bench.id_classes) + 2  # the third candidate kept: the ID classes, then the candidates in order
    assert table.at["owl", "label"] == owl_label and {int(s["cls"]) for s in owl} == {owl_label}
    assert table.at["cat", "label"] == table.at["fox", "label"] == -1  # removed: no images, no label
    files = [str(bench.shard_path(s)) for s in bench.shards("ood_estimation") + bench.shards("ood_test")]
    loaded = datasets.load_dataset(
        "webdataset", data_files={"pool": files}, split="pool", features=sample_features("jpg")
    )
    assert len(loaded) == 3 * 4  # nothing dropped: the PNG sits under the same field
    assert {r["json"]["class_id"]: r["cls"] for r in loaded} == table.loc[["ant", "bee", "owl"], "label"].to_dict()
    assert {loaded[i]["jpg"].format for i in range(len(loaded))} == set(bench.manifest["image_formats"])
    by_card = datasets.load_dataset(str(tmp_path / "b"), "pool", split="ood_estimation")  # the card's features
    assert by_card.features["label"].names == ["cat", "dog", "ant", "bee", "owl"]  # a folder's class is its name
    assert set(by_card["class_id"]) == {by_card.features["label"].int2str(c) for c in by_card["label"]}


def test_an_interrupted_build_resumes_without_redoing_finished_blocks(tmp_path, monkeypatch):
    id_dir, ood_dir = folders(tmp_path)
    real, calls = images.run_block, []

    def failing(task):
        if len(calls) == 3:
            raise KeyboardInterrupt
        calls.append(task[1].name)
        return real(task)

    monkeypatch.setattr(images, "run_block", failing)
    with pytest.raises(KeyboardInterrupt):
        build_folder(tmp_path / "b", id_dir, ood_dir, settings=SETTINGS, workers=1, progress=False)
    partial = tmp_path / "b.partial"
    assert (
        sorted(p.stem for p in (partial / ".build").glob("*-*.json"))
        == calls
        == ["id-000000", "id-000001", "ood-000000"]
    )
    done = {p: p.stat().st_mtime_ns for p in sorted(partial.rglob("*")) if p.suffix in (".tar", ".parquet")}
    assert len(done) == 2 * (2 + 2)  # two ID shards, ant's estimation and test shards, each with its Parquet copy
    (partial / "ood" / "test" / "000" / "ant.parquet").unlink()  # a block whose copy is lost is built again
    done = {p: t for p, t in done.items() if not p.is_relative_to(partial / "ood")}

    calls.clear()
    monkeypatch.setattr(images, "run_block", lambda task: (calls.append(task[1].name), real(task))[1])
    with pytest.raises(BenchmarkError, match="holds an interrupted build with other inputs or options"):
        build_folder(tmp_path / "b", id_dir, ood_dir, settings=replace(SETTINGS, seed=1), workers=1, progress=False)
    build_folder(tmp_path / "b", id_dir, ood_dir, settings=SETTINGS, workers=1, progress=False)
    assert calls == ["ood-000000", "ood-000001", "ood-000002", "ood-000003"]  # ant again, bee, fox, owl (cat is
    # removed before any block)
    finished = {tmp_path / "b" / p.relative_to(partial): t for p, t in done.items()}
    assert {p: p.stat().st_mtime_ns for p in finished} == finished  # not rewritten
    assert not partial.exists() and not (tmp_path / "b" / ".build").exists()
    build_folder(tmp_path / "fresh", id_dir, ood_dir, settings=SETTINGS, workers=1, progress=False)
    assert tree_bytes(tmp_path / "b") == tree_bytes(tmp_path / "fresh")


def test_cli_builds_and_reports_errors_in_one_line(tmp_path):
    id_dir, ood_dir = folders(tmp_path)
    runner = CliRunner()
    args = [
        "folder",
        str(tmp_path / "b"),
        "--id",
        str(id_dir),
        "--ood",
        str(ood_dir),
        "--images-per-class",
        "4",
        "--test-fraction",
        "0.25",
        "--min-images",
        "4",
        "--workers",
        "1",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "2 ID classes, 4 OOD classes, 0 unreadable or oversized images skipped" in result.output
    assert "\r" not in result.output and "building:" not in result.output  # not a terminal: no progress bar
    (ood_dir / "bad name").mkdir()
    result = runner.invoke(app, [args[0], str(tmp_path / "c"), *args[2:]])
    assert isinstance(result.exception, BenchmarkError)
    assert (
        str(result.exception)
        == "OOD class name 'bad name' is not [A-Za-z0-9_-]+ (class names become shard names and sample keys)"
    )
