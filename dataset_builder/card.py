"""The dataset card (``README.md``): YAML configs and features, written through huggingface_hub's card API.

Configs: ``pool`` (the default: every split of the benchmark) and, for each reference (model,
kappa) pair listed in ``levels/reference.txt``, ``<model>__<kappa>`` with the ``id_test`` split
and one split ``level_NN`` per severity level, each listing that level's OOD test shards. Level
manifests of other pairs live in ``levels/`` too and load with :func:`dataset_builder.loading.load_level`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from datasets.info import DatasetInfo, DatasetInfosDict
from huggingface_hub import DatasetCard, DatasetCardData

from dataset_builder.levels import level_data_files, level_file_name, read_level_table
from dataset_builder.loading import sample_features, test_shards
from dataset_builder.manifest import load_manifest

REFERENCE = "levels/reference.txt"
SPLIT_FOLDERS = {"id_test": "id/test/*.tar", "id_train": "id/train/*.tar", "ood_estimation": "ood/estimation/*.tar",
                 "ood_test": "ood/test/*/*.tar"}
BODY = """
# {name} {version}

A class-out-of-distribution (C-OOD) benchmark built by cood-bench: {description}

- `manifest.json`: seed, class rules, split rule, every shard with its sha256
- `classes/id.parquet`, `classes/ood.parquet`: the ID classes; the OOD pool and every removed class with its reason
- `levels/<model>__<kappa>.parquet`: per-model severity levels (level, class, scores, percentile)

{num_id} ID classes, {num_ood} OOD classes. Load the pool, or a severity level of a reference model:

```python
from datasets import load_dataset
pool = load_dataset("<repo>", "pool", split="ood_estimation")
level = load_dataset("<repo>", "<model>__<kappa>", split="level_07")
```

A level of any model with a level manifest: `dataset_builder.loading.load_level("<repo>", model, kappa, 7)`.
"""


def reference_configs(root: Path) -> list[str]:
    """``<model>__<kappa>`` names listed in ``levels/reference.txt`` (sorted)."""
    path = root / REFERENCE
    return sorted(set(path.read_text().split())) if path.is_file() else []


def card_data(root: Path, license: str = "other") -> DatasetCardData:
    """The card's YAML: configs and features (the same features for every config)."""
    manifest, _ = load_manifest(root)
    splits = sorted({s["split"] for s in manifest["shards"]}, key=list(SPLIT_FOLDERS).index)
    configs = [{"config_name": "pool", "default": True,
                "data_files": [{"split": split, "path": SPLIT_FOLDERS[split]} for split in splits]}]
    shards = test_shards(manifest)
    for name in reference_configs(root):
        files = level_data_files(read_level_table(root / "levels" / f"{name}.parquet"), shards)
        configs.append({"config_name": name, "data_files": [{"split": "id_test", "path": SPLIT_FOLDERS["id_test"]}]
                        + [{"split": split, "path": paths} for split, paths in files.items()]})
    data = DatasetCardData(license=license, pretty_name=f"{manifest['benchmark']['id']} C-OOD benchmark",
                           task_categories=["image-classification"], tags=["out-of-distribution-detection", "cood-bench"],
                           configs=configs)
    features = sample_features(manifest["image_ext"])
    DatasetInfosDict({c["config_name"]: DatasetInfo(features=features) for c in configs}).to_dataset_card_data(data)
    return data


def write_card(root: str | Path, license: str = "other") -> Path:
    """Write ``README.md`` of the benchmark folder from its manifest and reference levels."""
    root = Path(root)
    manifest, _ = load_manifest(root)
    bench = manifest["benchmark"]
    body = BODY.format(name=bench["id"], version=bench["version"], description=bench["description"],
                       num_id=manifest["classes"]["id"], num_ood=manifest["classes"]["ood"])
    card = DatasetCard(f"---\n{card_data(root, license).to_yaml()}\n---\n{body}")
    card.save(root / "README.md")
    return root / "README.md"


def add_levels(root: str | Path, level_file: str | Path, model: str, kappa: str, *, reference: bool = True,
               license: str = "other") -> Path:
    """Copy a level manifest into ``<root>/levels/``, list it as a reference config when ``reference``, rewrite the card."""
    root = Path(root)
    manifest, _ = load_manifest(root)
    level_data_files(read_level_table(Path(level_file)), test_shards(manifest))  # it belongs to this benchmark
    target = root / "levels" / level_file_name(model, kappa)
    target.parent.mkdir(exist_ok=True)
    if Path(level_file).resolve() != target.resolve():
        shutil.copyfile(level_file, target)
    if reference:
        names = sorted({*reference_configs(root), target.stem})
        (root / REFERENCE).write_text("".join(f"{n}\n" for n in names))
    write_card(root, license)
    return target
