"""Paired tests between a board's entries, from the per-image score files its records keep (docs/leaderboard.md,
"Paired comparisons"): which row a board marks as not shown different from the row above, and each entry's range of
ranks. Entries without a per-image file (the paper's published numbers, records made before the files) have none."""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import pandas as pd
import pyarrow.parquet as pq

from dataset_builder.errors import CoodError
from harness.method.paired import Comparison, compare_entries
from harness.method.pairwise import Pairwise, pairwise
from leaderboard import per_image
from leaderboard.drilldown import stored_folder
from leaderboard.errors import LeaderboardError
from leaderboard.table import LEVEL_PREFIX

COLUMNS = ("key", "split", "score", "correct", "levels")  # what the paired statistics read of a per-image file


class BoardPairs(NamedTuple):
    """The paired statistics of a board's rows: those of the rows with per-image scores, and per row its index in
    them (-1 for a row without)."""

    stats: Pairwise
    index: list[int]


def pair_key(column: str) -> str | None:
    """The paired test's key of a table column the board ranks by (``mean_ood_auroc`` -> ``mean``, ``id_acc``,
    ``id_auroc``, ``ood_auroc_l3`` -> ``l3``); None for a column without a paired test."""
    if column == "mean_ood_auroc":
        return "mean"
    if column in ("id_acc", "id_auroc"):
        return column
    if column.startswith(LEVEL_PREFIX) and column[len(LEVEL_PREFIX) :].isdigit():
        return f"l{int(column[len(LEVEL_PREFIX) :])}"
    return None


def per_image_path(directory: str | Path, record_file: str, record: dict | None = None) -> Path | None:
    """Where a board keeps the per-image file of its record ``record_file`` (read unless ``record`` is given); None
    for a record without one."""
    record = record if record is not None else json.loads((Path(directory) / record_file).read_bytes())
    name = per_image.name(record)
    return None if name is None else stored_folder(directory, record_file) / name


def read_scores(path: Path) -> pd.DataFrame:
    """The columns of a per-image file that the paired statistics read."""
    return pq.read_table(path, columns=list(COLUMNS)).to_pandas()


def board_pairs(
    directory: str | Path, record_files: list[str], records: dict[str, dict] | None = None, column: str | None = None
) -> BoardPairs:
    """The paired statistics of the entries among ``record_files`` that keep per-image scores, and for each of
    ``record_files`` its index in them (-1 for one without); ``records``: the records already read, by file. Given
    a ``column`` without a paired test (:func:`pair_key`), none are computed and no file is read."""
    if column is not None and pair_key(column) is None:
        return BoardPairs(pairwise([]), [-1] * len(record_files))
    paths = [per_image_path(directory, name, (records or {}).get(name)) for name in record_files]
    having = [i for i, p in enumerate(paths) if p is not None]
    try:
        found = pairwise([read_scores(paths[i]) for i in having])
    except CoodError as exc:  # the harness's errors derive from the floor's
        raise LeaderboardError(f"{directory}: the per-image scores cannot be compared: {exc}") from None
    place = {i: k for k, i in enumerate(having)}
    return BoardPairs(found, [place.get(i, -1) for i in range(len(record_files))])


def no_scores(directory: str | Path, row: pd.Series) -> str | None:
    """Why the entry of ``row`` has no per-image scores (published numbers, a record made before the files); None
    for an entry that has them."""
    if per_image_path(directory, row["record_file"]) is not None:
        return None
    why = "published numbers" if row.get("provenance") == "paper" else "a record made before per-image files"
    return f"no paired interval: {row['model']}/{row['kappa']} has no per-image scores ({why})"


def compare_rows(directory: str | Path, a: pd.Series, b: pd.Series) -> Comparison:
    """Entry ``a`` against entry ``b`` of a board (:func:`harness.method.paired.compare_entries`), from their
    per-image files."""
    tables = [read_scores(per_image_path(directory, row["record_file"])) for row in (a, b)]
    try:
        return compare_entries(*tables)
    except CoodError as exc:
        raise LeaderboardError(f"{directory}: the two entries cannot be compared: {exc}") from None
