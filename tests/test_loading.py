"""Per-model levels: level manifests, the dataset card's configs, loading through ``datasets``, locally and from the Hub
by tag."""

from __future__ import annotations

import re
import shutil
from dataclasses import replace
from pathlib import Path

import datasets
import PIL.Image
import pytest
import torch
import yaml
from datasets.info import DatasetInfosDict
from huggingface_hub import DatasetCard, HfApi
from typer.testing import CliRunner

import dataset_builder.loading
from dataset_builder.benchmark import Benchmark
from dataset_builder.card import add_levels
from dataset_builder.cli import app
from dataset_builder.errors import BenchmarkError
from dataset_builder.glyphs.build import build as build_glyphs
from dataset_builder.imagenet import build_imagenet
from dataset_builder.levels import level_file_name, level_table
from dataset_builder.loading import label_names, load_level
from dataset_builder.publish import publish
from glyph_fixtures import TINY
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


def labels(bench: Path) -> dict[str, int]:
    """Class id -> label, as the class tables give it (ID classes and the OOD pool)."""
    b = Benchmark.open(bench)
    return dict(zip(b.id_classes["id"], b.id_classes["label"])) | dict(zip(b.ood_classes["id"], b.ood_classes["label"]))


def table_names(bench: Path) -> list[str]:
    """The class tables' name of each label, 0 to the largest; ``<unused N>`` where no class has the label."""
    b = Benchmark.open(bench)
    named = dict(zip(b.id_classes["label"], b.id_classes["name"])) | dict(
        zip(b.ood_classes["label"], b.ood_classes["name"])
    )
    return [named.get(label, f"<unused {label}>") for label in range(max(named) + 1)]


def level_07_classes(bench: Path) -> list[str]:
    return Benchmark.open(bench).ood_classes["id"].tolist()[2:4]  # start (7 * 4) // 10 = 2


def test_card_declares_features_a_default_pool_and_reference_configs(bench):
    text = (bench / "README.md").read_text()
    meta = yaml.safe_load(text.split("---\n")[1])
    configs = {c["config_name"]: c for c in meta["configs"]}
    assert (
        list(configs) == ["pool", "id", CONFIG, *(f"{CONFIG}__{split}" for split in LEVELS)]
        and configs["pool"]["default"] is True
    )
    assert configs["id"]["data_files"] == [{"split": "id_test", "path": "id/test/*.parquet"}]
    assert [f["split"] for f in configs["pool"]["data_files"]] == ["id_test", "ood_estimation", "ood_test"]
    level_files = {f["split"]: f["path"] for f in configs[CONFIG]["data_files"]}
    assert list(level_files) == ["id_test", *LEVELS]
    assert level_files["level_07"] == [f"ood/test/000/{c}.parquet" for c in level_07_classes(bench)]
    assert configs[f"{CONFIG}__level_07"]["data_files"] == [{"split": "level_07", "path": level_files["level_07"]}]
    names = {str(label): name for label, name in enumerate(table_names(bench))}
    features = {
        "image": {"dtype": "image"},
        "label": {"dtype": {"class_label": {"names": names}}},
        "key": {"dtype": "string"},
        "class_id": {"dtype": "string"},
    }
    assert sorted(i["config_name"] for i in meta["dataset_info"]) == sorted(configs)
    assert all(
        {f["name"]: {k: v for k, v in f.items() if k != "name"} for f in info["features"]} == features
        for info in meta["dataset_info"]
    )
    assert text.count("class_label:") == 1  # written once, an alias in every other config
    assert (bench / "levels" / "reference.txt").read_text() == f"{CONFIG}\n"


def test_a_level_loads_locally_with_its_classes_and_counts(bench):
    level = load_level(bench, "tiny/model", "softmax", 7)
    assert len(level) == 2 * 2
    assert level.column_names == ["image", "label", "key", "class_id"]
    assert sorted(set(level["class_id"])) == level_07_classes(bench)
    assert level[0]["image"].size == (16, 16)
    assert level["label"] == [labels(bench)[c] for c in level["class_id"]]
    assert level.features == datasets.load_dataset(str(bench), "pool", split="id_test").features
    assert level.features["label"] == datasets.ClassLabel(names=table_names(bench))
    streamed = list(load_level(bench, "tiny/model", "softmax", 7, streaming=True))
    assert sorted(r["key"] for r in streamed) == sorted(level["key"])
    by_config = datasets.load_dataset(str(bench), CONFIG, split="level_07")
    assert sorted(by_config["key"]) == sorted(level["key"])


def test_one_level_loads_through_load_dataset_preparing_that_split_alone(bench, tmp_path):
    whole = datasets.load_dataset_builder(str(bench), CONFIG, cache_dir=str(tmp_path / "whole"))
    whole.download_and_prepare()
    assert list(whole.info.splits) == ["id_test", *LEVELS]  # without streaming, a split of a config prepares them all
    one = datasets.load_dataset_builder(str(bench), f"{CONFIG}__level_07", cache_dir=str(tmp_path / "one"))
    one.download_and_prepare()
    assert list(one.info.splits) == ["level_07"]
    level = one.as_dataset(split="level_07")
    assert sorted(set(level["class_id"])) == level_07_classes(bench) and len(level) == 2 * 2
    stream = datasets.load_dataset(str(bench), CONFIG, split="level_07", streaming=True)
    assert sorted(r["key"] for r in stream) == sorted(level["key"])
    assert {r["class_id"] for r in stream} == set(level_07_classes(bench))


def test_a_class_has_one_label_in_every_config_the_class_tables_label(bench):
    table, num_id = labels(bench), len(Benchmark.open(bench).id_classes)
    assert list(table.values())[:num_id] == list(range(num_id))  # ID: the logits' column
    assert all(label >= num_id for label in list(table.values())[num_id:])  # OOD: after the ID classes
    seen: dict[tuple[str, str], dict[str, set]] = {}
    for config, split in (
        ("pool", "id_test"),
        ("id", "id_test"),
        ("pool", "ood_test"),
        (CONFIG, "level_07"),
        (f"{CONFIG}__level_07", "level_07"),
    ):
        ds = datasets.load_dataset(str(bench), config, split=split)
        assert isinstance(ds[0]["image"], PIL.Image.Image) and ds[0]["image"].size == (16, 16)
        assert ds.features["label"] == datasets.ClassLabel(names=table_names(bench))
        assert all(type(label) is int for label in ds["label"])
        found: dict[str, set] = {}
        for row in ds.select_columns(["label", "class_id"]):
            found.setdefault(row["class_id"], set()).add(row["label"])
        assert found and all(found[c] == {table[c]} for c in found)
        seen[(config, split)] = found
    level_class = level_07_classes(bench)[0]
    assert (
        seen[("pool", "ood_test")][level_class]
        == seen[(CONFIG, "level_07")][level_class]
        == seen[(f"{CONFIG}__level_07", "level_07")][level_class]
    )
    assert seen[("pool", "id_test")] == seen[("id", "id_test")]


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
    assert sorted(remote["key"]) == sorted(local["key"])
    assert {r["key"]: r["image"].tobytes() for r in remote} == {r["key"]: r["image"].tobytes() for r in local}
    by_config = datasets.load_dataset("cood/imagenet-tiny", f"{CONFIG}__level_07", split="level_07", revision="1.0.0")
    assert sorted(zip(by_config["key"], by_config["label"])) == sorted(zip(local["key"], local["label"]))
    assert set(by_config["class_id"]) == set(level_07_classes(bench))
    published = set(HfApi(endpoint=hub_server).list_repo_files("cood/imagenet-tiny", repo_type="dataset"))
    shards = Benchmark.open(bench).manifest["shards"]
    assert {s["parquet"]["path"] for s in shards} | {s["path"] for s in shards} <= published  # the copies went
    pool = datasets.load_dataset("cood/imagenet-tiny", split="ood_test", revision="1.0.0", streaming=True)
    assert len(list(pool)) == 5 * 2


def test_the_levels_command_prints_the_calls_that_load_what_it_wrote(bench, tmp_path):
    root = tmp_path / "copy"
    shutil.copytree(bench, root)
    level_file = root / "levels" / f"{CONFIG}.parquet"
    for reference, pair in ((True, ("other/model", "energy")), (False, ("third", "softmax"))):
        args = ["levels", str(root), str(level_file), "--model", pair[0], "--kappa", pair[1]]
        done = CliRunner().invoke(app, args + ([] if reference else ["--no-reference"]))
        assert done.exit_code == 0, done.output
        lines = done.output.splitlines()
        assert lines[0] == str(root / "levels" / level_file_name(*pair))
        assert lines[1] == "levels level_00 to level_10; level 7 loads with:"
        local = lines[2].removeprefix("  local:     ")
        published = lines[3].removeprefix("  published: ")
        name = f"{level_file_name(*pair).removesuffix('.parquet')}"
        if reference:
            assert (
                local == f'datasets.load_dataset("{root.resolve().as_posix()}", "{name}__level_07", split="level_07")'
            )
            assert published.startswith(f'datasets.load_dataset("<repo id>", "{name}__level_07", split="level_07", ')
        else:
            assert local == f'dataset_builder.loading.load_level("{root.resolve().as_posix()}", "third", "softmax", 7)'
        assert published.endswith(', revision="1.0.0")  (after cood-dataset publish)')
        level = eval(local, {"datasets": datasets, "dataset_builder": dataset_builder})
        assert sorted(level["key"]) == sorted(load_level(bench, "tiny/model", "softmax", 7)["key"])
        assert isinstance(level[0]["image"], PIL.Image.Image)
        assert level["label"] == [labels(bench)[c] for c in level["class_id"]]


@pytest.fixture(scope="module")
def trained_glyphs(tmp_path_factory) -> Path:
    """The tiny glyph benchmark with an ID training split of 2 images per class."""
    root = tmp_path_factory.mktemp("trained") / "glyphs"
    build_glyphs(root, progress=False, workers=1, **{**TINY, "id_train_per_class": 2})
    return root


def run_docs_recipe(root: Path, split: str) -> tuple[str, dict]:
    """The training recipe of docs/loading.md, run as written on ``root`` (its ``split`` of config ``id``): its code
    and its names."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "loading.md").read_text()
    section = text.split("## Training a model on the ID training split")[1].split("\n## ")[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    code = code.replace("path/to/benchmark", str(root)).replace('split="id_train"', f'split="{split}"')
    namespace: dict = {}
    exec(compile(code, "docs/loading.md", "exec"), namespace)
    return code, namespace


@pytest.mark.parametrize("which, split, rows", [("glyphs", "id_train", 36 * 2), ("imagenet", "id_test", 4 * 5)])
def test_the_docs_recipe_runs_unchanged_on_glyphs_and_imagenet_with_the_class_names_in_every_config(
    which, split, rows, trained_glyphs, bench
):
    root = {"glyphs": trained_glyphs, "imagenet": bench}[which]
    code, namespace = run_docs_recipe(root, split)
    assert "rename" not in code and "load_dataset(" in code and "with_transform" in code  # the stock recipe
    names, ids = table_names(root), Benchmark.open(root).id_classes
    assert len(namespace["train"]) == rows and namespace["names"] == names
    assert namespace["names"][: len(ids)] == ids["name"].tolist() and ids["label"].tolist() == list(range(len(ids)))
    batch = next(iter(namespace["loader"]))
    assert batch["image"].shape == (min(64, rows), 3, 224, 224) and batch["label"].dtype == torch.int64
    assert set(batch["label"].tolist()) <= set(range(len(ids)))
    raw = datasets.load_dataset(str(root), "id", split=split)
    assert raw.column_names == ["image", "label", "key", "class_id"]
    of_class = dict(zip(ids["id"], ids["name"]))
    assert [names[label] for label in raw["label"]] == [of_class[c] for c in raw["class_id"]]
    card = DatasetCard.load(root / "README.md").data
    infos = DatasetInfosDict.from_dataset_card_data(card)  # every config's features, as load_dataset reads them
    assert sorted(infos) == sorted(c["config_name"] for c in card.configs)
    assert len(infos) == {"glyphs": 2, "imagenet": 2 + 1 + len(LEVELS)}[which]
    assert all(
        i.features["label"].names == names and isinstance(i.features["image"], datasets.Image) for i in infos.values()
    )
    last = card.configs[-1]["config_name"]  # the pair's last level config on ImageNet
    assert datasets.load_dataset_builder(str(root), last).info.features["label"].names == names


def test_class_names_that_two_classes_share_are_told_apart_by_their_ids(bench):
    b = Benchmark.open(bench)
    crane = b.id_classes.assign(name=["crane", "crane", *b.id_classes["name"][2:]])
    names = label_names(replace(b, id_classes=crane))
    assert names[:3] == [
        f"crane ({b.id_classes['id'][0]})",
        f"crane ({b.id_classes['id'][1]})",
        b.id_classes["name"][2],
    ]
    assert names[4] == "<unused 4>" and names[3:] == table_names(bench)[3:]  # label 4: a removed candidate's
