"""A benchmark from any pair of ImageFolder trees: ``--id DIR`` and ``--ood DIR`` of ``<class>/<image>``.

ID classes are the ID folder's class folders in name order (index 0, 1, ...). Every OOD class
folder is a candidate; one named like an ID class is removed (``id_class``), and so is every class
of the optional ``exclusions`` (``OOD class -> (ID class, why)``: the custom analogue of the WordNet
rules), under the rule ``excluded``. The image rules are :mod:`dataset_builder.images`'.

The images keep their sources' licence, which the builder cannot know: ``license`` (a Hub licence
identifier such as ``cc-by-4.0``, or the URL of the terms) is recorded in the manifest's ``source``
and shown by the dataset card; without it the card says ``unknown``.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from dataset_builder.assemble import check_target
from dataset_builder.errors import BenchmarkError
from dataset_builder.images import ImageSettings, build_from_folders, class_folders

CLASS_RULES = {
    "id_class": "the OOD folder has the name of an ID class",
    "excluded": "listed in the exclusions (OOD class, ID class it collides with, why)",
}


def read_exclusions(path: Path) -> dict[str, tuple[str, str]]:
    """Exclusions from a CSV file with the header ``ood_class,id_class,why``."""
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames != ["ood_class", "id_class", "why"]:
            raise BenchmarkError(f"{path} must have the header ood_class,id_class,why, got {reader.fieldnames}")
        return {row["ood_class"]: (row["id_class"], row["why"]) for row in reader}


def classify_folders(
    id_classes: list[str], ood_classes: list[str], exclusions: Mapping[str, tuple[str, str]]
) -> pd.DataFrame:
    """One row per OOD folder (columns ``id``, ``name``, ``status``, ``rule``, ``collides_with``, ``why``)."""
    unknown = sorted({id_class for id_class, _ in exclusions.values()} - set(id_classes))
    if unknown:
        raise BenchmarkError(f"an exclusion names {unknown[0]!r}, which is not an ID class")
    rows = []
    for cid in ood_classes:
        if cid in id_classes:
            rows.append((cid, cid, "removed", "id_class", cid, ""))
        elif cid in exclusions:
            rows.append((cid, cid, "removed", "excluded", *exclusions[cid]))
        else:
            rows.append((cid, cid, "ood", None, None, ""))
    return pd.DataFrame(rows, columns=["id", "name", "status", "rule", "collides_with", "why"])


def build_folder(
    root: str | Path,
    id_dir: str | Path,
    ood_dir: str | Path,
    *,
    name: str = "custom",
    version: str = "1.0.0",
    exclusions: Mapping[str, tuple[str, str]] | None = None,
    settings: ImageSettings = ImageSettings(),
    workers: int = 2,
    progress: bool = True,
    overwrite: bool = False,
    license: str | None = None,
    train: str | Path | None = None,
) -> str:
    """Build a C-OOD benchmark from two ImageFolder trees under ``root``; return its manifest sha256. ``train``: ID
    training images in ``<class>/`` folders, for the seeded ``id_fit`` split (``settings.fit_per_class`` per class)."""
    check_target(Path(root), overwrite)  # before the folder scans: a refusal comes at once
    id_classes = class_folders(Path(id_dir))
    ood_classes = class_folders(Path(ood_dir))
    if not id_classes or not ood_classes:
        raise BenchmarkError(f"{id_dir if not id_classes else ood_dir} has no class folders")
    id_table = pd.DataFrame({"index": range(len(id_classes)), "id": id_classes, "name": id_classes})
    description = {
        "benchmark": {
            "id": name,
            "version": version,
            "description": f"Custom C-OOD benchmark {name} built from two image folders.",
        },
        "source": {"kind": "folder", **({"license": license} if license else {})},
        "rules": {
            "class_rules": CLASS_RULES,
            "exclusions": {k: list(v) for k, v in sorted((exclusions or {}).items())},
        },
    }
    return build_from_folders(
        root,
        id_source=Path(id_dir),
        id_table=id_table,
        ood_source=Path(ood_dir),
        ood_table=classify_folders(id_classes, ood_classes, exclusions or {}),
        settings=settings,
        description=description,
        workers=workers,
        progress=progress,
        overwrite=overwrite,
        fit_source=None if train is None else Path(train),
    )
