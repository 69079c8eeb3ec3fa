"""Per-model severity-level manifests: ``levels/<model>__<kappa>.parquet`` (the "per-model split")."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from dataset_builder.errors import BenchmarkError

LEVEL_COLUMNS = ["level", "class_id", "class_index", "class_score", "level_score", "percentile"]
RULE_COLUMNS = ["window_percentile", "severity_rule"]  # written since the severity rule is named; older ones lack them
DEFAULT_NUM_LEVELS = 11  # the harness's default --levels (docs/method.md section 3)


def check_num_levels(num_levels: int) -> None:
    """Refuse fewer than 2 severity levels (the method needs a first and a last one)."""
    if num_levels < 2:
        raise BenchmarkError(
            f"--levels must be at least 2 (the method needs a first and a last level), got {num_levels}"
        )


def ood_classes_needed(num_id: int, num_levels: int) -> int:
    """The fewest OOD classes that give ``num_levels`` distinct severity levels: windows of ``num_id`` (|ID|) classes
    start at ``0 .. K - num_id``, so ``K - num_id + 1 >= num_levels`` (11 levels of 1,000 ID classes need 1,010)."""
    check_num_levels(num_levels)
    return num_id + num_levels - 1


def max_levels(num_ood: int, num_id: int) -> int:
    """The most distinct severity levels ``num_ood`` OOD classes in windows of ``num_id`` give (0: none)."""
    return max(num_ood - num_id + 1, 0)


def level_file_name(model: str, kappa: str) -> str:
    """``<model>__<kappa>.parquet`` with characters outside [A-Za-z0-9_-] replaced by '-'."""
    safe = lambda s: re.sub(r"[^A-Za-z0-9_-]", "-", s)  # noqa: E731
    return f"{safe(model)}__{safe(kappa)}.parquet"


def level_table(
    level_classes: list[list[int]],
    class_scores: list[float],
    level_scores: list[float],
    percentiles: list[float],
    class_ids: list[str],
    window_percentiles: list[float] | None = None,
    rule: str | None = None,
) -> pd.DataFrame:
    """One row per (level, class), classes in ascending score order within each level; with ``window_percentiles``
    and the severity ``rule`` that formed the levels, the columns of :data:`RULE_COLUMNS` too."""
    named = window_percentiles is not None and rule is not None
    rows = [
        {
            "level": level,
            "class_id": class_ids[c],
            "class_index": int(c),
            "class_score": float(class_scores[c]),
            "level_score": float(level_scores[level]),
            "percentile": float(percentiles[level]),
            **({"window_percentile": float(window_percentiles[level]), "severity_rule": rule} if named else {}),
        }
        for level, classes in enumerate(level_classes)
        for c in classes
    ]
    return pd.DataFrame(rows, columns=LEVEL_COLUMNS + RULE_COLUMNS if named else LEVEL_COLUMNS)


def write_level_table(table: pd.DataFrame, folder: Path, model: str, kappa: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / level_file_name(model, kappa)
    table.to_parquet(path, index=False)
    return path


def level_split(level: int) -> str:
    """The split name of a severity level: ``level_07`` (split names must match ``^\\w+(\\.\\w+)*$``)."""
    return f"level_{level:02d}"


def level_data_files(table: pd.DataFrame, test_shards: dict[str, str]) -> dict[str, list[str]]:
    """``level split -> OOD test shard paths`` of a level table, given ``class_id -> shard path``."""
    missing = sorted(set(table["class_id"]) - set(test_shards))
    if missing:
        raise BenchmarkError(
            f"the level manifest names {len(missing)} classes without an OOD test shard, e.g. {missing[0]} "
            "(made on another benchmark?)"
        )
    return {
        level_split(int(level)): [test_shards[c] for c in group["class_id"]]
        for level, group in table.groupby("level", sort=True)
    }


def read_level_table(path: Path) -> pd.DataFrame:
    """A level manifest, checked for the columns of :data:`LEVEL_COLUMNS` (then those of :data:`RULE_COLUMNS`, or none
    in a manifest written before them)."""
    try:
        table = pd.read_parquet(path)
    except (OSError, ValueError) as exc:
        raise BenchmarkError(f"cannot read the level manifest {path}: {exc}") from exc
    if list(table.columns) not in (LEVEL_COLUMNS, LEVEL_COLUMNS + RULE_COLUMNS):
        raise BenchmarkError(f"{path} is not a level manifest: columns {list(table.columns)}, expected {LEVEL_COLUMNS}")
    return table
