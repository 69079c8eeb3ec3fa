"""Finishing a build, shared by every builder: class tables, class counts, manifest, and the swap into place.

A build writes a complete tree beside its target (``<out>.partial``) and only then renames it into
place. A benchmark already at the target (replaced only when asked) is first renamed to
``<out>.cood-old`` and removed once the new tree is in place; a run interrupted between those steps
is finished or undone by the next run (:func:`recover`), so one whole benchmark is always kept.
A target that exists and is not a benchmark is never replaced.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd

from dataset_builder import faults
from dataset_builder import manifest as manifest_io
from dataset_builder.errors import BenchmarkError

ASIDE = ".cood-old"


def number_pool(ood_table: pd.DataFrame) -> pd.DataFrame:
    """The table with an ``index`` column: 0, 1, ... over the ``ood`` rows in table order, -1 for removed rows."""
    table = ood_table.reset_index(drop=True)
    pool = table["status"] == "ood"
    table["index"] = -1
    table.loc[pool, "index"] = range(int(pool.sum()))
    return table


def class_labels(id_ids: list[str], ood_table: pd.DataFrame) -> dict[str, int]:
    """Every class's label, one label space per benchmark, fixed before any image is read: an ID class's place in the
    ID class order (the logits' column, as the harness reads it), then an OOD candidate's (status ``ood`` before the
    image rules) ``len(id_ids)`` + its place among the candidates. That is ``len(id_ids)`` + its pool index unless
    the image rules remove a class; a removed class's label is left unused, so a label never changes meaning."""
    candidates = ood_table.loc[ood_table["status"] == "ood", "id"]
    return {cid: i for i, cid in enumerate(id_ids)} | {cid: len(id_ids) + i for i, cid in enumerate(candidates)}


def with_labels(table: pd.DataFrame, labels: dict[str, int]) -> pd.DataFrame:
    """``table`` with a ``label`` column from ``labels``; -1 for a removed OOD class (it has no image)."""
    kept = table["status"] == "ood" if "status" in table else pd.Series(True, index=table.index)
    return table.assign(label=[labels[cid] if keep else -1 for cid, keep in zip(table["id"], kept)])


def write_class_tables(folder: Path, id_table: pd.DataFrame, ood_table: pd.DataFrame, labels: dict[str, int]) -> None:
    """``classes/id.parquet`` and ``classes/ood.parquet`` (every OOD candidate, removed ones with their reason), each
    class with its label (:func:`class_labels`)."""
    (folder / "classes").mkdir(parents=True, exist_ok=True)
    with_labels(id_table, labels).to_parquet(folder / "classes" / "id.parquet", index=False)
    with_labels(ood_table, labels).to_parquet(folder / "classes" / "ood.parquet", index=False)


def class_counts(id_table: pd.DataFrame, ood_table: pd.DataFrame) -> dict:
    """The manifest's ``classes`` entry: ID, pool and removed counts, removals by rule."""
    removed = ood_table[ood_table["status"] != "ood"]
    return {
        "id": len(id_table),
        "ood": len(ood_table) - len(removed),
        "removed": len(removed),
        "removed_by_rule": {k: int(v) for k, v in removed["rule"].value_counts().sort_index().items()},
    }


def partial_of(root: Path) -> Path:
    """The folder a build of ``root`` writes in."""
    return root.with_name(root.name + ".partial")


def aside_of(root: Path) -> Path:
    """Where the benchmark being replaced waits until the new one is in place."""
    return root.with_name(root.name + ASIDE)


def is_benchmark(folder: Path) -> bool:
    """Whether ``folder`` holds a manifest this version reads."""
    try:
        manifest_io.load_manifest(folder, local=False)
    except BenchmarkError:
        return False
    return True


def _present(path: Path) -> bool:
    return path.exists() or path.is_symlink()


def _remove(path: Path) -> None:
    if path.is_symlink():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


def recover(root: Path) -> None:
    """Finish or undo a swap an interrupted run left half done: the old benchmark comes back when no new one
    reached ``root``; it is removed when the new one did."""
    aside = aside_of(root)
    if not _present(aside):
        return
    if not _present(root):
        aside.rename(root)
    elif is_benchmark(root):
        _remove(aside)
    else:
        raise BenchmarkError(f"{aside} holds an earlier benchmark and {root} is not a benchmark; move one of them away")


def _is_empty_folder(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink() and not any(path.iterdir())


def check_target(root: Path, overwrite: bool) -> None:
    """Refuse ``root`` unless it is absent, an empty folder, or a benchmark to be replaced (``overwrite``)."""
    recover(root)
    if not _present(root) or _is_empty_folder(root):
        return
    if not is_benchmark(root):
        raise BenchmarkError(
            f"{root} exists and is not a benchmark folder (no readable manifest.json); refusing to replace it"
        )
    if not overwrite:
        raise BenchmarkError(f"{root} already holds a benchmark; pass --overwrite to replace it")


def swap_in(partial: Path, root: Path) -> None:
    """Rename the complete ``partial`` tree to ``root``; a benchmark there is moved aside first and removed last."""
    aside = aside_of(root)
    faults.point("swap-before", root)
    if _is_empty_folder(root):
        root.rmdir()
    elif _present(root):
        root.rename(aside)
    try:
        faults.point("swap-aside", root)
        partial.rename(root)
    except BaseException:
        recover(root)
        raise
    faults.point("swap-in", aside)
    _remove(aside)


def finish(partial: Path, root: Path, manifest: dict, overwrite: bool) -> str:
    """Write the manifest and the dataset card into the finished ``partial`` folder and swap it into ``root``
    (checked again: it may have changed during the build), its private part linked to it; return the manifest sha256."""
    from dataset_builder import private
    from dataset_builder.card import write_card

    sha = manifest_io.write_manifest(partial, manifest)
    private.link(partial, sha)
    write_card(partial)
    check_target(root, overwrite)
    swap_in(partial, root)
    return sha
