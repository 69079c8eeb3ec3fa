"""Benchmarks of formats 1 (built before the samples carried their label ``cls``) and 2 (before the shards' Parquet
copies) still open, load with their own columns and evaluate."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import datasets
import pandas as pd
import pytest

from dataset_builder.benchmark import Benchmark
from dataset_builder.card import card_text, write_card
from dataset_builder.levels import level_table
from dataset_builder.loading import load_level
from dataset_builder.manifest import FORMAT_VERSION, MANIFEST, dumps
from dataset_builder.shards import iter_samples, write_shard
from glyph_fixtures import CNN
from harness.run import submit


def as_format(root: Path, out: Path, version: int) -> Path:
    """A copy of the benchmark ``root`` as the builder wrote it in format ``version``: shards without Parquet copies
    (format 2: the same tars); samples without ``cls`` and class tables without ``label`` too (format 1); the
    manifest's sha256 and sizes of rewritten shards, and the card written for it."""
    shutil.copytree(root, out)
    manifest = json.loads((out / MANIFEST).read_text())
    for shard in manifest["shards"]:
        (out / shard.pop("parquet")["path"]).unlink()
        if version == 1:
            samples = [{k: v for k, v in s.items() if k != "cls"} for s in iter_samples(root / shard["path"])]
            info = write_shard(out, shard["path"], shard["split"], samples, shard.get("class_id"), copy=False)
            shard.update(sha256=info.sha256, num_bytes=info.num_bytes)
    for table in ("id", "ood") if version == 1 else ():
        path = out / "classes" / f"{table}.parquet"
        pd.read_parquet(path).drop(columns="label").to_parquet(path, index=False)
    manifest["format_version"] = version
    (out / MANIFEST).write_bytes(dumps(manifest))
    write_card(out)
    return out


@pytest.fixture(scope="module")
def old(tiny_glyphs, tmp_path_factory) -> Path:
    return as_format(tiny_glyphs, tmp_path_factory.mktemp("format1") / "glyphs", 1)


@pytest.fixture(scope="module")
def format_2(tiny_glyphs, tmp_path_factory) -> Path:
    return as_format(tiny_glyphs, tmp_path_factory.mktemp("format2") / "glyphs", 2)


def test_format_1_has_no_label_member_and_format_2_has_one(tiny_glyphs, old):
    assert FORMAT_VERSION == 3 and Benchmark.open(tiny_glyphs).manifest["format_version"] == 3
    bench = Benchmark.open(old)
    assert bench.manifest["format_version"] == 1 and "label" not in bench.id_classes
    shard = bench.shards("ood_test")[0]
    assert set(next(iter_samples(old / shard["path"]))) == {"__key__", "png", "json"}
    assert (old / shard["path"]).read_bytes() != (tiny_glyphs / shard["path"]).read_bytes()


def test_a_format_1_level_loads_without_the_label_column(old, tmp_path):
    old = shutil.copytree(old, tmp_path / "glyphs")
    ids = Benchmark.open(old).ood_classes["id"].tolist()
    table = level_table([[0, 1], [2, 3]], [0.1 * i for i in range(len(ids))], [0.0, 0.2], [0.0, 1.0], ids)
    (old / "levels").mkdir(exist_ok=True)
    table.to_parquet(old / "levels" / "m__softmax.parquet")
    level = load_level(old, "m", "softmax", 1)
    assert "cls" not in level.features and sorted({r["class_id"] for r in level["json"]}) == ids[2:4]
    assert "its samples have no `cls`" in card_text(old)


def test_a_format_2_benchmark_loads_its_tars_with_their_columns(format_2, tiny_glyphs):
    """A benchmark of format 2 has no Parquet copies: its card lists the tars, ``load_dataset`` gives their columns
    (``png``, ``cls``, ``json``), and its shards are format 3's very bytes."""
    bench = Benchmark.open(format_2)
    bench.verify()
    assert sorted(p.parent.name for p in format_2.rglob("*.parquet")) == ["classes", "classes"]  # no copies
    shard = bench.shards("id_test")[0]
    assert (format_2 / shard["path"]).read_bytes() == (tiny_glyphs / shard["path"]).read_bytes()
    loaded = datasets.load_dataset(str(format_2), "id", split="id_test")
    new = datasets.load_dataset(str(tiny_glyphs), "id", split="id_test")
    assert loaded.column_names == ["__key__", "__url__", "png", "cls", "json"]
    assert loaded.features["cls"] == new.features["label"]
    assert sorted(zip(loaded["__key__"], loaded["cls"])) == sorted(zip(new["key"], new["label"]))
    assert "train.rename_columns" in card_text(format_2)


@pytest.mark.slow
def test_a_format_1_benchmark_evaluates_as_its_format_2_build(tiny_glyphs, old, tmp_path):
    runs = {
        name: submit(CNN, benchmark=root, kappas=["softmax"], out=tmp_path / name, progress=False, workers=1)
        for name, root in (("old", old), ("new", tiny_glyphs))
    }
    records = {name: json.loads((tmp_path / name / "records" / "softmax.json").read_text()) for name in runs}
    assert records["old"]["benchmark"]["manifest_sha256"] == Benchmark.open(old).sha256
    assert records["old"]["benchmark"]["manifest_sha256"] != records["new"]["benchmark"]["manifest_sha256"]
    old_levels, new_levels = records["old"]["levels"], records["new"]["levels"]
    assert len(old_levels) == 11 and [lv["num_ood"] for lv in old_levels] == [lv["num_ood"] for lv in new_levels]
    for a, b in zip(old_levels, new_levels):  # the same images and labels: the same results
        assert a["ood_auroc"] == pytest.approx(b["ood_auroc"], abs=1e-6)
