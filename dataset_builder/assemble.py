"""Finishing a build, shared by every builder: class tables, class counts, manifest, atomic swap into place."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd

from dataset_builder import manifest as manifest_io


def number_pool(ood_table: pd.DataFrame) -> pd.DataFrame:
    """The table with an ``index`` column: 0, 1, ... over the ``ood`` rows in table order, -1 for removed rows."""
    table = ood_table.reset_index(drop=True)
    pool = table["status"] == "ood"
    table["index"] = -1
    table.loc[pool, "index"] = range(int(pool.sum()))
    return table


def write_class_tables(folder: Path, id_table: pd.DataFrame, ood_table: pd.DataFrame) -> None:
    """``classes/id.parquet`` and ``classes/ood.parquet`` (every OOD candidate, removed ones with their reason)."""
    (folder / "classes").mkdir(parents=True, exist_ok=True)
    id_table.to_parquet(folder / "classes" / "id.parquet", index=False)
    ood_table.to_parquet(folder / "classes" / "ood.parquet", index=False)


def class_counts(id_table: pd.DataFrame, ood_table: pd.DataFrame) -> dict:
    """The manifest's ``classes`` entry: ID, pool and removed counts, removals by rule."""
    removed = ood_table[ood_table["status"] != "ood"]
    return {"id": len(id_table), "ood": len(ood_table) - len(removed), "removed": len(removed),
            "removed_by_rule": {k: int(v) for k, v in removed["rule"].value_counts().sort_index().items()}}


def finish(partial: Path, root: Path, manifest: dict) -> str:
    """Write the manifest and the dataset card into the finished ``partial`` folder and swap it into ``root``;
    return the manifest sha256."""
    from dataset_builder.card import write_card

    sha = manifest_io.write_manifest(partial, manifest)
    write_card(partial)
    shutil.rmtree(root, ignore_errors=True)
    partial.rename(root)
    return sha
