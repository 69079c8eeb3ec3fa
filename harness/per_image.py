"""The per-image scores of a run: one Parquet file per (model, kappa), beside its record, that reproduces the record.

``per_image/<stem>.parquet`` (``<stem>``: the record file's own, ``records/<stem>.json``) holds one row per public
image of the splits the record's numbers come from (:data:`SPLITS`), sorted by ``(split, key)``, in the columns and
Arrow types of :data:`SCHEMA` (docs/leaderboard.md, "Per-image scores"). The private part's images are never in it:
only the public splits' scores are read. The record names the file in ``per_image``: ``{file, sha256, rows}``.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dataset_builder.benchmark import Benchmark
from harness.method.evaluation import KappaResult
from harness.method.metrics import softmax
from harness.method.scores import SplitScores
from harness.method.selective import brier_terms, nll_terms
from leaderboard.per_image import SCHEMA

FOLDER = "per_image"
SPLITS = ("id_test", "ood_estimation", "ood_test")  # the ID test split, the levels' estimation split, the OOD test


@dataclass
class PerImage:
    """A run's per-image files: relative path -> Parquet bytes, and each kappa's record field ``per_image``."""

    files: dict[str, bytes]
    fields: dict[str, dict]

    def write(self, folder: Path) -> None:
        """Write the files under ``folder`` (a run's new output folder)."""
        (folder / FOLDER).mkdir(parents=True, exist_ok=True)
        for relative, data in self.files.items():
            (folder / relative).write_bytes(data)


def per_image(results: list[KappaResult], scores: dict[str, SplitScores], bench: Benchmark) -> PerImage:
    """Every kappa's per-image file (named by the kappa, as its record file is) and record field."""
    files, fields = {}, {}
    terms = multiclass_terms(scores["id_test"])  # the classifier's, the same for every kappa
    for result in results:
        table = kappa_table(result, scores, bench, terms)
        data = parquet_bytes(table)
        name = f"{FOLDER}/{result.kappa}.parquet"
        files[name] = data
        fields[result.kappa] = {"file": name, "sha256": hashlib.sha256(data).hexdigest(), "rows": table.num_rows}
    return PerImage(files, fields)


def parquet_bytes(table: pa.Table) -> bytes:
    """``table`` as the bytes of one Parquet file."""
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


def kappa_table(result: KappaResult, scores: dict[str, SplitScores], bench: Benchmark, terms: tuple) -> pa.Table:
    """One kappa's rows of the public splits, sorted by ``(split, key)``, in :data:`SCHEMA`; ``terms``: the ID test
    rows' multi-class NLL and Brier terms (:func:`multiclass_terms`)."""
    id_ids = bench.id_classes["id"].astype(str).to_numpy()
    ood_ids = bench.ood_classes["id"].astype(str).to_numpy()
    held = [[] for _ in ood_ids]  # per OOD class index: the levels whose set holds it
    for level, classes in enumerate(result.levels.classes):
        for c in classes:
            held[int(c)].append(level)
    parts = [_id_rows(result.kappa, scores["id_test"], id_ids, terms)]
    parts += [_ood_rows(result.kappa, split, scores[split], ood_ids, held) for split in SPLITS[1:]]
    table = pa.concat_tables(parts)
    return table.sort_by([("split", "ascending"), ("key", "ascending")])


def multiclass_terms(split: SplitScores) -> tuple:
    """Each ID test row's multi-class NLL and Brier term, from the run's ID logits (nulls without them)."""
    if split.logits is None:
        return pa.nulls(len(split), pa.float64()), pa.nulls(len(split), pa.float64())
    p, labels = softmax(split.logits), np.asarray(split.labels, dtype=np.int64)
    return nll_terms(p, labels), brier_terms(p, labels)


def _id_rows(kappa: str, split: SplitScores, class_ids: np.ndarray, terms: tuple) -> pa.Table:
    """The ID test rows: correctness and each row's multi-class NLL and Brier term."""
    n = len(split)
    nll, brier = terms
    correct = np.asarray(split.preds == split.labels, dtype=bool)
    empty = pa.array([[]] * n, pa.list_(pa.int16()))
    return _table(kappa, "id_test", split, class_ids, correct, empty, nll, brier)


def _ood_rows(kappa: str, name: str, split: SplitScores, class_ids: np.ndarray, held: list[list[int]]) -> pa.Table:
    """An OOD split's rows: the levels that hold each row's class; no correctness, no multi-class terms."""
    n = len(split)
    levels = pa.array([held[int(c)] for c in split.labels], pa.list_(pa.int16()))
    none = pa.nulls(n, pa.float64())
    return _table(kappa, name, split, class_ids, pa.nulls(n, pa.bool_()), levels, none, none)


def _table(kappa, name, split, class_ids, correct, levels, nll, brier) -> pa.Table:
    columns = [
        pa.array(np.asarray(split.keys).astype(str), pa.string()),
        pa.array([name] * len(split), pa.string()),
        pa.array(class_ids[np.asarray(split.labels, dtype=np.int64)], pa.string()),
        pa.array(np.asarray(split.scores[kappa], dtype=np.float64)),
        pa.array(np.asarray(split.confs[kappa], dtype=np.float64)),
        pa.array(correct, pa.bool_()) if isinstance(correct, np.ndarray) else correct,
        levels,
        pa.array(nll, pa.float64()) if isinstance(nll, np.ndarray) else nll,
        pa.array(brier, pa.float64()) if isinstance(brier, np.ndarray) else brier,
    ]
    return pa.Table.from_arrays(columns, schema=SCHEMA)
