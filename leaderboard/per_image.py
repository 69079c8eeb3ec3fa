"""A record's per-image scores: the Parquet file its ``per_image`` field names, its format and the store's checks.

The file (written by ``harness/per_image.py``) holds one row per public image of the record's splits, sorted by
``(split, key)``, in exactly the columns and Arrow types of :data:`SCHEMA`; a store takes it only when its sha256 and
row count are the record's, no ``(split, key)`` occurs twice and every score and value is finite
(docs/leaderboard.md, "Per-image scores").
"""

from __future__ import annotations

import hashlib
import io

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from leaderboard.errors import LeaderboardError

SCHEMA = pa.schema(
    [
        ("key", pa.string()),  # the benchmark's row key (the WebDataset __key__)
        ("split", pa.string()),  # the benchmark's split name
        ("class_id", pa.string()),  # an ID class for ID rows, the OOD class for OOD rows
        ("score", pa.float64()),  # the kappa's ranking score (higher: more confidently ID), as the AUROCs use it
        ("value", pa.float64()),  # the kappa's reported value (ECE, NLL and Brier of correctness use it)
        ("correct", pa.bool_()),  # ID rows: the prediction is the true class; null on OOD rows
        ("levels", pa.list_(pa.int16())),  # OOD rows: the levels whose OOD set holds the row's class; ID rows: empty
        ("nll", pa.float64()),  # ID test rows: the row's term of the multi-class NLL; null elsewhere
        ("brier", pa.float64()),  # ID test rows: the row's term of the multi-class Brier score; null elsewhere
    ]
)
# A file of ImageNet-21k's scale (~1.1M rows of ~60 bytes) is ~70 MiB; 256 MiB leaves room for long keys.
MAX_BYTES = 256 << 20


def name(record: dict) -> str | None:
    """The relative path of the per-image file a record names, or None."""
    field = record.get("per_image")
    return None if field is None else field["file"]


def check(source: str, record: dict, data: bytes) -> None:
    """Refuse, in one line, a per-image file that is not the one ``record`` names: another sha256, not this format,
    another row count, a ``(split, key)`` twice or a score that is not finite."""
    field = record["per_image"]
    where = f"{source}: per_image names {field['file']}"
    digest = hashlib.sha256(data).hexdigest()
    if digest != field["sha256"]:
        raise LeaderboardError(f"{where}, whose sha256 is {digest}, not the record's {field['sha256']}")
    problem = table_problem(data, field["rows"])
    if problem is not None:
        raise LeaderboardError(f"{where}, which {problem}")


def table_problem(data: bytes, rows: int) -> str | None:
    """Why the bytes of a per-image file are not a table of ``rows`` rows in the format, or None."""
    try:
        table = pq.read_table(io.BytesIO(data))
    except (pa.ArrowException, OSError, ValueError) as exc:
        return f"is not a readable Parquet file ({str(exc).splitlines()[0][:120]})"
    if not table.schema.remove_metadata().equals(SCHEMA):
        got = ", ".join(f"{f.name} {f.type}" for f in table.schema)
        return f"does not have the per-image columns (it has {got[:200]})"
    if table.num_rows != rows:
        return f"has {table.num_rows} rows, not the record's {rows}"
    for column in ("score", "value"):
        values = table[column].to_numpy(zero_copy_only=False)
        if not np.all(np.isfinite(values)):
            return f"has {int(np.sum(~np.isfinite(values)))} {column}s that are null, NaN or infinite"
    pairs = pc.binary_join_element_wise(table["split"], table["key"], "\n")
    if pc.count_distinct(pairs).as_py() != table.num_rows:
        return "holds a (split, key) twice"
    return None
