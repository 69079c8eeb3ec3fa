"""Loading a severity level of a (model, kappa) pair as a ``datasets.Dataset`` (or a streaming one).

``data_files`` is built from the level manifest ``levels/<model>__<kappa>.parquet`` and the
benchmark manifest (one OOD test shard per class), and handed to
``datasets.load_dataset("webdataset", ...)`` with the features declared. A benchmark is a local
folder or a Hub dataset repo; a repo is read at one commit (``revision``: a tag, branch or sha,
default ``main``), through ``hf://datasets/<repo>@<commit>/...`` paths.
"""

from __future__ import annotations

from pathlib import Path

import datasets
from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub.errors import EntryNotFoundError

from dataset_builder.errors import BenchmarkError
from dataset_builder.levels import level_data_files, level_file_name, level_split, read_level_table
from dataset_builder.manifest import MANIFEST, load_manifest


def sample_features(image_ext: str) -> datasets.Features:
    """The features of every sample: key, source shard, the image, and its class id."""
    return datasets.Features({
        "__key__": datasets.Value("string"),
        "__url__": datasets.Value("string"),
        image_ext: datasets.Image(),
        "json": {"class_id": datasets.Value("string")},
    })


def test_shards(manifest: dict) -> dict[str, str]:
    """``class_id -> OOD test shard path`` of a manifest."""
    return {s["class_id"]: s["path"] for s in manifest["shards"] if s["split"] == "ood_test"}


def _fetch(source: str | Path, revision: str | None, relpath: str) -> tuple[Path, str]:
    """A file of the benchmark as a local path, and the prefix that turns a relative shard path into a data file."""
    if Path(source).is_dir():
        return Path(source) / relpath, f"{Path(source).resolve().as_posix()}/"
    commit = HfApi().dataset_info(str(source), revision=revision or "main").sha
    try:
        local = hf_hub_download(str(source), relpath, repo_type="dataset", revision=commit)
    except EntryNotFoundError:
        return Path(source) / relpath, ""  # absent: the caller's check names it
    return Path(local), f"hf://datasets/{source}@{commit}/"


def load_level(source: str | Path, model: str, kappa: str, level: int, *, revision: str | None = None,
               streaming: bool = False) -> datasets.Dataset | datasets.IterableDataset:
    """The OOD test images of one severity level of ``(model, kappa)`` (split name ``level_NN``)."""
    manifest_path, prefix = _fetch(source, revision, MANIFEST)
    manifest, _ = load_manifest(manifest_path.parent, local=Path(source).is_dir())
    level_path, _ = _fetch(source, revision, f"levels/{level_file_name(model, kappa)}")
    if not level_path.is_file():
        raise BenchmarkError(f"{source} has no level manifest for model {model!r} and kappa {kappa!r} ({level_file_name(model, kappa)})")
    files = level_data_files(read_level_table(level_path), test_shards(manifest))
    split = level_split(level)
    if split not in files:
        raise BenchmarkError(f"level {level} does not exist; the levels are 0..{len(files) - 1}")
    return datasets.load_dataset("webdataset", data_files={split: [prefix + p for p in files[split]]}, split=split,
                                 features=sample_features(manifest["image_ext"]), streaming=streaming)
