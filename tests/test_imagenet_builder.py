"""The ImageNet builder on a small ImageNet-shaped tree: real ids, the real WordNet hierarchy, real JPEGs."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from dataset_builder.benchmark import Benchmark
from dataset_builder.errors import BenchmarkError
from dataset_builder.imagenet import build_imagenet
from dataset_builder.imagenet_classes import ID_CLASSES, read_synsets
from dataset_builder.shards import iter_samples
from dataset_builder.wordnet import ancestor_distances, load_parents
from image_fixtures import CORRUPT, CORRUPT_TOO_FEW, OPTIONS, REMOVED, SURVIVORS, TOO_FEW, VAL_CLASSES, imagenet_tree


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> tuple[Path, Path]:
    return imagenet_tree(tmp_path_factory.mktemp("imagenet"))


@pytest.fixture(scope="module")
def bench(tree, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("built") / "imagenet"
    build_imagenet(root, *tree, id_classes=VAL_CLASSES, workers=2, progress=False, **OPTIONS)
    return root


def samples(bench: Benchmark, split: str) -> list[dict]:
    return [s for shard in bench.shards(split) for s in iter_samples(bench.shard_path(shard))]


def test_no_pool_class_is_related_to_an_imagenet_1k_class(bench):
    pool = Benchmark.open(bench).ood_classes["id"].tolist()
    assert pool == sorted(SURVIVORS)
    parents, id_set = load_parents(), set(read_synsets(ID_CLASSES))
    for wnid in pool:
        assert wnid not in id_set
        assert not id_set & set(ancestor_distances(wnid, parents))  # not a descendant of an ID class
    for id_class in id_set:
        assert not set(pool) & set(ancestor_distances(id_class, parents))  # not an ancestor of one


def test_every_removal_has_a_reason(bench):
    table = pd.read_parquet(bench / "classes" / "ood.parquet").set_index("id")
    removed = table[table["status"] == "removed"]
    assert len(table) == 21843 and removed["rule"].notna().all()
    for wnid, (rule, id_class) in REMOVED.items():
        assert (table.at[wnid, "rule"], table.at[wnid, "collides_with"]) == (rule, id_class)
    assert table.at[TOO_FEW, "rule"] == table.at[CORRUPT_TOO_FEW, "rule"] == "too_few_images"
    assert table.at["n00288190", "rule"] == "not_in_source"
    assert table.at["n02277268", "status"] == "ood"  # viceroy: biologically distinct, kept by default
    manifest = json.loads((bench / "manifest.json").read_text())
    assert manifest["classes"]["removed_by_rule"]["too_few_images"] == 2
    assert manifest["rules"]["rule_sets"]["visually_ambiguous"]["enabled"] is True
    assert manifest["rules"]["rule_sets"]["biologically_distinct"]["enabled"] is False
    skipped = manifest["skipped_images"]
    assert skipped["count"] == 4 and {(s["class_id"], s["file"]) for s in skipped["images"]} == {
        (c, f"{c}_{i}.JPEG") for c in (CORRUPT, CORRUPT_TOO_FEW) for i in (0, 1)
    }
    assert "0x" not in json.dumps(skipped)


def test_splits_keep_the_original_bytes_and_never_overlap(bench, tree):
    b = Benchmark.open(bench)
    b.verify()
    assert b.image_ext == "jpg" and b.manifest["split"]["n_test"] == 2
    estimation, test = samples(b, "ood_estimation"), samples(b, "ood_test")
    assert len(estimation) == 5 * 6 and len(test) == 5 * 2 and len(samples(b, "id_test")) == 4 * 5
    assert not {s["__key__"] for s in estimation} & {s["__key__"] for s in test}
    assert all(s["path"].startswith("ood/test/000/") and s["num_samples"] == 2 for s in b.shards("ood_test"))
    sample = test[0]
    class_id = json.loads(sample["json"])["class_id"]
    originals = {p.read_bytes() for p in (tree[0] / class_id).iterdir()}
    assert sample["jpg"] in originals
    assert b.id_classes["index"].tolist() == [0, 4, 291, 323]  # ImageNet-1K indices: logits line up


def test_rebuild_is_byte_identical(bench, tree, tmp_path):
    again = tmp_path / "again"
    build_imagenet(again, *tree, id_classes=VAL_CLASSES, workers=1, progress=False, **OPTIONS)
    files = sorted(p.relative_to(bench) for p in bench.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(again) for p in again.rglob("*") if p.is_file())
    assert all((bench / f).read_bytes() == (again / f).read_bytes() for f in files)
    with pytest.raises(BenchmarkError, match="already holds a benchmark; pass --overwrite"):
        build_imagenet(again, *tree, id_classes=VAL_CLASSES, workers=1, progress=False, **OPTIONS)


def test_rule_sets_switch(tree, tmp_path):
    build_imagenet(
        tmp_path / "b",
        *tree,
        id_classes=VAL_CLASSES,
        rule_sets=("biologically_distinct",),
        workers=1,
        progress=False,
        **OPTIONS,
    )
    table = pd.read_parquet(tmp_path / "b" / "classes" / "ood.parquet").set_index("id")
    assert (table.at["n02277268", "rule"], table.at["n02277268", "collides_with"]) == (
        "biologically_distinct",
        "n02279972",
    )
    assert table.at["n03145719", "status"] == "ood"  # cue ball: visually ambiguous, now switched off
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert manifest["rules"]["rule_sets"]["visually_ambiguous"]["enabled"] is False


def test_bad_inputs_are_one_line_errors(tree, tmp_path):
    pool, val = tree
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "ILSVRC2012_val_00000001.JPEG").write_bytes(b"x")
    with pytest.raises(BenchmarkError, match="has no class folders: sort the validation images"):
        build_imagenet(tmp_path / "a", pool, flat, id_classes=VAL_CLASSES, progress=False, **OPTIONS)
    with pytest.raises(BenchmarkError, match="lacks 996 ImageNet-1K class folders, e.g. n01443537"):
        build_imagenet(tmp_path / "a", pool, val, progress=False, **OPTIONS)
    (pool / "not_a_wnid").mkdir()
    try:
        with pytest.raises(BenchmarkError, match="1 classes that are not imagenet21k classes, e.g. 'not_a_wnid'"):
            build_imagenet(tmp_path / "a", pool, val, id_classes=VAL_CLASSES, progress=False, **OPTIONS)
    finally:
        (pool / "not_a_wnid").rmdir()
    with pytest.raises(BenchmarkError, match="test_fraction must be between 0 and 1"):
        build_imagenet(
            tmp_path / "a", pool, val, id_classes=VAL_CLASSES, progress=False, **{**OPTIONS, "test_fraction": 1.5}
        )
