"""Loading a severity level of a (model, kappa) pair as a ``datasets.Dataset`` (or a streaming one).

``data_files`` is built from the level manifest ``levels/<model>__<kappa>.parquet`` and the
benchmark manifest (one OOD test shard per class), and handed to ``datasets.load_dataset`` with the features
declared. A benchmark is a local folder or a Hub dataset repo; a repo is read at one commit (``revision``: a tag,
branch or sha, default ``main``), through ``hf://datasets/<repo>@<commit>/...`` paths.

Every config of a benchmark has the same columns, the image-classification recipes' names: ``image`` (the
``datasets`` Image feature), ``label`` (a ``ClassLabel`` of the benchmark's one label space: the ID class's place in
the ID class order, what a classifier predicts; the number of ID classes + the OOD class's place among the OOD
candidates; the class tables' ``label``, the same names and ids in every config), ``key`` (the sample's key in its
shard) and ``class_id`` (the class's string id). They are read from the shards' Parquet copies
(:mod:`dataset_builder.copies`). A benchmark of format 2 has no copies: ``datasets`` reads its tar shards, as timm's
and the Hub's image WebDatasets, with the columns ``png`` or ``jpg`` (its ``image_ext``), ``cls`` (the label),
``json`` (``class_id``), ``__key__`` and ``__url__``; one of format 1 has no ``cls`` either.
"""

from __future__ import annotations

from pathlib import Path

import datasets
import pandas as pd
from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub.errors import EntryNotFoundError

from dataset_builder.benchmark import HUB_PREFIX, Benchmark
from dataset_builder.errors import BenchmarkError
from dataset_builder.levels import level_data_files, level_file_name, level_split, read_level_table
from dataset_builder.manifest import COPIES_SINCE, LABELLED_SINCE

INT_LABEL = datasets.Value("int64")  # ``cls`` where the class names are not at hand
UNUSED_LABEL = "<unused {label}>"  # the name of a label no class holds (a candidate the image rules removed)


def row_features(label: datasets.ClassLabel | datasets.Value = INT_LABEL) -> datasets.Features:
    """The features of every row of a benchmark of format 3 (its Parquet copies): the image, its label, its key and
    its class id."""
    return datasets.Features(
        {
            "image": datasets.Image(),
            "label": label,
            "key": datasets.Value("string"),
            "class_id": datasets.Value("string"),
        }
    )


def sample_features(
    image_ext: str, label: datasets.ClassLabel | datasets.Value | None = INT_LABEL
) -> datasets.Features:
    """The features of every sample of a tar shard as ``datasets`` reads it (formats 1 and 2): key, source shard, the
    image, its label ``cls`` (None: a benchmark of format 1, which has none) and its class id."""
    return datasets.Features(
        {
            "__key__": datasets.Value("string"),
            "__url__": datasets.Value("string"),
            image_ext: datasets.Image(),
            **({"cls": label} if label is not None else {}),
            "json": {"class_id": datasets.Value("string")},
        }
    )


def label_names(bench: Benchmark) -> list[str]:
    """The name of every label of the benchmark's label space, ``names[label]``: the class tables' ``name`` (the class
    id where it has none), followed by `` (<class id>)`` where classes share a name (``ClassLabel`` names are
    unique), and ``<unused N>`` for a label no class holds."""
    classes = pd.concat([bench.id_classes, bench.ood_classes], ignore_index=True)
    names = classes["name"].fillna(classes["id"])  # a class without a name is named by its id
    names = names.where(~names.duplicated(keep=False), names + " (" + classes["id"] + ")")
    by_label = dict(zip(classes["label"].astype(int), names))
    return [by_label.get(label, UNUSED_LABEL.format(label=label)) for label in range(max(by_label) + 1)]


def has_copies(manifest: dict) -> bool:
    """Whether ``datasets`` reads the benchmark from its shards' Parquet copies (format 3), else from the tars."""
    return manifest["format_version"] >= COPIES_SINCE


def features_of(bench: Benchmark) -> datasets.Features:
    """The row features of a benchmark, its label a ``ClassLabel`` of :func:`label_names`: :func:`row_features`
    (format 3), else :func:`sample_features` (format 1 has no ``cls``)."""
    version = bench.manifest["format_version"]
    label = datasets.ClassLabel(names=label_names(bench)) if version >= LABELLED_SINCE else None
    return row_features(label) if has_copies(bench.manifest) else sample_features(bench.image_ext, label)


def data_file(shard: dict) -> str:
    """What ``datasets`` reads of a manifest shard: its Parquet copy (format 3), else the tar itself."""
    return shard["parquet"]["path"] if "parquet" in shard else shard["path"]


def test_shards(manifest: dict) -> dict[str, str]:
    """``class_id -> the data file of its OOD test shard`` (:func:`data_file`) of a manifest."""
    return {s["class_id"]: data_file(s) for s in manifest["shards"] if s["split"] == "ood_test"}


def _open(source: str | Path, revision: str | None) -> tuple[Benchmark, str, str | None]:
    """The benchmark, the prefix that turns a relative shard path into a data file, and the Hub commit (None: a
    folder)."""
    if Path(source).is_dir():
        return Benchmark.open(source), f"{Path(source).resolve().as_posix()}/", None
    commit = HfApi().dataset_info(str(source), revision=revision or "main").sha
    return Benchmark.open(f"{HUB_PREFIX}{source}@{commit}"), f"{HUB_PREFIX}{source}@{commit}/", commit


def _level_file(source: str | Path, commit: str | None, relpath: str) -> Path:
    """The level manifest as a local path (absent: a path that does not exist)."""
    if commit is None:
        return Path(source) / relpath
    try:
        return Path(hf_hub_download(str(source), relpath, repo_type="dataset", revision=commit))
    except EntryNotFoundError:
        return Path(source) / relpath


def load_level(
    source: str | Path,
    model: str,
    kappa: str,
    level: int,
    *,
    revision: str | None = None,
    streaming: bool = False,
    **kwargs,
) -> datasets.Dataset | datasets.IterableDataset:
    """The OOD test images of one severity level of ``(model, kappa)`` (split name ``level_NN``); ``kwargs`` go to
    ``datasets.load_dataset`` (``cache_dir``, ``num_proc``, ...)."""
    bench, prefix, commit = _open(source, revision)
    level_path = _level_file(source, commit, f"levels/{level_file_name(model, kappa)}")
    if not level_path.is_file():
        raise BenchmarkError(
            f"{source} has no level manifest for model {model!r} and kappa {kappa!r} ({level_file_name(model, kappa)})"
        )
    table = read_level_table(level_path)
    files = level_data_files(table, test_shards(bench.manifest))
    split = level_split(level)
    if split not in files:
        raise BenchmarkError(f"level {level} does not exist; the levels are 0..{len(files) - 1}")
    return datasets.load_dataset(
        "parquet" if has_copies(bench.manifest) else "webdataset",
        data_files={split: [prefix + p for p in files[split]]},
        split=split,
        features=features_of(bench),
        streaming=streaming,
        **kwargs,
    )
