"""The ImageNet builder on a small ImageNet-shaped tree: real ids, the real WordNet hierarchy, real JPEGs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from dataset_builder.benchmark import Benchmark
from dataset_builder.errors import BenchmarkError
from dataset_builder.imagenet import build_imagenet, pick_id_classes, removal_lines
from dataset_builder.imagenet_classes import ID_CLASSES, read_synsets
from dataset_builder.levels import max_levels, ood_classes_needed
from dataset_builder.shards import iter_samples
from dataset_builder.sources import ClassTarSource
from dataset_builder.wordnet import ancestor_distances, load_parents
from harness.method.severity import DEFAULT_NUM_LEVELS, num_windows, window_starts
from image_fixtures import (
    CORRUPT,
    CORRUPT_TOO_FEW,
    OPTIONS,
    REMOVED,
    SURVIVORS,
    TOO_FEW,
    VAL_CLASSES,
    class_tars,
    imagenet_tree,
    jpeg,
)


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


def test_the_removals_are_said_one_line_per_rule_with_its_count(bench):
    table = pd.read_parquet(bench / "classes" / "ood.parquet")
    counts = table.loc[table["status"] == "removed", "rule"].value_counts()
    width = len(f"{counts.max():,}")
    assert removal_lines(json.loads((bench / "manifest.json").read_text())) == [
        f"removed {len(table) - 5:,} of {len(table):,} pool classes (classes/ood.parquet names each one's rule):",
        *(
            f"  {counts[rule]:>{width},} {rule}: {why}"
            for rule, why in [
                ("id_class", "an ImageNet-1K class itself"),
                ("hypernym", "a WordNet hypernym (an is-a ancestor) of an ImageNet-1K class"),
                ("hyponym", "a WordNet hyponym (an is-a descendant) of an ImageNet-1K class"),
                ("visually_ambiguous", "looks the same as an ImageNet-1K class in photographs (a rule set)"),
                ("not_in_source", "the class has no folder in the OOD image source"),
                ("too_few_images", "fewer than min_images readable images in the source"),
            ]
        ),
    ]  # in the order the rules apply; no line for a rule that removed nothing (biologically_distinct is off)
    assert len(counts) == 6 and counts["too_few_images"] == 2 and counts["id_class"] == 999


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
    with pytest.raises(BenchmarkError) as lacking:
        build_imagenet(tmp_path / "a", pool, val, progress=False, **OPTIONS)
    assert str(lacking.value) == (
        f"{val} lacks 996 ImageNet-1K class folders, e.g. n01443537 "
        "(it holds 4: --id-classes 4 builds a small benchmark of them)"
    )
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


def test_the_builder_counts_the_ood_classes_levels_need_as_the_harness_does():
    for num_id, num_levels in ((1000, DEFAULT_NUM_LEVELS), (12, 11), (4, 2), (1, 7)):
        needed = ood_classes_needed(num_id, num_levels)
        assert num_windows(needed, num_id) == num_levels == max_levels(needed, num_id)
        assert num_windows(needed - 1, num_id) == num_levels - 1 == max_levels(needed - 1, num_id)
        assert len(set(window_starts(num_windows(needed, num_id), num_levels))) == num_levels  # distinct levels
    assert ood_classes_needed(1000, 11) == 1010 and max_levels(3, 4) == 0
    with pytest.raises(BenchmarkError, match="--levels must be at least 2"):
        ood_classes_needed(4, 1)


def test_pick_id_classes_is_seeded_and_each_class_keeps_its_place():
    present = read_synsets(ID_CLASSES)[::25]  # 40 classes
    picked = pick_id_classes(present, 12, seed=0)
    assert len(picked) == 12 and picked == sorted(picked) and set(picked) <= set(present)
    assert picked == pick_id_classes(reversed(present), 12, seed=0)
    assert pick_id_classes(present, 12, seed=1) != picked
    fewer = present[:30]
    assert set(picked) & set(fewer) <= set(pick_id_classes(fewer, 12, seed=0))  # fewer rivals: still picked
    assert pick_id_classes(present, 40, seed=0) == sorted(present)


def test_a_number_of_id_classes_picks_them_from_the_validation_source(tree, tmp_path):
    pool, val = tree
    (tmp_path / "train").mkdir()
    for cid in VAL_CLASSES:  # training images of all four: a subset's --train holds more classes than it keeps
        (tmp_path / "train" / cid).mkdir()
        for i in range(3):
            (tmp_path / "train" / cid / f"{cid}_{i}.JPEG").write_bytes(jpeg(f"train/{cid}/{i}"))
    build_imagenet(
        tmp_path / "b", pool, val, id_classes=3, train=tmp_path / "train", fit_per_class=2, progress=False, **OPTIONS
    )
    b = Benchmark.open(tmp_path / "b")
    picked = pick_id_classes(VAL_CLASSES, 3, seed=OPTIONS["seed"])
    all_ids = read_synsets(ID_CLASSES)
    assert b.id_classes["id"].tolist() == picked and set(picked) < set(VAL_CLASSES)
    assert b.id_classes["index"].tolist() == [all_ids.index(c) for c in picked]
    assert b.manifest["source"]["id_subset"]["id_classes"] == 3
    assert b.manifest["fit"]["num_images"] == 3 * 2 and len(samples(b, "id_test")) == 3 * 5
    assert b.ood_classes["id"].tolist() == sorted(SURVIVORS)
    for bad, message in (
        (5, f"--id-classes 5: {val} holds 4 ImageNet-1K class folders, not 5"),
        (0, "--id-classes must be at least 1, got 0"),
    ):
        with pytest.raises(BenchmarkError) as refused:
            build_imagenet(tmp_path / "x", pool, val, id_classes=bad, progress=False, **OPTIONS)
        assert str(refused.value) == message
    assert not (tmp_path / "x").exists()


def test_errors_name_class_tars_or_class_folders_as_the_source_holds_them(tree, tmp_path):
    pool, val = tree
    val_tars = class_tars(val, tmp_path / "val-tars")
    with pytest.raises(BenchmarkError) as lacking:
        build_imagenet(tmp_path / "a", pool, val_tars, progress=False, **OPTIONS)
    assert str(lacking.value) == (
        f"{val_tars} lacks 996 ImageNet-1K class tars, e.g. n01443537 "
        "(it holds 4: --id-classes 4 builds a small benchmark of them)"
    )
    with pytest.raises(BenchmarkError, match=f"^--id-classes 9: {val_tars} holds 4 ImageNet-1K class tars, not 9$"):
        build_imagenet(tmp_path / "a", pool, val_tars, id_classes=9, progress=False, **OPTIONS)
    assert not (tmp_path / "a").exists()


def test_a_pool_too_small_for_the_levels_is_refused_or_warned_about_before_any_image_is_read(tree, tmp_path, capsys):
    """Refused: fewer OOD classes of --min-images files than 2 levels need (|ID| + 1); warned: fewer than the asked
    levels need (|ID| + levels - 1), before the build and again after it when decoding removed more."""
    pool, val = tree
    tars = class_tars(pool, tmp_path / "pool-tars")
    for source in (pool, tars):  # a class tar's headers are counted, up to --min-images of them
        with pytest.raises(BenchmarkError) as refused:
            build_imagenet(
                tmp_path / "a", source, val, id_classes=VAL_CLASSES, progress=False, **{**OPTIONS, "min_images": 11}
            )
        assert str(refused.value) == (
            f"{source} holds 7 OOD classes of the pool, 0 of them with --min-images 11 images or more; 4 ID classes "
            "need 5 for the fewest severity levels (2) and 14 for --levels 11 (|ID| + levels - 1): lower "
            "--min-images, give more OOD classes or fewer ID classes (--id-classes)"
        )
        assert not (tmp_path / "a").exists() and not (tmp_path / "a.partial").exists()  # no block was started
    tar_source = ClassTarSource.from_folder(str(tars))
    assert [tar_source.holds_images(CORRUPT_TOO_FEW, n) for n in (6, 7, 8)] == [True, True, False]  # 7 files
    capsys.readouterr()
    build_imagenet(tmp_path / "b", pool, val, id_classes=VAL_CLASSES, workers=1, progress=False, **OPTIONS)
    assert capsys.readouterr().err.splitlines() == [
        f"warning: {pool} holds 7 OOD classes of the pool, 6 of them with --min-images 6 images or more; 11 severity "
        "levels of 4 ID classes need 14 (|ID| + levels - 1): the harness will allow --levels 3 at most",
        "warning: 5 OOD classes kept after the image rules (--min-images 6): 11 severity levels of 4 ID classes need "
        "14; the harness will allow --levels 2 at most",  # the corrupt class had 7 files, 5 readable
    ]
    build_imagenet(
        tmp_path / "c", pool, val, id_classes=VAL_CLASSES, num_levels=2, workers=1, progress=False, **OPTIONS
    )
    assert capsys.readouterr().err == ""
    assert Benchmark.open(tmp_path / "c").manifest["classes"]["ood"] == 5 == ood_classes_needed(4, 2)


def test_a_pool_the_image_rules_leave_too_small_is_an_error_and_nothing_is_written(tree, tmp_path):
    """Five classes hold --min-images 9 files, as 2 levels of 4 ID classes need, so the build starts; one of them has 2
    that do not decode, so 4 are left: refused, and nothing is written. Through the command line: exit 2, one line."""
    pool, val = tree
    for source in (pool, class_tars(pool, tmp_path / "pool-tars")):
        with pytest.raises(BenchmarkError) as refused:
            build_imagenet(
                tmp_path / "a",
                source,
                val,
                id_classes=VAL_CLASSES,
                workers=1,
                progress=False,
                **{**OPTIONS, "min_images": 9, "images_per_class": 9},
            )
        assert str(refused.value) == (
            "4 OOD classes left of the 7 in the source (3 with fewer than --min-images 9 readable images); the "
            "benchmark needs at least 5: lower --min-images or give more classes (nothing was written)"
        )
        assert not (tmp_path / "a").exists() and not (tmp_path / "a.partial").exists()
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from dataset_builder.cli import main; main()",
            "imagenet",
            str(tmp_path / "b"),
            "--imagenet21k",
            str(pool),
            "--val",
            str(val),
            "--id-classes",
            "4",
        ],
        capture_output=True,
        text=True,
    )
    assert (done.returncode, done.stdout, done.stderr.splitlines()) == (
        2,
        "",
        [
            f"error: {pool} holds 7 OOD classes of the pool, 0 of them with --min-images 200 images or more; 4 ID "
            "classes need 5 for the fewest severity levels (2) and 14 for --levels 11 (|ID| + levels - 1): lower "
            "--min-images, give more OOD classes or fewer ID classes (--id-classes)"
        ],
    )
    assert not (tmp_path / "b").exists()
