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

A small benchmark for a trial takes a subset of the ID classes (``id_classes``: the ids, or a number of the classes
the validation source holds, seeded); its severity levels are windows of that many OOD classes. Before reading any
image the build refuses a pool too small for 2 levels and warns when it is too small for the asked ones
(:func:`dataset_builder.levels.ood_classes_needed`); after the image rules it checks the pool that is left again.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from dataset_builder.assemble import check_target
from dataset_builder.errors import BenchmarkError
from dataset_builder.imagenet_classes import (
    DEFAULT_RULE_SETS,
    ID_CLASSES,
    class_rule_reasons,
    imagenet_ood_classes,
    read_descriptions,
    read_synsets,
    rules_record,
)
from dataset_builder.images import IMAGE_RULES, ImageSettings, build_from_folders
from dataset_builder.levels import DEFAULT_NUM_LEVELS, check_num_levels, max_levels, ood_classes_needed
from dataset_builder.manifest import load_manifest
from dataset_builder.private import DEFAULT_SHARE, check_share
from dataset_builder.source_forms import open_source
from dataset_builder.sources import ImageSource, SourceError
from dataset_builder.split import DEFAULT_FIT_PER_CLASS

BENCHMARK_ID = "imagenet"
BENCHMARK_VERSION = "1.0.0"
DEFAULTS = {"min_images": 200, "images_per_class": 200, "test_fraction": 0.25, "seed": 0}
ID_SUBSET_RULE = (
    "the first id_classes of the ImageNet-1K classes the validation source holds, in the order sha256(f'{seed}/{wnid}')"
)


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


def pick_id_classes(present: Iterable[str], count: int, seed: int) -> list[str]:
    """``count`` of the classes ``present``, the first in the order ``sha256(f"{seed}/{wnid}")`` (a class's place does
    not depend on the others), sorted (ImageNet-1K's order)."""
    order = sorted(set(present), key=lambda wnid: hashlib.sha256(f"{seed}/{wnid}".encode()).digest())
    return sorted(order[:count])


def resolve_id_classes(val: ImageSource, id_classes: Iterable[str] | int | None, seed: int) -> list[str]:
    """The ID classes: all 1,000 (None), the given ids, or a number: that many of the ImageNet-1K classes ``val``
    holds (:func:`pick_id_classes`)."""
    if not isinstance(id_classes, int):
        return wanted_id_classes(id_classes)
    if id_classes < 1:
        raise BenchmarkError(f"--id-classes must be at least 1, got {id_classes}")
    present = set(val.classes()) & set(read_synsets(ID_CLASSES))
    if len(present) < id_classes:
        raise BenchmarkError(
            f"--id-classes {id_classes}: {val} holds {len(present)} ImageNet-1K {val.class_units}, not {id_classes}"
        )
    return pick_id_classes(present, id_classes, seed)


def id_class_table(val: ImageSource, id_classes: Iterable[str] | None = None) -> pd.DataFrame:
    """ID classes (``index`` = ImageNet-1K index, ``id``, ``name``): all 1,000, or the given subset, each a class of
    ``val``."""
    all_ids, wanted = read_synsets(ID_CLASSES), wanted_id_classes(id_classes)
    folders = set(val.classes())
    if not folders:
        raise BenchmarkError(
            f"{val} has no {val.class_units}: sort the validation images into <wnid>/ folders, "
            "or give the official tar with its labels (--val-labels)"
        )
    missing = [c for c in wanted if c not in folders]
    if missing:
        held = len(folders & set(all_ids))
        hint = f" (it holds {held}: --id-classes {held} builds a small benchmark of them)" if held else ""
        raise BenchmarkError(f"{val} lacks {len(missing)} ImageNet-1K {val.class_units}, e.g. {missing[0]}{hint}")
    names, _ = read_descriptions()
    return pd.DataFrame(
        {"index": [all_ids.index(c) for c in wanted], "id": wanted, "name": [names.get(c, "") for c in wanted]}
    )


def warn(message: str) -> None:
    """One warning line on stderr."""
    print(f"warning: {message}", file=sys.stderr, flush=True)


def removal_lines(manifest: dict) -> list[str]:
    """What the build removed, from its manifest: a line with the total, then one per rule that removed classes, in
    the order the rules apply, with its count and what it means."""
    classes = manifest["classes"]
    counts = classes["removed_by_rule"]
    reasons = {rule: why for rule, why in {**class_rule_reasons(), **IMAGE_RULES}.items() if rule in counts}
    width = max([0, *(len(f"{counts[rule]:,}") for rule in reasons)])
    return [
        f"removed {classes['removed']:,} of {classes['ood'] + classes['removed']:,} pool classes "
        "(classes/ood.parquet names each one's rule):",
        *(f"  {counts[rule]:>{width},} {rule}: {why}" for rule, why in reasons.items()),
    ]


def classes_with_images(source: ImageSource, classes: Iterable[str], min_images: int, enough: int) -> int:
    """How many of ``classes`` hold ``min_images`` image files (:meth:`ImageSource.holds_images`: no image is read),
    counting until ``enough`` do, so that a large pool costs no more than a small one."""
    found = 0
    try:
        for cid in classes:
            if found >= enough:
                break
            try:
                found += source.holds_images(cid, min_images)
            except SourceError:  # the build removes it as unreadable_source
                pass
    finally:
        source.close()
    return found


def check_pool_size(source: ImageSource, candidates: list[str], num_id: int, num_levels: int, min_images: int) -> int:
    """Before any image is read: refuse a pool with fewer classes of ``min_images`` images than 2 severity levels of
    ``num_id`` ID classes need, and warn when it has fewer than ``num_levels`` need (decoding may remove more);
    return the count (:func:`classes_with_images`)."""
    needed, fewest = ood_classes_needed(num_id, num_levels), ood_classes_needed(num_id, 2)
    usable = classes_with_images(source, candidates, min_images, needed)
    held = (
        f"{source} holds {len(candidates)} OOD classes of the pool, {usable} of them with --min-images {min_images} "
        "images or more"
    )
    if usable < fewest:
        raise BenchmarkError(
            f"{held}; {num_id} ID classes need {fewest} for the fewest severity levels (2) and {needed} for "
            f"--levels {num_levels} (|ID| + levels - 1): lower --min-images, give more OOD classes or fewer ID "
            "classes (--id-classes)"
        )
    if usable < needed:
        warn(
            f"{held}; {num_levels} severity levels of {num_id} ID classes need {needed} (|ID| + levels - 1): "
            f"the harness will allow --levels {max_levels(usable, num_id)} at most"
        )
    return usable


def _ood_pool(
    imagenet21k: str | Path, rule_sets: Iterable[str], pool: str, workers: int
) -> tuple[pd.DataFrame, ImageSource, list[str]]:
    """The pool's class table (the class rules applied), the ImageNet-21K source reading only the surviving classes,
    and those of them it holds, in pool order; a source class outside the pool list is an error."""
    ood_table = imagenet_ood_classes(rule_sets, pool)
    ood_ids = set(ood_table.loc[ood_table["status"] == "ood", "id"])
    ood_source = open_source(imagenet21k, "--imagenet21k", keep=ood_ids, workers=workers)
    unknown = sorted(set(ood_source.classes()) - set(ood_table["id"]))
    if unknown:
        raise BenchmarkError(
            f"{imagenet21k} has {len(unknown)} classes that are not {pool} classes, e.g. {unknown[0]!r}"
        )
    held = set(ood_source.classes())
    return ood_table, ood_source, [c for c in ood_table["id"] if c in ood_ids and c in held]


def _image_settings(
    seed: int, images_per_class: int, test_fraction: float, min_images: int, fit_per_class: int, private: tuple
) -> ImageSettings:
    """The image builder's settings of an ImageNet build (``private``: the share and the seed of the private part)."""
    share, private_seed = private
    return ImageSettings(
        seed=seed,
        images_per_class=images_per_class,
        n_test=n_test_of(images_per_class, test_fraction),
        min_images=min_images,
        image_ext="jpg",
        fit_per_class=fit_per_class,
        private_share=share,
        private_seed=private_seed,
    )


def _id_sources(
    val: str | Path,
    val_labels: str | Path | None,
    train: str | Path | None,
    id_classes: Iterable[str] | int | None,
    seed: int,
    workers: int,
) -> tuple[ImageSource, list[str], pd.DataFrame, ImageSource | None]:
    """The validation source, the ID classes picked from it (:func:`resolve_id_classes`), their table
    (:func:`id_class_table`) and their training source (None without ``train``)."""
    keep = set(wanted_id_classes(None if isinstance(id_classes, int) else id_classes))
    val_source = open_source(val, "--val", labels=val_labels, keep=keep, workers=workers)
    ids = resolve_id_classes(val_source, id_classes, seed)
    id_table = id_class_table(val_source, ids)
    if train is None:
        return val_source, ids, id_table, None
    return val_source, ids, id_table, open_source(train, "--train", keep=set(ids), workers=workers).subset(tuple(ids))


def _description(pool: str, test_fraction: float, id_classes: Iterable[str] | int | None, rule_sets: tuple) -> dict:
    """The manifest's ``benchmark``, ``source`` and ``rules`` of an ImageNet build."""
    source = {"kind": "imagenet", "pool": pool, "id": "ImageNet-1K validation", "test_fraction": test_fraction}
    if isinstance(id_classes, int):
        source["id_subset"] = {"id_classes": id_classes, "rule": ID_SUBSET_RULE}
    return {
        "benchmark": {
            "id": BENCHMARK_ID,
            "version": BENCHMARK_VERSION,
            "description": "ImageNet-1K validation (ID) vs. ImageNet-21K classes outside ImageNet-1K's "
            "WordNet is-a closure (OOD).",
        },
        "source": source,
        "rules": rules_record(rule_sets),
    }


def _warn_when_the_image_rules_left_too_few(
    root: str | Path, usable: int, num_id: int, num_levels: int, min_images: int
) -> None:
    """Warn when the built benchmark keeps fewer OOD classes than ``num_levels`` need and than the pool's check
    counted (``usable``): unreadable images removed more classes."""
    kept = load_manifest(root)[0]["classes"]["ood"]
    if kept < min(usable, ood_classes_needed(num_id, num_levels)):
        warn(
            f"{kept} OOD classes kept after the image rules (--min-images {min_images}): {num_levels} severity levels "
            f"of {num_id} ID classes need {ood_classes_needed(num_id, num_levels)}; the harness will allow "
            f"--levels {max_levels(kept, num_id)} at most"
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
    id_classes: Iterable[str] | int | None = None,
    num_levels: int = DEFAULT_NUM_LEVELS,
    workers: int = 2,
    progress: bool = True,
    overwrite: bool = False,
    train: str | Path | None = None,
    fit_per_class: int = DEFAULT_FIT_PER_CLASS,
    private_share: float = DEFAULT_SHARE,
    private_seed: int | None = None,
) -> str:
    """Build the ImageNet C-OOD benchmark under ``root``; return its manifest sha256.

    ``imagenet21k``, ``val`` and ``train``: a folder, a tar, or an ``hf://datasets/`` URL (module docstring);
    ``val_labels`` with a flat validation tar. ``train``: ImageNet-1K training images (``<wnid>/`` folders or
    ``ILSVRC2012_img_train.tar``), of which ``fit_per_class`` per ID class (seeded) become the ``id_fit`` split that
    detectors fit on.

    ``id_classes`` restricts the ID classes to a subset of ImageNet-1K (for small trials): the ids, or a number of
    the classes ``val`` holds, picked with ``seed`` (:func:`pick_id_classes`); the class rules always use all 1,000
    classes. ``num_levels``: the severity levels the pool must give (:func:`check_pool_size`); a pool left with
    fewer than 2 after the image rules is an error, with fewer than ``num_levels`` a warning. ``private_share`` of
    each class's test images are held back in the private part, chosen with ``private_seed``
    (:mod:`dataset_builder.private`).
    """
    check_target(Path(root), overwrite)  # before the class rules and the folder scans: a refusal comes at once
    check_num_levels(num_levels)
    check_share(private_share)
    ood_table, ood_source, candidates = _ood_pool(imagenet21k, rule_sets, pool, workers)
    val_source, ids, id_table, fit_source = _id_sources(val, val_labels, train, id_classes, seed, workers)
    private = (private_share, private_seed)
    settings = _image_settings(seed, images_per_class, test_fraction, min_images, fit_per_class, private)
    usable = check_pool_size(ood_source, candidates, len(ids), num_levels, min_images)
    sha = build_from_folders(
        root,
        id_source=val_source,
        id_table=id_table,
        ood_source=ood_source,
        ood_table=ood_table,
        settings=settings,
        description=_description(pool, test_fraction, id_classes, tuple(rule_sets)),
        workers=workers,
        progress=progress,
        overwrite=overwrite,
        fit_source=fit_source,
        min_ood_classes=ood_classes_needed(len(ids), 2),
    )
    _warn_when_the_image_rules_left_too_few(root, usable, len(ids), num_levels, min_images)
    return sha
