"""The ID fit split: a seeded id_fit subset of the ID training images, deterministic, never a copy of an ID test image,
known to the manifest, the class table, the dataset card and the harness's fitted kappas."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from dataset_builder.benchmark import Benchmark
from dataset_builder.card import write_card
from dataset_builder.errors import BenchmarkError
from dataset_builder.folder import build_folder
from dataset_builder.images import ImageSettings
from dataset_builder.shards import iter_samples
from image_fixtures import jpeg, write_class

SETTINGS = ImageSettings(
    images_per_class=4, n_test=1, min_images=4, ood_classes_per_shard=1, id_classes_per_shard=1, fit_per_class=3
)


def folders(root: Path) -> tuple[Path, Path, Path]:
    """ID test (cat, dog: 3 each), OOD (4 classes of 5), training images: cat 6 (one a copy of an ID test image),
    dog 2."""
    for cid in ("cat", "dog"):
        write_class(root / "id", cid, 3)
    for cid in ("ant", "bee", "fox", "owl"):
        write_class(root / "ood", cid, 5)
    for cid, count in (("cat", 6), ("dog", 2)):
        (root / "train" / cid).mkdir(parents=True)
        for i in range(count):
            (root / "train" / cid / f"train_{i}.JPEG").write_bytes(jpeg(f"train/{cid}/{i}"))
    (root / "train" / "cat" / "copy.JPEG").write_bytes((root / "id" / "cat" / "cat_1.JPEG").read_bytes())
    return root / "id", root / "ood", root / "train"


def fit_samples(bench: Benchmark) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for shard in bench.shards("id_fit"):
        for sample in iter_samples(bench.shard_path(shard)):
            found.setdefault(json.loads(sample["json"])["class_id"], []).append(sample["__key__"])
    return found


def build(tmp_path: Path, name: str, settings: ImageSettings = SETTINGS) -> Benchmark:
    id_dir, ood_dir, train = (tmp_path / "in" / d for d in ("id", "ood", "train"))
    if not id_dir.exists():
        folders(tmp_path / "in")
    build_folder(tmp_path / name, id_dir, ood_dir, settings=settings, workers=1, progress=False, train=train)
    return Benchmark.open(tmp_path / name)


def test_a_seeded_fit_split_per_class_without_copies_of_test_images(tmp_path):
    bench = build(tmp_path, "a")
    found = fit_samples(bench)
    assert {c: len(k) for c, k in found.items()} == {"cat": 3, "dog": 2}
    assert not any("copy" in key for key in found["cat"])
    fit = bench.manifest["fit"]
    assert (fit["split"], fit["per_class"], fit["seed"], fit["num_images"]) == ("id_fit", 3, 0, 5)
    assert fit["short_classes"] == {"dog": 2}
    id_table = pd.read_parquet(tmp_path / "a" / "classes" / "id.parquet").set_index("id")
    assert id_table["num_fit_images"].to_dict() == {"cat": 3, "dog": 2}
    assert id_table["num_images"].to_dict() == {"cat": 3, "dog": 3}  # the test set is untouched
    bench.verify()
    # the copy is passed over only when the seeded order reaches it before 3 good images are found; either way it is
    # never in the split, and when it was read it is listed
    assert all(d["class_id"] == "cat" and d["file"] == "copy.JPEG" for d in fit["duplicates_of_test"]["images"])
    write_card(tmp_path / "a")
    assert "id/fit/*.parquet" in (tmp_path / "a" / "README.md").read_text()


def test_the_copy_is_skipped_and_listed_when_reached(tmp_path):
    bench = build(tmp_path, "all", ImageSettings(**{**SETTINGS.__dict__, "fit_per_class": 10}))
    assert {c: len(k) for c, k in fit_samples(bench).items()} == {"cat": 6, "dog": 2}
    assert bench.manifest["fit"]["duplicates_of_test"] == {
        "count": 1,
        "images": [{"class_id": "cat", "file": "copy.JPEG"}],
    }
    assert bench.manifest["fit"]["short_classes"] == {"cat": 6, "dog": 2}


def test_same_inputs_and_seed_same_bytes_another_seed_another_draw(tmp_path):
    first, second = build(tmp_path, "a"), build(tmp_path, "b")
    assert first.sha256 == second.sha256
    assert (tmp_path / "a" / "id" / "fit" / "000000.tar").read_bytes() == (
        tmp_path / "b" / "id" / "fit" / "000000.tar"
    ).read_bytes()
    draws = {
        tuple(fit_samples(build(tmp_path, f"s{seed}", ImageSettings(**{**SETTINGS.__dict__, "seed": seed})))["cat"])
        for seed in range(4)
    }
    assert len(draws) > 1


def test_bad_training_folders_are_one_line_errors(tmp_path):
    id_dir, ood_dir, train = folders(tmp_path / "in")
    (train / "emu").mkdir()
    with pytest.raises(BenchmarkError, match=r"has 1 class folders that are not ID classes, e.g. 'emu'"):
        build_folder(tmp_path / "x", id_dir, ood_dir, settings=SETTINGS, workers=1, progress=False, train=train)
    (train / "emu").rmdir()
    for f in (train / "dog").iterdir():
        f.unlink()
    (train / "dog").rmdir()
    with pytest.raises(
        BenchmarkError, match=r"1 ID classes are not among the class folders of the training images .*, e.g. dog"
    ):
        build_folder(tmp_path / "x", id_dir, ood_dir, settings=SETTINGS, workers=1, progress=False, train=train)
    assert not (tmp_path / "x").exists()
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from dataset_builder.cli import main; main()",
            "folder",
            str(tmp_path / "y"),
            "--id",
            str(id_dir),
            "--ood",
            str(ood_dir),
            "--train",
            str(train),
            "--fit-per-class",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "error: fit_per_class must be at least 1, got 0"
    ]
    assert not (tmp_path / "y").exists()
    (train / "dog").mkdir()
    (train / "dog" / "broken.JPEG").write_bytes(b"not an image")
    with pytest.raises(BenchmarkError, match=r"ID class dog has no readable training image"):
        build_folder(tmp_path / "z", id_dir, ood_dir, settings=SETTINGS, workers=1, progress=False, train=train)


def test_a_fitted_kappa_fits_on_id_fit_and_says_so(tmp_path):
    from harness.run import evaluate

    bench = build(tmp_path, "a")
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 6), torch.nn.ReLU(), torch.nn.Linear(6, 2)
    ).eval()
    config = {
        "input_size": (3, 8, 8),
        "mean": (0.5, 0.5, 0.5),
        "std": (0.5, 0.5, 0.5),
        "interpolation": "bilinear",
        "crop_pct": 1.0,
    }
    result = evaluate(
        model, config, benchmark=tmp_path / "a", kappas=["knn:k=1", "softmax"], num_levels=2, workers=0, progress=False
    )
    knn = next(r for r in result.records if r["kappa"]["name"] == "knn")
    assert knn["kappa"]["params"]["fit"] == {
        "split": "id_fit",
        "size": 5,
        "seed": 0,
        "sample": {"per_class": 3, "seed": 0},
    }
    assert knn["timings"]["id_fit_images"] == 5 and len(knn["levels"]) == 2
    assert result.stats["images_forwarded"] == 5 + len(bench.id_classes) * 3 + sum(
        s["num_samples"] for s in bench.shards("ood_estimation") + bench.shards("ood_test")
    )


def test_the_manifest_lists_the_fit_shards_and_datasets_loads_them(tmp_path):
    import datasets

    from dataset_builder.loading import sample_features

    bench = build(tmp_path, "a")
    assert (
        bench.manifest["fit"]["shards"]
        == [s["path"] for s in bench.shards("id_fit")]
        == ["id/fit/000000.tar", "id/fit/000001.tar"]
    )
    bench.verify()
    files = [str(tmp_path / "a" / p) for p in bench.manifest["fit"]["shards"]]
    loaded = datasets.load_dataset(
        "webdataset", data_files={"id_fit": files}, split="id_fit", features=sample_features("jpg")
    )
    assert sorted(row["json"]["class_id"] for row in loaded) == ["cat"] * 3 + ["dog"] * 2


def test_imagenet_builder_draws_id_fit_from_wnid_folders(tmp_path):
    from dataset_builder.imagenet import build_imagenet
    from image_fixtures import OPTIONS, VAL_CLASSES, imagenet_tree

    pool, val = imagenet_tree(tmp_path / "in")
    for cid in VAL_CLASSES:
        (tmp_path / "train" / cid).mkdir(parents=True)
        for i in range(2 if cid == VAL_CLASSES[0] else 6):
            (tmp_path / "train" / cid / f"{cid}_{i}.JPEG").write_bytes(jpeg(f"train/{cid}/{i}"))
    build_imagenet(
        tmp_path / "b",
        pool,
        val,
        id_classes=VAL_CLASSES,
        train=tmp_path / "train",
        fit_per_class=4,
        workers=1,
        progress=False,
        **OPTIONS,
    )
    bench = Benchmark.open(tmp_path / "b")
    fit = bench.manifest["fit"]
    assert {c: len(k) for c, k in fit_samples(bench).items()} == {VAL_CLASSES[0]: 2, **{c: 4 for c in VAL_CLASSES[1:]}}
    assert (fit["num_images"], fit["short_classes"]) == (14, {VAL_CLASSES[0]: 2})
    assert bench.id_classes.set_index("id")["num_fit_images"].to_dict() == {
        VAL_CLASSES[0]: 2,
        **{c: 4 for c in VAL_CLASSES[1:]},
    }


def test_a_refused_train_folder_keeps_the_benchmark_it_would_replace(tmp_path):
    bench = build(tmp_path, "a")
    before = {p: p.read_bytes() for p in sorted((tmp_path / "a").rglob("*")) if p.is_file()}
    train = tmp_path / "in" / "train"
    (train / "emu").mkdir()
    for folder, message in ((train, "not ID classes, e.g. 'emu'"), (tmp_path / "absent", "absent is not a folder")):
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                "from dataset_builder.cli import main; main()",
                "folder",
                str(tmp_path / "a"),
                "--id",
                str(tmp_path / "in" / "id"),
                "--ood",
                str(tmp_path / "in" / "ood"),
                "--train",
                str(folder),
                "--overwrite",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
        assert message in done.stderr
        assert {p: p.read_bytes() for p in sorted((tmp_path / "a").rglob("*")) if p.is_file()} == before
    assert bench.sha256 == Benchmark.open(tmp_path / "a").sha256
