"""Per-model levels: level manifests, the dataset card's configs, loading through ``datasets``, locally and from the Hub
by tag."""

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
    table = level_table(
        [[s, s + 1] for s in starts],
        [0.1 * i for i in range(5)],
        [0.1 * s for s in starts],
        [level / 10 for level in range(11)],
        ids,
    )
    table.to_parquet(work / "levels.parquet")
    add_levels(root, work / "levels.parquet", "tiny/model", "softmax")
    return root


LEVELS = [f"level_{i:02d}" for i in range(11)]


def class_ids(bench: Path) -> list[str]:
    """The ID class ids by index, then the OOD pool's by index: the names of the ``ClassLabel``."""
    b = Benchmark.open(bench)
    return b.id_classes["id"].tolist() + b.ood_classes["id"].tolist()


def level_07_shards(bench: Path) -> set[str]:
    return {(bench / f"ood/test/000/{c}.tar").resolve().as_posix() for c in level_07_classes(bench)}


def level_07_classes(bench: Path) -> list[str]:
    return Benchmark.open(bench).ood_classes["id"].tolist()[2:4]  # start (7 * 4) // 10 = 2


def test_card_declares_features_a_default_pool_and_reference_configs(bench):
    text = (bench / "README.md").read_text()
    meta = yaml.safe_load(text.split("---\n")[1])
    configs = {c["config_name"]: c for c in meta["configs"]}
    assert (
        list(configs) == ["pool", CONFIG, *(f"{CONFIG}__{split}" for split in LEVELS)]
        and configs["pool"]["default"] is True
    )
    assert [f["split"] for f in configs["pool"]["data_files"]] == ["id_test", "ood_estimation", "ood_test"]
    level_files = {f["split"]: f["path"] for f in configs[CONFIG]["data_files"]}
    assert list(level_files) == ["id_test", *LEVELS]
    assert level_files["level_07"] == [f"ood/test/000/{c}.tar" for c in level_07_classes(bench)]
    assert configs[f"{CONFIG}__level_07"]["data_files"] == [{"split": "level_07", "path": level_files["level_07"]}]
    held = {
        "pool": class_ids(bench),
        CONFIG: class_ids(bench),
        f"{CONFIG}__level_07": level_07_classes(bench),
    }  # by pool index
    infos = {info["config_name"]: {f["name"]: f for f in info["features"]} for info in meta["dataset_info"]}
    assert list(infos) == list(configs) and all(features["jpg"]["dtype"] == "image" for features in infos.values())
    for config, names in held.items():
        label = {"class_label": {"names": {str(i): n for i, n in enumerate(names)}}}
        assert infos[config]["json"]["struct"] == [{"name": "class_id", "dtype": label}]
    assert (bench / "levels" / "reference.txt").read_text() == f"{CONFIG}\n"


def test_a_level_loads_locally_with_its_classes_and_counts(bench):
    level = load_level(bench, "tiny/model", "softmax", 7)
    assert len(level) == 2 * 2
    label = level.features["json"]["class_id"]
    assert sorted({label.int2str(row["class_id"]) for row in level["json"]}) == level_07_classes(bench)
    assert level[0]["jpg"].size == (16, 16)
    streamed = list(load_level(bench, "tiny/model", "softmax", 7, streaming=True))
    assert sorted(r["__key__"] for r in streamed) == sorted(level["__key__"])
    by_config = datasets.load_dataset(str(bench), CONFIG, split="level_07")
    assert sorted(by_config["__key__"]) == sorted(level["__key__"])


def test_one_level_loads_through_load_dataset_preparing_that_split_alone(bench, tmp_path):
    whole = datasets.load_dataset_builder(str(bench), CONFIG, cache_dir=str(tmp_path / "whole"))
    whole.download_and_prepare()
    assert list(whole.info.splits) == ["id_test", *LEVELS]  # without streaming, a split of a config prepares them all
    one = datasets.load_dataset_builder(str(bench), f"{CONFIG}__level_07", cache_dir=str(tmp_path / "one"))
    one.download_and_prepare()
    assert list(one.info.splits) == ["level_07"]
    level = one.as_dataset(split="level_07")
    assert set(level["__url__"]) == level_07_shards(bench) and len(level) == 2 * 2
    stream = datasets.load_dataset(str(bench), CONFIG, split="level_07", streaming=True)
    assert sorted(r["__key__"] for r in stream) == sorted(level["__key__"])
    assert {r["__url__"] for r in stream} == level_07_shards(bench)


def test_the_class_id_is_a_class_label_whose_ints_are_the_class_index(bench):
    ids, num_id = class_ids(bench), len(Benchmark.open(bench).id_classes)
    for config, split, names in (
        ("pool", "id_test", ids),
        ("pool", "ood_test", ids),
        (f"{CONFIG}__level_07", "level_07", level_07_classes(bench)),
    ):
        ds = datasets.load_dataset(str(bench), config, split=split, streaming=True)
        assert ds.features["json"]["class_id"].names == names
        rows = list(ds)
        assert rows and all(names[r["json"]["class_id"]] == r["__key__"].split("__")[0] for r in rows)
        if config == "pool":  # ID: the ID class index; OOD: number of ID classes + pool index
            assert all((r["json"]["class_id"] < num_id) == (split == "id_test") for r in rows)
    level = load_level(bench, "tiny/model", "softmax", 7)
    assert level.features["json"]["class_id"].names == level_07_classes(bench)
    assert sorted(level_07_classes(bench)[row["class_id"]] for row in level["json"]) == sorted(
        k.split("__")[0] for k in level["__key__"]
    )


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
    by_config = datasets.load_dataset("cood/imagenet-tiny", f"{CONFIG}__level_07", split="level_07", revision="1.0.0")
    assert sorted(zip(by_config["__key__"], by_config["json"])) == sorted(zip(local["__key__"], local["json"]))
    assert by_config.features["json"]["class_id"].names == level_07_classes(bench)
    pool = datasets.load_dataset("cood/imagenet-tiny", split="ood_test", revision="1.0.0", streaming=True)
    assert len(list(pool)) == 5 * 2
