"""The Parquet copy of a shard, for ``datasets``: ``<shard>.parquet`` beside ``<shard>.tar``, the same rows.

``datasets`` names a WebDataset column by its tar member's extension and decodes only a few extensions, so the tar
shards (what the harness, timm's and webdataset's readers read) cannot carry the recipes' column names. Since format
3 every shard has a copy in Parquet whose columns are those names: ``image`` (the ``datasets`` Image feature: the
tar member's very bytes, never re-encoded), ``label`` (the sample's ``cls``), ``key`` (its ``__key__``) and
``class_id``. The Parquet schema metadata holds the features the way ``datasets`` writes them, ``label`` as an
integer: the class names (a ``ClassLabel``) are declared once in the dataset card, not in every file (a full ImageNet
label space names about 20,000 classes). A copy is written from the finished tar, so it cannot differ from it, and
with fixed options, so the same tar gives the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

import datasets
import pyarrow as pa
import pyarrow.parquet as pq

from dataset_builder.files import commit

ROWS_PER_GROUP = 100  # datasets' own row group size for image data: a streaming reader holds one group at a time
FILE_FEATURES = datasets.Features(
    {
        "image": datasets.Image(),
        "label": datasets.Value("int64"),
        "key": datasets.Value("string"),
        "class_id": datasets.Value("string"),
    }
)
SAMPLE_FIELDS = ("__key__", "cls", "json")  # a sample's members other than its one image


def copy_path(shard_path: str) -> str:
    """The Parquet copy's path of a shard path: ``ood/test/000/n01.tar`` -> ``ood/test/000/n01.parquet``."""
    return PurePosixPath(shard_path).with_suffix(".parquet").as_posix()


def _row(sample: dict) -> dict:
    """A sample of a shard as a row of its copy."""
    image = next(v for k, v in sample.items() if k not in SAMPLE_FIELDS)
    return {
        "image": {"bytes": image, "path": None},
        "label": int(sample["cls"]),
        "key": sample["__key__"],
        "class_id": json.loads(sample["json"])["class_id"],
    }


def write_copy(tar: Path, samples: Iterable[dict]) -> Path:
    """Write the Parquet copy of the shard file ``tar`` beside it (atomically, a fixed partial name as the shard's)
    from ``samples``, the samples read back from the finished ``tar``; return its path."""
    target = tar.with_suffix(".parquet")
    partial = target.with_name(target.name + ".partial")
    schema = FILE_FEATURES.arrow_schema
    with pq.ParquetWriter(partial, schema, compression="none", write_statistics=False) as writer:
        rows = []
        for sample in samples:
            rows.append(_row(sample))
            if len(rows) == ROWS_PER_GROUP:
                writer.write_table(pa.Table.from_pylist(rows, schema=schema))
                rows = []
        if rows:
            writer.write_table(pa.Table.from_pylist(rows, schema=schema))
    commit(partial, target)
    return target
