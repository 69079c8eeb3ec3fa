"""Per-model levels: level manifests, the dataset card's configs, loading through ``datasets``, locally and from the Hub by tag."""

from __future__ import annotations

from pathlib import Path

import datasets
import pytest
import yaml
from huggingface_hub import HfApi

from dataset_builder.benchmark import Benchmark
from dataset_builder.card import add_levels
from dataset_builder.errors import BenchmarkError
from dataset_builder.imagenet import build_imagenet
from dataset_builder.levels import level_table
from dataset_builder.loading import load_level
from dataset_builder.publish import publish
from image_fixtures import OPTIONS, VAL_CLASSES, imagenet_tree

CONFIG = "tiny-model__softmax"


@pytest.fixture(scope="module")
def bench(tmp_path_factory) -> Path:
    """The small ImageNet benchmark with one reference level manifest: 11 levels of 2 classes over 5 OOD classes."""
    work = tmp_path_factory.mktemp("levels")
    root = work / "imagenet"
    build_imagenet(root, *imagenet_tree(work), id_classes=VAL_CLASSES, workers=1, progress=False, **OPTIONS)
    ids = Benchmark.open(root).ood_classes["id"].tolist()
    starts = [(level * 4) // 10 for level in range(10)] + [3]
    table = level_table([[s, s + 1] for s in starts], [0.1 * i for i in range(5)], [0.1 * s for s in starts],
                        [level / 10 for level in range(11)], ids)
    table.to_parquet(work / "levels.parquet")
    add_levels(root, work / "levels.parquet", "tiny/model", "softmax")
    return root


def level_07_classes(bench: Path) -> list[str]:
    return Benchmark.open(bench).ood_classes["id"].tolist()[2:4]  # start (7 * 4) // 10 = 2


def test_card_declares_features_a_default_pool_and_reference_configs(bench):
    text = (bench / "README.md").read_text()
    meta = yaml.safe_load(text.split("---\n")[1])
    configs = {c["config_name"]: c for c in meta["configs"]}
    assert list(configs) == ["pool", CONFIG] and configs["pool"]["default"] is True
    assert [f["split"] for f in configs["pool"]["data_files"]] == ["id_test", "ood_estimation", "ood_test"]
    level_files = {f["split"]: f["path"] for f in configs[CONFIG]["data_files"]}
    assert list(level_files) == ["id_test"] + [f"level_{i:02d}" for i in range(11)]
    assert level_files["level_07"] == [f"ood/test/000/{c}.tar" for c in level_07_classes(bench)]
    features = {f["name"]: f for f in meta["dataset_info"][0]["features"]}
    assert features["jpg"]["dtype"] == "image" and features["json"]["struct"] == [{"name": "class_id", "dtype": "string"}]
    assert (bench / "levels" / "reference.txt").read_text() == f"{CONFIG}\n"


def test_a_level_loads_locally_with_its_classes_and_counts(bench):
    level = load_level(bench, "tiny/model", "softmax", 7)
    assert len(level) == 2 * 2
    assert sorted({row["class_id"] for row in level["json"]}) == level_07_classes(bench)
    assert level[0]["jpg"].size == (16, 16)
    streamed = list(load_level(bench, "tiny/model", "softmax", 7, streaming=True))
    assert sorted(r["__key__"] for r in streamed) == sorted(level["__key__"])
    by_config = datasets.load_dataset(str(bench), CONFIG, split="level_07")
    assert sorted(by_config["__key__"]) == sorted(level["__key__"])


def test_unknown_levels_are_one_line_errors(bench):
    with pytest.raises(BenchmarkError, match="has no level manifest for model 'other' and kappa 'softmax'"):
        load_level(bench, "other", "softmax", 7)
    with pytest.raises(BenchmarkError, match=r"level 11 does not exist; the levels are 0..10"):
        load_level(bench, "tiny/model", "softmax", 11)


def test_publish_then_load_by_tag_round_trips(bench, hub_server):
    sha = publish(bench, "cood/imagenet-tiny", tag="1.0.0", endpoint=hub_server)
    assert HfApi(endpoint=hub_server).dataset_info("cood/imagenet-tiny", revision="1.0.0").sha == sha
    local = load_level(bench, "tiny/model", "softmax", 7)
    remote = load_level("cood/imagenet-tiny", "tiny/model", "softmax", 7, revision="1.0.0")
    assert sorted(remote["__key__"]) == sorted(local["__key__"])
    assert {r["__key__"]: r["jpg"].tobytes() for r in remote} == {r["__key__"]: r["jpg"].tobytes() for r in local}
    by_config = datasets.load_dataset("cood/imagenet-tiny", CONFIG, split="level_07", revision="1.0.0")
    assert sorted(by_config["__key__"]) == sorted(local["__key__"])
    pool = datasets.load_dataset("cood/imagenet-tiny", split="ood_test", revision="1.0.0", streaming=True)
    assert len(list(pool)) == 5 * 2
