"""The one door to every form of image source (:mod:`dataset_builder.sources` for the local forms,
:mod:`dataset_builder.hub_source` for Hub shards): :func:`open_source` tells them apart by their path."""

from __future__ import annotations

import os
from pathlib import Path

from dataset_builder.errors import BenchmarkError
from dataset_builder.hub_source import hub_source
from dataset_builder.sources import ClassTarSource, FolderSource, ImageSource, read_val_labels, val_tar_source


def open_source(
    spec: str | Path, what: str, labels: str | Path | None = None, keep: set[str] | None = None, workers: int = 2
) -> ImageSource:
    """The source ``spec`` names: ``hf://datasets/...``, a ``.tar`` file (a tar of per-class tars, or with ``labels`` a
    flat tar of images), a folder of ``<class>.tar`` files, or a folder of class folders. ``keep``: the classes whose
    images are wanted (an index holds only those); ``what`` names the source in messages."""
    spec = str(spec)
    if spec.startswith("hf://"):
        return hub_source(spec, keep, workers)
    path = Path(spec)
    if labels is not None and not path.is_file():
        raise BenchmarkError(f"{what}: labels are for a tar of images; {spec} is not a file")
    if path.is_file():
        if labels is not None:
            return val_tar_source(spec, read_val_labels(labels))
        return ClassTarSource.from_outer_tar(spec)
    if not path.is_dir():
        raise BenchmarkError(f"{what}: {spec} is neither a folder, a tar file nor an hf://datasets/ URL")
    with os.scandir(path) as entries:
        tars = any(e.is_file() and e.name.endswith(".tar") for e in entries)
    return ClassTarSource.from_folder(spec) if tars else FolderSource(path)
