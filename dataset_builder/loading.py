"""Loading a severity level of a (model, kappa) pair as a ``datasets.Dataset`` (or a streaming one).

``data_files`` is built from the level manifest ``levels/<model>__<kappa>.parquet`` and the
benchmark manifest (one OOD test shard per class), and handed to
``datasets.load_dataset("webdataset", ...)`` with the features declared. A benchmark is a local
folder or a Hub dataset repo; a repo is read at one commit (``revision``: a tag, branch or sha,
default ``main``), through ``hf://datasets/<repo>@<commit>/...`` paths.

The class id of a sample (``json.class_id``, a string such as ``u0041`` in the shards) loads as an
integer ``ClassLabel`` whose names are the ids of the classes a dataset holds: the ID classes by index
(label = ID class index, what a classifier predicts) when it holds ID images, then its OOD classes by
pool index (the whole pool: label = number of ID classes + pool index); ``int2str`` gives the string id
back. Declaring it labels the samples without changing a byte of the shards (their sha256 is the
benchmark's identity); naming only the classes held keeps each config's names short in the card's YAML.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import datasets
from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub.errors import EntryNotFoundError

from dataset_builder.benchmark import HUB_PREFIX, Benchmark
from dataset_builder.errors import BenchmarkError
from dataset_builder.levels import level_data_files, level_file_name, level_split, read_level_table


def label_names(bench: Benchmark, ood: Iterable[str] | None = None, *, with_id: bool = True) -> list[str]:
    """``ClassLabel`` names: the ID class ids by index (``with_id``), then the OOD class ids of ``ood`` (default: the
    whole pool) by pool index."""
    pool = bench.ood_classes["id"].tolist()
    held = set(pool if ood is None else ood)
    return (bench.id_classes["id"].tolist() if with_id else []) + [c for c in pool if c in held]


def sample_features(image_ext: str, names: list[str] | None = None) -> datasets.Features:
    """The features of every sample: key, source shard, the image, and its class id (a ``ClassLabel`` over
    ``names`` when given, else the string)."""
    return datasets.Features(
        {
            "__key__": datasets.Value("string"),
            "__url__": datasets.Value("string"),
            image_ext: datasets.Image(),
            "json": {"class_id": datasets.ClassLabel(names=names) if names is not None else datasets.Value("string")},
        }
    )


def test_shards(manifest: dict) -> dict[str, str]:
    """``class_id -> OOD test shard path`` of a manifest."""
    return {s["class_id"]: s["path"] for s in manifest["shards"] if s["split"] == "ood_test"}


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
    names = label_names(bench, table.loc[table["level"] == level, "class_id"], with_id=False)
    return datasets.load_dataset(
        "webdataset",
        data_files={split: [prefix + p for p in files[split]]},
        split=split,
        features=sample_features(bench.image_ext, names),
        streaming=streaming,
        **kwargs,
    )
