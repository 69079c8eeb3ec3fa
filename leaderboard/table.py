"""The leaderboard table: one row per entry, derived from the stored records; parquet and CSV."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from dataset_builder import faults
from dataset_builder.files import write_atomic
from harness.method.registry import registered
from leaderboard.conflicts import CONFLICT, CONFLICT_FLAG, REPLACED
from leaderboard.csvsafe import csv_bytes
from leaderboard.errors import LeaderboardError
from leaderboard.foreign import foreign_values
from leaderboard.record import columns as record_columns
from leaderboard.schema import entry_id, flags, kappa_label, private_status, verification_status

PARQUET = "table.parquet"
CSV = "table.csv"
LEVEL_PREFIX = "ood_auroc_l"
ALIAS_SEPARATOR = ", "  # between a model's other names in its table cell (blank: none)
# the presentation order; a record field declared with a table column (leaderboard.record) not named here comes last
FRONT = [
    "seq",
    "entry_id",
    "model",
    "aliases",
    "kappa",
    "kappa_name",
    "kappa_params",
    "severity_rule",
    "provenance",
    "verification",
    "conflict",
    "flag",
    "id_acc",
    "id_auroc",
    "id_avg_conf",
    "mean_ood_auroc",
]
BACK = [
    "num_parameters",
    "model_source",
    "weights_sha256",
    "bundle_sha256",
    "benchmark_id",
    "benchmark_version",
    "manifest_sha256",
    "num_levels",
    "ood_auroc_definition",
    "harness_version",
    "seed",
    "created",
    "record_file",
    "record_sha256",
    "private_images",
    "private_mean_ood_auroc",
]


def mean_columns() -> dict[str, str]:
    """The columns of the level metrics the table shows by their mean over the levels (the metric registry's
    ``aggregate="mean"``): column -> metric."""
    return {m.table_column: m.name for m in registered("level") if m.aggregate == "mean"}


def interval_columns() -> dict[str, tuple[str, str]]:
    """The columns of the ends of the metrics' intervals (the metric registry's ``interval``), by the column of their
    metric: ``id_acc`` -> (``id_acc_low``, ``id_acc_high``). Blank for records without intervals."""
    return {
        m.table_column: (f"{m.table_column}_low", f"{m.table_column}_high")
        for m in registered()
        if m.bounds and m.scope != "level" and m.table_column
    }


def level_columns(num_levels: int) -> list[str]:
    """``ood_auroc_l0`` .. ``ood_auroc_l{L-1}``: the per-level ood-auroc columns."""
    return [f"{LEVEL_PREFIX}{i}" for i in range(num_levels)]


def table_levels(table: pd.DataFrame) -> list[str]:
    return [c for c in table.columns if c.startswith(LEVEL_PREFIX)]


def record_row(record: dict, seq: int, record_file: str, record_sha256: str, standing: str = "") -> dict:
    """The table row of one valid record; ``standing``: how it stands beside the other records of its entry
    (:func:`leaderboard.conflicts.standings`), a conflict flagged."""
    levels = record["levels"]
    return {
        **foreign_values(record),  # first: a column the board declares is never overwritten
        **{column: _at(record, path) for column, (path, _) in record_columns().items()},
        "seq": seq,
        "entry_id": entry_id(record),
        "aliases": ALIAS_SEPARATOR.join(record["model"].get("aliases") or []),
        "kappa": kappa_label(record["kappa"]["name"], record["kappa"]["params"]),
        "kappa_params": json.dumps(record["kappa"]["params"], sort_keys=True),
        "verification": verification_status(record),
        "private_images": private_status(record),
        "conflict": standing,
        "flag": "; ".join([*flags(record), *([CONFLICT_FLAG] if standing == CONFLICT else [])]),
        **{col: level["ood_auroc"] for col, level in zip(level_columns(len(levels)), levels)},
        **{column: _mean([level.get(name) for level in levels]) for column, name in mean_columns().items()},
        "ood_auroc_definition": record["metric_definitions"]["ood_auroc"],
        "record_file": record_file,
        "record_sha256": record_sha256,
    }


def _mean(values: list) -> float | None:
    """The mean over the levels; None where a level has none (a paper's record, or one made before the metric)."""
    return None if None in values else math.fsum(values) / len(values)


def _at(record: dict, path: tuple[str, ...]):
    """The value at ``path``; None for a field a record made before it existed leaves out, or below an optional part
    it does not have."""
    for key in path:
        if record is None:
            return None
        record = record.get(key)
    return record


def build_table(rows: list[dict], num_levels: int) -> pd.DataFrame:
    """Rows in arrival order with fixed column order and dtypes (an empty table keeps its columns), then the columns
    of metrics the records describe themselves (:mod:`leaderboard.foreign`), in first-seen order."""
    declared = record_columns()
    order = table_columns(num_levels)
    foreign = list(dict.fromkeys(c for row in rows for c in row if c not in order))
    table = pd.DataFrame(rows, columns=order + foreign)
    floats = [c for c, (_, f) in declared.items() if f.kind is float]
    for col in [*mean_columns(), *level_columns(num_levels), *floats, *foreign]:
        table[col] = table[col].astype("float64")
    for col in ["seq"] + [c for c, (_, f) in declared.items() if f.kind is int]:
        table[col] = table[col].astype("Int64" if col in declared and declared[col][1].nullable else "int64")
    return table


def table_columns(num_levels: int) -> list[str]:
    """Every column in presentation order: :data:`FRONT` (each metric followed by its interval's ends), the levels,
    the metrics' means, :data:`BACK`, then the record's other declared columns."""
    ends = interval_columns()
    front = [c for column in FRONT for c in (column, *ends.get(column, ()))]
    order = front + level_columns(num_levels) + list(mean_columns()) + BACK
    return order + [c for c in record_columns() if c not in order]


def foreign_in(table: pd.DataFrame) -> list[str]:
    """The columns of ``table`` that metrics its records describe themselves fill (:mod:`leaderboard.foreign`)."""
    known = set(table_columns(len(table_levels(table))))
    return [c for c in table.columns if c not in known]


def write_table(directory: Path, table: pd.DataFrame) -> None:
    """Write ``table.csv`` then ``table.parquet`` in ``directory``, each by atomic replace.

    Readers check the parquet file against the index, so it is written last. The CSV's text cells are safe to open
    in a spreadsheet (:mod:`leaderboard.csvsafe`).
    """
    write_atomic(directory / CSV, csv_bytes(table))
    faults.point("table:after-csv", directory / PARQUET)
    write_atomic(directory / PARQUET, lambda tmp: table.to_parquet(tmp, index=False))


def on_board(table: pd.DataFrame) -> pd.DataFrame:
    """The rows a board shows: all but the self-reported records a verified run replaced (the history keeps them)."""
    return table[table["conflict"] != REPLACED].reset_index(drop=True)


def read_table(path: Path) -> pd.DataFrame:
    """A table file; one written before records could be verified gets its ``verification`` column (all
    self-reported), one written before a metric (or its interval) or the severity rule existed gets their columns,
    blank, one written before models had aliases gets its ``aliases`` column, blank."""
    try:
        table = pd.read_parquet(path)
    except (OSError, ValueError) as exc:
        raise LeaderboardError(f"cannot read the table {path}: {exc}") from exc
    if "aliases" not in table.columns and "model" in table.columns:
        table.insert(table.columns.get_loc("model") + 1, "aliases", "")
    if "verification" not in table.columns and "provenance" in table.columns:
        table.insert(table.columns.get_loc("provenance") + 1, "verification", "self-reported")
    if "conflict" not in table.columns and "verification" in table.columns:  # before conflicts: an entry had one record
        table.insert(table.columns.get_loc("verification") + 1, "conflict", "")
    if "record_file" in table.columns:
        order = table_columns(len(table_levels(table)))
        metrics = [*mean_columns(), *(m.table_column for m in registered() if m.scope != "level" and m.table_column)]
        metrics += [end for ends in interval_columns().values() for end in ends]
        if "severity_rule" not in table.columns:
            table.insert(min(order.index("severity_rule"), len(table.columns)), "severity_rule", None)
        for column in [c for c in order if c in metrics and c not in table.columns]:
            table.insert(min(order.index(column), len(table.columns)), column, float("nan"))
    return table
