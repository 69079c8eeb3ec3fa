"""The dataset card (``README.md``): YAML configs, features and licence, written through huggingface_hub's card API.

Configs: ``pool`` (the default: every split of the benchmark), ``id`` (the ID splits alone: ``id_train`` or
``id_fit`` to train a model on, ``id_test``) and, for each reference (model,
kappa) pair listed in ``levels/reference.txt``, ``<model>__<kappa>`` with the ``id_test`` split
and one split ``level_NN`` per severity level, each listing that level's OOD test shards, plus one
config ``<model>__<kappa>__level_NN`` per level with that split alone: ``datasets`` prepares every
split of a config it loads without streaming, so a level loads alone only from a config of its own.
Level manifests of other pairs live in ``levels/`` too and load with :func:`dataset_builder.loading.load_level`.
Every config declares the same features (:func:`dataset_builder.loading.features_of`): ``image``, ``label`` (a
``ClassLabel`` of the benchmark's one label space with the class names), ``key`` and ``class_id``, and lists the
shards' Parquet copies (:mod:`dataset_builder.copies`; a benchmark of format 1 or 2 has none: its configs list the tar
shards, with the columns ``png``/``jpg``, ``cls`` and ``json.class_id``). The
features are written once in the YAML and referred to by an alias in the other configs: a full ImageNet label space
names about 20,000 classes, and a copy per config made the card's YAML 14 MB (tens of seconds of parsing per load).

The body's loading examples are plain ``datasets.load_dataset`` calls (``load_level`` only for pairs
without a config). A card written at build time (no repo id) names the local folder (``path/to/benchmark``);
``cood-dataset publish`` uploads a card written afresh with the repo id and tag it publishes to
(:func:`published_card`), and leaves the local folder as it is. The licence fields follow the kind
of benchmark (``manifest["source"]["kind"]``, else ``manifest["benchmark"]["id"]``): the images keep
their sources' licences.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from datasets.info import DatasetInfo, DatasetInfosDict
from huggingface_hub import DatasetCard, DatasetCardData

from dataset_builder.benchmark import Benchmark
from dataset_builder.files import write_atomic
from dataset_builder.levels import level_data_files, level_file_name, level_split, read_level_table
from dataset_builder.loading import features_of, has_copies, test_shards
from dataset_builder.manifest import LABELLED_SINCE, load_manifest

REFERENCE = "levels/reference.txt"
CARD_TAG = "cood-bench"  # marks a card this module wrote; publish rewrites only such cards
SPLIT_FOLDERS = {
    "id_test": "id/test/*.tar",
    "id_fit": "id/fit/*.tar",
    "id_train": "id/train/*.tar",
    "ood_estimation": "ood/estimation/*.tar",
    "ood_test": "ood/test/*/*.tar",
}
LOCAL_PATH = "path/to/benchmark"
EXAMPLE_LEVEL = 7

CITATION = """@inproceedings{galil2023framework,
  title         = {A framework for benchmarking Class-out-of-distribution detection and its application to ImageNet},
  author        = {Galil, Ido and Dabbah, Mohammed and El-Yaniv, Ran},
  booktitle     = {The Eleventh International Conference on Learning Representations (ICLR)},
  year          = {2023},
  url           = {https://openreview.net/forum?id=Iuubb9W6Jtk},
  eprint        = {2302.11893},
  archivePrefix = {arXiv}
}"""

IMAGENET_TERMS = "https://image-net.org/download.php"
DEJAVU_LICENSE = "https://dejavu-fonts.github.io/License.html"
LICENCE_TEXT = {
    "imagenet": (
        "The images are ImageNet's: the ID images are ImageNet-1K validation images, the OOD images come from "
        "ImageNet-21K. They keep their source's terms, the ImageNet terms of access ({link}): use for non-commercial "
        "research and educational purposes only; the copyright of each image stays with its owner. The card's "
        "`license: other` names these terms."
    ),
    "glyphs": (
        "The images are rendered by cood-bench from the DejaVu fonts shipped with matplotlib "
        "(`matplotlib/mpl-data/fonts/ttf/LICENSE_DEJAVU`) and keep the fonts' licence: the DejaVu fonts licence "
        "({link}), a free font licence (the Bitstream Vera and Arev font licences; DejaVu's changes are in the "
        "public domain)."
    ),
}

BODY = """
# {name} {version}

A class-out-of-distribution (C-OOD) benchmark built by cood-bench: {description}

- `manifest.json`: seed, class rules, split rule, every shard with its sha256
- `classes/id.parquet`, `classes/ood.parquet`: the ID classes; the OOD pool and every removed class with its reason
- `levels/<model>__<kappa>.parquet`: per-model severity levels (level, class, scores, percentile)

{num_id} ID classes, {num_ood} OOD classes. The method (severity levels, metrics) is that of Galil, Dabbah &
El-Yaniv (ICLR 2023), as the cood-bench repository states it in `docs/method.md`.

## Loading

{loading}

## Licence

{licence}

## Citation

```bibtex
{citation}
```
"""


def reference_configs(root: Path) -> list[str]:
    """``<model>__<kappa>`` names listed in ``levels/reference.txt`` (sorted)."""
    path = root / REFERENCE
    return sorted(set(path.read_text().split())) if path.is_file() else []


def benchmark_kind(manifest: dict) -> str:
    """``glyphs``, ``imagenet``, ``folder``, ...: the source kind, else the benchmark id."""
    kind = manifest.get("source", {}).get("kind") if isinstance(manifest.get("source"), dict) else None
    return kind or manifest["benchmark"]["id"]


def licence_fields(value: str | None) -> dict[str, str]:
    """The card's licence fields for a recorded licence: a Hub licence identifier, a URL (``other`` + that link),
    or nothing (``unknown``)."""
    if not value:
        return {"license": "unknown"}
    if re.match(r"https?://", value):
        return {"license": "other", "license_name": "source-license", "license_link": value}
    return {"license": value}


def licence(manifest: dict) -> tuple[dict[str, str], str]:
    """The YAML licence fields and the body's licence paragraph of a benchmark."""
    kind = benchmark_kind(manifest)
    if kind == "imagenet":
        return (
            {"license": "other", "license_name": "imagenet-terms-of-access", "license_link": IMAGENET_TERMS},
            LICENCE_TEXT["imagenet"].format(link=IMAGENET_TERMS),
        )
    if kind == "glyphs":
        return (
            {"license": "other", "license_name": "dejavu-fonts-license", "license_link": DEJAVU_LICENSE},
            LICENCE_TEXT["glyphs"].format(link=DEJAVU_LICENSE),
        )
    recorded = (manifest.get("source") or {}).get("license")
    fields = licence_fields(recorded)
    if recorded:
        text = (
            f"The images keep their sources' licences; the licence recorded for them is `{recorded}`. "
            "Check the source for the terms of each image."
        )
    else:
        text = (
            "The images keep their sources' licences, which the builder cannot know: unknown, see the source "
            "(`license: unknown`)."
        )
    return fields, text


def level_config(name: str, split: str) -> str:
    """The config of one severity level of a reference pair: ``<model>__<kappa>__level_NN``."""
    return f"{name}__{split}"


ID_SPLITS = ("id_train", "id_fit", "id_test")


def split_files(manifest: dict, split: str) -> str:
    """The data files of a split, a glob: its shards' Parquet copies (format 3), else its tar shards."""
    glob = SPLIT_FOLDERS[split]
    return glob.removesuffix(".tar") + ".parquet" if has_copies(manifest) else glob


def card_data(root: Path) -> DatasetCardData:
    """The card's YAML: licence, configs and their features (the same in every config)."""
    bench = Benchmark.open(root)
    manifest = bench.manifest
    splits = sorted({s["split"] for s in manifest["shards"]}, key=list(SPLIT_FOLDERS).index)
    configs = [
        {
            "config_name": "pool",
            "default": True,
            "data_files": [{"split": split, "path": split_files(manifest, split)} for split in splits],
        },
        {
            "config_name": "id",
            "data_files": [
                {"split": split, "path": split_files(manifest, split)} for split in ID_SPLITS if split in splits
            ],
        },
    ]
    shards = test_shards(manifest)
    for name in reference_configs(root):
        files = level_data_files(read_level_table(root / "levels" / f"{name}.parquet"), shards)
        configs.append(
            {
                "config_name": name,
                "data_files": [{"split": "id_test", "path": split_files(manifest, "id_test")}]
                + [{"split": split, "path": paths} for split, paths in files.items()],
            }
        )
        configs += [
            {"config_name": level_config(name, split), "data_files": [{"split": split, "path": list(paths)}]}
            for split, paths in files.items()
        ]
    fields, _ = licence(manifest)
    data = DatasetCardData(
        **fields,
        pretty_name=f"{manifest['benchmark']['id']} C-OOD benchmark",
        task_categories=["image-classification"],
        tags=["out-of-distribution-detection", CARD_TAG, "arxiv:2302.11893"],
        configs=configs,
    )
    features = features_of(bench)
    DatasetInfosDict({c["config_name"]: DatasetInfo(features=features) for c in configs}).to_dataset_card_data(data)
    shared = data["dataset_info"][0]["features"]
    for info in data["dataset_info"]:
        info["features"] = shared  # written once, an alias in every other config: the class names are long
    return data


def _split_config(name: str) -> tuple[str, str]:
    """A level manifest's name back into (model, kappa); ``level_file_name`` of the pair gives the name again."""
    model, _, kappa = name.rpartition("__")
    return model, kappa


def level_pairs(root: Path) -> list[str]:
    """``<model>__<kappa>`` of every level manifest in ``levels/``, reference configs first."""
    names = reference_configs(root)
    return names + sorted(p.stem for p in (root / "levels").glob("*__*.parquet") if p.stem not in names)


def _example_level(root: Path, name: str) -> tuple[str, int]:
    """The last level's split name of a level manifest, and the level the examples load."""
    levels = sorted(int(level) for level in read_level_table(root / "levels" / f"{name}.parquet")["level"].unique())
    return level_split(levels[-1]), min(EXAMPLE_LEVEL, levels[-1])


def _q(text: str) -> str:
    """A Python string literal in double quotes."""
    return json.dumps(text)


def loading_examples(root: Path, manifest: dict, repo_id: str | None = None, revision: str | None = None) -> str:
    """The card's loading examples: plain ``load_dataset`` calls on the Hub repo when ``repo_id`` is known, else on
    the local folder; ``load_level`` for the pairs without a config."""
    splits = sorted({s["split"] for s in manifest["shards"]}, key=list(SPLIT_FOLDERS).index)
    source = _q(repo_id or LOCAL_PATH)
    rev = f", revision={_q(revision)}" if repo_id and revision else ""
    blocks = (
        []
        if repo_id
        else [
            "This card was written for the local folder; `cood-dataset publish` uploads it with these examples "
            f"rewritten for the Hub repo. Replace `{LOCAL_PATH}` by this folder's path."
        ]
    )
    columns = (
        '"image"], sample["label"], sample["class_id"]'
        if has_copies(manifest)
        else f'"{manifest["image_ext"]}"], sample["cls"], sample["json"]["class_id"]'
    )
    blocks.append(
        f"Config `pool` (the default), splits {', '.join(f'`{s}`' for s in splits)}; `streaming=True` reads only the "
        "files you iterate over:\n\n```python\nfrom datasets import load_dataset\n\n"
        f'pool = load_dataset({source}, "pool", split="ood_estimation"{rev}, streaming=True)\n'
        "sample = next(iter(pool))\n"
        f"image, label, class_id = sample[{columns}\n```"
    )
    blocks += _label_blocks(manifest, splits, source, rev)
    for name in reference_configs(root):
        last, level = _example_level(root, name)
        split = level_split(level)
        blocks.append(
            f"Config `{name}`: `id_test` and the OOD test images of each severity level of this (model, kappa) "
            f"pair, `level_00` (easiest) to `{last}` (hardest). Without streaming, `datasets` prepares every split "
            f"of the config it loads, so one level loads from its own config `{level_config(name, 'level_NN')}` "
            "(that split alone); streaming reads only the level's shards from either:\n\n"
            "```python\nfrom datasets import load_dataset\n\n"
            f"level = load_dataset({source}, {_q(level_config(name, split))}, split={_q(split)}{rev})\n"
            f"stream = load_dataset({source}, {_q(name)}, split={_q(split)}{rev}, streaming=True)\n```"
        )
    pairs = level_pairs(root)
    if pairs:
        model, kappa = _split_config(pairs[0])
        _, level = _example_level(root, pairs[0])
        blocks.append(
            "A level of any (model, kappa) pair with a level manifest in `levels/`, also those without a config, "
            "reading only that level's shards (with cood-bench installed):\n\n"
            "```python\nfrom dataset_builder.loading import load_level\n\n"
            f"level = load_level({source}, {_q(model)}, {_q(kappa)}, {level}{rev})\n```"
        )
    return "\n\n".join(blocks)


def _recipe_names(manifest: dict) -> str:
    """The example's lines that give the recipes' columns, ``image`` and ``label``, and the class names: none needed
    since format 3; a rename before (format 1: no label)."""
    if manifest["format_version"] < LABELLED_SINCE:
        return f'train = train.rename_column("{manifest["image_ext"]}", "image")\n'
    columns = f'{{"{manifest["image_ext"]}": "image", "cls": "label"}}'
    rename = "" if has_copies(manifest) else f"train = train.rename_columns({columns})  # the recipes' names\n"
    return rename + 'names = train.features["label"].names  # the class name of each label\n'


def _columns(manifest: dict) -> str:
    """The sentence naming every config's columns."""
    if has_copies(manifest):
        return (
            "Every config has the columns `image` (a PIL image), `label` (a `ClassLabel` with the class names), `key` "
            "(the sample's key in its shard) and `class_id` (the class id), read from the Parquet copy beside each "
            "tar shard."
        )
    return (
        f"Every config has the columns `{manifest['image_ext']}` (a PIL image), `cls` (the label, a `ClassLabel` with "
        "the class names) and `json.class_id` (the class id)."
    )


def _label_blocks(manifest: dict, splits: list[str], source: str, rev: str) -> list[str]:
    """The label space, and the ID training split to train a model on (config ``id``)."""
    num_id = manifest["classes"]["id"]
    blocks = [
        f"{_columns(manifest)} One label space for the whole benchmark, the same names and ids in every config: an ID "
        f"class's label is its place in the ID class order (0 to {num_id - 1}, what a classifier predicts), an OOD "
        f"class's is {num_id} + its place among the OOD candidates; `classes/id.parquet` and `classes/ood.parquet` "
        "give each class's `label`."
    ]
    if manifest["format_version"] < LABELLED_SINCE:
        blocks.append(
            f"This benchmark is of format {manifest['format_version']}: its samples have no `cls` and its class "
            "tables no `label`."
        )
    train = next((s for s in ("id_train", "id_fit") if s in splits), None)
    what = f"`{train}` holds ID images to train a model on" if train else "this benchmark has no ID training split"
    blocks.append(
        f"Config `id`: the ID splits alone ({', '.join(f'`{s}`' for s in ID_SPLITS if s in splits)}); {what}:\n\n"
        "```python\nfrom datasets import load_dataset\n\n"
        f'train = load_dataset({source}, "id", split={_q(train or "id_test")}{rev})\n{_recipe_names(manifest)}```'
    )
    return blocks


def card_text(root: str | Path, *, repo_id: str | None = None, revision: str | None = None) -> str:
    """The card of a benchmark folder from its manifest and reference levels; the examples name ``repo_id``
    (at ``revision``) when given, else the local folder."""
    root = Path(root)
    manifest, _ = load_manifest(root)
    bench = manifest["benchmark"]
    _, licence_text = licence(manifest)
    body = BODY.format(
        name=bench["id"],
        version=bench["version"],
        description=bench["description"],
        num_id=manifest["classes"]["id"],
        num_ood=manifest["classes"]["ood"],
        loading=loading_examples(root, manifest, repo_id, revision),
        licence=licence_text,
        citation=CITATION,
    )
    return str(DatasetCard(f"---\n{card_data(root).to_yaml()}\n---\n{body}"))


def write_card(root: str | Path, repo_id: str | None = None, *, revision: str | None = None) -> Path:
    """Write ``README.md`` of the benchmark folder (see :func:`card_text`)."""
    root = Path(root)
    write_atomic(root / "README.md", card_text(root, repo_id=repo_id, revision=revision).encode("utf-8"))
    return root / "README.md"


def published_card(root: str | Path, repo_id: str, revision: str | None = None) -> bytes | None:
    """The card to upload to ``repo_id``: written afresh with the repo id, when the folder's ``README.md`` is a
    card this module wrote (tagged ``cood-bench``); None for any other README, which is uploaded as it is."""
    path = Path(root) / "README.md"
    if not path.is_file():
        return None
    try:
        tags = DatasetCard.load(path).data.tags or []
    except Exception:
        return None
    if CARD_TAG not in tags:
        return None
    return card_text(root, repo_id=repo_id, revision=revision).encode("utf-8")


def add_levels(root: str | Path, level_file: str | Path, model: str, kappa: str, *, reference: bool = True) -> Path:
    """Copy a level manifest into ``<root>/levels/``, list it as a reference config when ``reference``, rewrite the
    card."""
    root = Path(root)
    manifest, _ = load_manifest(root)
    level_data_files(read_level_table(Path(level_file)), test_shards(manifest))  # it belongs to this benchmark
    target = root / "levels" / level_file_name(model, kappa)
    target.parent.mkdir(exist_ok=True)
    if Path(level_file).resolve() != target.resolve():
        write_atomic(target, lambda tmp: shutil.copyfile(level_file, tmp))
    if reference:
        names = sorted({*reference_configs(root), target.stem})
        write_atomic(root / REFERENCE, "".join(f"{n}\n" for n in names).encode())
    write_card(root)
    return target


def level_calls(root: str | Path, model: str, kappa: str, *, reference: bool = True) -> list[str]:
    """What loads one level of a pair added by :func:`add_levels`: ``load_dataset`` on the pair's level config
    (``reference``; else ``load_level``), on the local folder, then on the Hub repo once published (the tag
    ``cood-dataset publish`` sets by default)."""
    root = Path(root).resolve()
    name = Path(level_file_name(model, kappa)).stem
    last, level = _example_level(root, name)
    version = load_manifest(root)[0]["benchmark"]["version"]
    split = level_split(level)

    def call(source: str, rev: str) -> str:
        if reference:
            return f"datasets.load_dataset({_q(source)}, {_q(level_config(name, split))}, split={_q(split)}{rev})"
        return f"dataset_builder.loading.load_level({_q(source)}, {_q(model)}, {_q(kappa)}, {level}{rev})"

    return [
        f"levels level_00 to {last}; level {level} loads with:",
        f"  local:     {call(root.as_posix(), '')}",
        f"  published: {call('<repo id>', f', revision={_q(version)}')}  (after cood-dataset publish)",
    ]
