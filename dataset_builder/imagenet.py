"""The ImageNet benchmark (docs/method.md section 2): ImageNet-21K classes as the OOD source, ImageNet-1K val as ID.

Inputs, each in any form :func:`dataset_builder.source_forms.open_source` reads (class folders, the official tar of
per-class tars or its folder of ``<wnid>.tar`` files, Hub WebDataset shards; the same images give the same benchmark):

- ImageNet-21K: the fall11 release (21,841 classes, pool ``imagenet22k``) or winter21 (a subset of Google's
  21,843-id list, pool ``imagenet21k``); classes of the pool list that the source lacks are removed as
  ``not_in_source``, and a class that is not in the pool list is an error;
- the ImageNet-1K validation images: sorted into class folders ``<wnid>/<images>`` (the layout of the usual
  ``valprep.sh``), the official flat tar ``ILSVRC2012_img_val.tar`` with its labels (``val_labels``: the devkit
  archive or Kaggle's ``LOC_val_solution.csv``), or Hub shards; a flat folder of ``ILSVRC2012_val_*.JPEG`` is refused.

The class rules are :func:`dataset_builder.imagenet_classes.imagenet_ood_classes` (WordNet 3.0 against
all 1,000 ImageNet-1K classes, plus the switched-on rule sets); the image rules (too few images,
unreadable images) are :mod:`dataset_builder.images`'.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from dataset_builder.assemble import check_target
from dataset_builder.errors import BenchmarkError
from dataset_builder.imagenet_classes import (
    DEFAULT_RULE_SETS,
    ID_CLASSES,
    imagenet_ood_classes,
    read_descriptions,
    read_synsets,
    rules_record,
)
from dataset_builder.images import ImageSettings, build_from_folders
from dataset_builder.source_forms import open_source
from dataset_builder.sources import ImageSource
from dataset_builder.split import DEFAULT_FIT_PER_CLASS

BENCHMARK_ID = "imagenet"
BENCHMARK_VERSION = "1.0.0"
DEFAULTS = {"min_images": 200, "images_per_class": 200, "test_fraction": 0.25, "seed": 0}


def n_test_of(images_per_class: int, test_fraction: float) -> int:
    """Test images per class: ``round(images_per_class * test_fraction)`` (200 and 0.25 give 50)."""
    if not 0 < test_fraction < 1:
        raise BenchmarkError(f"test_fraction must be between 0 and 1, got {test_fraction}")
    return round(images_per_class * test_fraction)


def wanted_id_classes(id_classes: Iterable[str] | None = None) -> list[str]:
    """All 1,000 ImageNet-1K classes, or the given subset (sorted); an unknown id is an error."""
    all_ids = read_synsets(ID_CLASSES)
    wanted = all_ids if id_classes is None else sorted(set(id_classes))
    unknown = sorted(set(wanted) - set(all_ids))
    if unknown:
        raise BenchmarkError(f"{unknown[0]} is not an ImageNet-1K class")
    return wanted


def id_class_table(val: ImageSource, id_classes: Iterable[str] | None = None) -> pd.DataFrame:
    """ID classes (``index`` = ImageNet-1K index, ``id``, ``name``): all 1,000, or the given subset, each a class of
    ``val``."""
    all_ids, wanted = read_synsets(ID_CLASSES), wanted_id_classes(id_classes)
    folders = set(val.classes())
    if not folders:
        raise BenchmarkError(
            f"{val} has no class folders: sort the validation images into <wnid>/ folders, "
            "or give the official tar with its labels (--val-labels)"
        )
    missing = [c for c in wanted if c not in folders]
    if missing:
        raise BenchmarkError(f"{val} lacks {len(missing)} ImageNet-1K class folders, e.g. {missing[0]}")
    names, _ = read_descriptions()
    return pd.DataFrame(
        {"index": [all_ids.index(c) for c in wanted], "id": wanted, "name": [names.get(c, "") for c in wanted]}
    )


def build_imagenet(
    root: str | Path,
    imagenet21k: str | Path,
    val: str | Path,
    *,
    val_labels: str | Path | None = None,
    pool: str = "imagenet21k",
    rule_sets: Iterable[str] = DEFAULT_RULE_SETS,
    min_images: int = 200,
    images_per_class: int = 200,
    test_fraction: float = 0.25,
    seed: int = 0,
    id_classes: Iterable[str] | None = None,
    workers: int = 2,
    progress: bool = True,
    overwrite: bool = False,
    train: str | Path | None = None,
    fit_per_class: int = DEFAULT_FIT_PER_CLASS,
) -> str:
    """Build the ImageNet C-OOD benchmark under ``root``; return its manifest sha256.

    ``imagenet21k``, ``val`` and ``train``: a folder, a tar, or an ``hf://datasets/`` URL (module docstring);
    ``val_labels`` with a flat validation tar. ``train``: ImageNet-1K training images (``<wnid>/`` folders or
    ``ILSVRC2012_img_train.tar``), of which ``fit_per_class`` per ID class (seeded) become the ``id_fit`` split that
    detectors fit on.

    ``id_classes`` restricts the ID test set to a subset of ImageNet-1K (for small trials); the
    class rules always use all 1,000 classes.
    """
    check_target(Path(root), overwrite)  # before the class rules and the folder scans: a refusal comes at once
    ood_table = imagenet_ood_classes(rule_sets, pool)
    ood_source = open_source(
        imagenet21k, "--imagenet21k", keep=set(ood_table.loc[ood_table["status"] == "ood", "id"]), workers=workers
    )
    unknown = sorted(set(ood_source.classes()) - set(ood_table["id"]))
    if unknown:
        raise BenchmarkError(
            f"{imagenet21k} has {len(unknown)} classes that are not {pool} classes, e.g. {unknown[0]!r}"
        )
    wanted = set(wanted_id_classes(id_classes))
    val_source = open_source(val, "--val", labels=val_labels, keep=wanted, workers=workers)
    fit_source = None if train is None else open_source(train, "--train", keep=wanted, workers=workers)
    rule_sets = tuple(rule_sets)
    settings = ImageSettings(
        seed=seed,
        images_per_class=images_per_class,
        n_test=n_test_of(images_per_class, test_fraction),
        min_images=min_images,
        image_ext="jpg",
        fit_per_class=fit_per_class,
    )
    description = {
        "benchmark": {
            "id": BENCHMARK_ID,
            "version": BENCHMARK_VERSION,
            "description": "ImageNet-1K validation (ID) vs. ImageNet-21K classes outside ImageNet-1K's "
            "WordNet is-a closure (OOD).",
        },
        "source": {"kind": "imagenet", "pool": pool, "id": "ImageNet-1K validation", "test_fraction": test_fraction},
        "rules": rules_record(rule_sets),
    }
    return build_from_folders(
        root,
        id_source=val_source,
        id_table=id_class_table(val_source, id_classes),
        ood_source=ood_source,
        ood_table=ood_table,
        settings=settings,
        description=description,
        workers=workers,
        progress=progress,
        overwrite=overwrite,
        fit_source=fit_source,
    )
