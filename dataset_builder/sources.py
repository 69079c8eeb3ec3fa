"""Where a benchmark's images come from: class folders, tars of per-class tars, a flat tar plus labels, Hub WebDataset
shards.

Every source answers the same three questions, so that the rest of the build (image checks, the seeded split,
the shards) never knows which one it reads, and one set of images gives the same benchmark from any form:

- :meth:`ImageSource.classes`: the class ids it holds, sorted;
- :meth:`ImageSource.names`: a class's image names, sorted; a name is the file name the image has in the
  ImageNet releases (``n01440764_10026.JPEG``, ``ILSVRC2012_val_00000001.JPEG``), the key of the seeded split;
- :meth:`ImageSource.read`: one image's bytes, as stored.

Nothing is extracted to disk. An archive is indexed once (tar headers only: ``tarfile`` seeks over the data), then
each worker reads the members it needs by seeking into it, so the work on a class can run on any core in any order.
The forms (:func:`dataset_builder.source_forms.open_source` tells them apart):

- ``<root>/<wnid>/<image>``: class folders;
- a tar of per-class tars (``fall11_whole.tar``, ``winter21_whole.tar``, ``ILSVRC2012_img_train.tar``: members
  ``<wnid>.tar``), or the folder of ``<wnid>.tar`` files it unpacks to;
- a flat tar of images plus labels (``ILSVRC2012_img_val.tar`` with :func:`read_val_labels`);
- ``hf://datasets/<namespace>/<name>[@<revision>][/<shard glob>]``: WebDataset shards on the Hub
  (:mod:`dataset_builder.hub_source`).
"""

from __future__ import annotations

import io
import itertools
import os
import tarfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from dataset_builder.errors import BenchmarkError

Member = tuple[str, int, int]  # (file, offset of the data, size)


class SourceError(BenchmarkError):
    """A class of a source that cannot be read (a corrupt per-class tar): the class is removed with the reason."""


class ImageSource:
    """Images by class; see the module docstring. Sources are pickled to the worker processes, so they hold paths and
    indexes, never open files."""

    form = ""
    class_units = "classes"  # what a class is in this form, for messages ("lacks 3 class tars")

    def classes(self) -> list[str]:
        raise NotImplementedError

    def names(self, class_id: str) -> list[str]:
        raise NotImplementedError

    def read(self, class_id: str, name: str) -> bytes:
        raise NotImplementedError

    def holds_images(self, class_id: str, count: int) -> bool:
        """Whether the class holds ``count`` image files or more (unread: some may not decode)."""
        return len(self.names(class_id)) >= count

    def subset(self, class_ids: tuple[str, ...]) -> ImageSource:
        """The same source, keeping only what ``class_ids`` need (what a block carries to its worker)."""
        return self

    def close(self) -> None:
        """Close what reading left open."""

    def identity(self) -> str:
        """What was read, for the resume check: the same identity means the same images."""
        raise NotImplementedError

    def location(self, class_id: str) -> str:
        """Where a class is, for messages."""
        raise NotImplementedError

    def __str__(self) -> str:
        return str(getattr(self, "root", None) or self.origin)


def _check_tar(path: str) -> tarfile.TarFile:
    try:
        return tarfile.open(path, "r:")  # uncompressed and seekable: iterating reads the headers only
    except tarfile.ReadError as exc:
        raise BenchmarkError(f"{path} is not an uncompressed tar archive ({exc})") from exc


def index_tar(path: str) -> list[tuple[str, int, int]]:
    """``(name, offset of the data, size)`` of every regular file of an uncompressed tar, in tar order; a truncated or
    damaged archive is a one-line error naming it and the last good member."""
    rows, last = [], "its first member"
    with _check_tar(path) as tar:
        try:
            for info in tar:
                if info.isfile():
                    rows.append((info.name, info.offset_data, info.size))
                    last = info.name
        except (tarfile.ReadError, EOFError) as exc:
            raise BenchmarkError(f"{path} is truncated or damaged after {last} ({exc})") from exc
        tar.fileobj.seek(tar.offset)
        if tar.fileobj.read(tarfile.BLOCKSIZE) != tarfile.NUL * tarfile.BLOCKSIZE:  # cut between two members
            raise BenchmarkError(f"{path} is truncated or damaged after {last} (no end-of-archive block)")
    return rows


class _Window(io.RawIOBase):
    """Bytes ``[start, start + size)`` of an open file descriptor as a seekable file of its own (tarfile reads an inner
    tar in it, one ``pread`` per header: the standard library has no such view)."""

    def __init__(self, fd: int, start: int, size: int):
        self.fd, self.start, self.size, self.pos = fd, start, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = max(0, {0: offset, 1: self.pos + offset, 2: self.size + offset}[whence])
        return self.pos

    def readinto(self, buffer) -> int:
        data = os.pread(self.fd, max(0, min(len(buffer), self.size - self.pos)), self.start + self.pos)
        buffer[: len(data)] = data
        self.pos += len(data)
        return len(data)


def image_name(member: str) -> str:
    return member.rsplit("/", 1)[-1]


@dataclass
class FolderSource(ImageSource):
    """``<root>/<class>/<image>``: class folders of image files (hidden files and sub-folders are passed over);
    ``only``: the classes kept of them (all when None)."""

    root: Path
    only: frozenset[str] | None = None
    form = "folders"
    class_units = "class folders"

    def classes(self) -> list[str]:
        if not self.root.is_dir():
            raise BenchmarkError(f"{self.root} is not a folder")
        with os.scandir(self.root) as entries:
            found = (e.name for e in entries if e.is_dir() and not e.name.startswith("."))
            return sorted(c for c in found if self.only is None or c in self.only)

    def names(self, class_id: str) -> list[str]:
        with os.scandir(self.root / class_id) as entries:
            return sorted(e.name for e in entries if not e.name.startswith(".") and e.is_file())

    def read(self, class_id: str, name: str) -> bytes:
        return (self.root / class_id / name).read_bytes()

    def subset(self, class_ids: tuple[str, ...]) -> FolderSource:
        return FolderSource(self.root, frozenset(c for c in class_ids if self.only is None or c in self.only))

    def identity(self) -> str:
        return f"folders:{self.root.resolve()}"

    def location(self, class_id: str) -> str:
        return str(self.root / class_id)


@dataclass
class ClassTarSource(ImageSource):
    """One uncompressed tar per class, ``<class>.tar``, either members of an outer tar or files of a folder: ``tars``
    maps a class to ``(file, offset, size)`` of its tar. A class's tar is indexed when the class is read (headers only)
    and its images are read by seeking; a tar that does not read raises :class:`SourceError`."""

    origin: str
    tars: dict[str, Member]
    form = "class_tars"
    class_units = "class tars"
    _open: tuple = field(
        default=(), repr=False, compare=False
    )  # (class, fd, {name: (offset, size)}) of the class read last

    @classmethod
    def from_outer_tar(cls, path: str) -> ClassTarSource:
        return cls._checked(path, {m: (path, offset, size) for m, offset, size in index_tar(path)})

    @classmethod
    def from_folder(cls, folder: str) -> ClassTarSource:
        with os.scandir(folder) as entries:
            return cls._checked(
                folder,
                {e.name: (e.path, 0, e.stat().st_size) for e in entries if e.is_file() and e.name.endswith(".tar")},
            )

    @classmethod
    def _checked(cls, origin: str, members: dict[str, Member]) -> ClassTarSource:
        tars = {}
        for member, where in members.items():
            stem, ext = os.path.splitext(image_name(member))
            if ext != ".tar":
                raise BenchmarkError(f"{origin} holds {member}, not a per-class tar <wnid>.tar")
            if stem in tars:
                raise BenchmarkError(f"{origin} holds two tars of class {stem}")
            tars[stem] = where
        if not tars:
            raise BenchmarkError(f"{origin} holds no per-class tars <wnid>.tar")
        return cls(origin, tars)

    def classes(self) -> list[str]:
        return sorted(self.tars)

    def _members(self, class_id: str) -> dict[str, tuple[int, int]]:
        if self._open and self._open[0] == class_id:
            return self._open[2]
        self.close()
        path, offset, size = self.tars[class_id]
        fd = os.open(path, os.O_RDONLY)
        try:
            with tarfile.open(fileobj=_Window(fd, offset, size), mode="r:") as tar:
                members = {image_name(i.name): (offset + i.offset_data, i.size) for i in tar if i.isfile()}
        except (tarfile.TarError, EOFError) as exc:
            os.close(fd)
            raise SourceError(f"{self.location(class_id)} does not read as a tar ({exc})") from exc
        if any(o + n > offset + size for o, n in members.values()):
            os.close(fd)
            raise SourceError(f"{self.location(class_id)} is truncated")
        self._open = (class_id, fd, members)
        return members

    def close(self) -> None:
        if self._open:
            os.close(self._open[1])
            self._open = ()

    def names(self, class_id: str) -> list[str]:
        return sorted(self._members(class_id))

    def holds_images(self, class_id: str, count: int) -> bool:
        """Reading no more than ``count`` of the tar's headers; a tar that does not read holds none."""
        path, offset, size = self.tars[class_id]
        fd = os.open(path, os.O_RDONLY)
        try:
            with tarfile.open(fileobj=_Window(fd, offset, size), mode="r:") as tar:
                files = (info for info in tar if info.isfile())
                return sum(1 for _ in itertools.islice(files, count)) == count
        except (tarfile.TarError, EOFError):
            return False
        finally:
            os.close(fd)

    def read(self, class_id: str, name: str) -> bytes:
        offset, size = self._members(class_id)[name]
        return os.pread(self._open[1], size, offset)

    def subset(self, class_ids: tuple[str, ...]) -> ClassTarSource:
        return ClassTarSource(self.origin, {c: self.tars[c] for c in class_ids if c in self.tars})

    def identity(self) -> str:
        return f"class_tars:{Path(self.origin).resolve()}"

    def location(self, class_id: str) -> str:
        path, offset, _ = self.tars[class_id]
        return f"{path}:{class_id}.tar" if offset or path == self.origin else path

    def __getstate__(self) -> dict:
        return {"origin": self.origin, "tars": self.tars, "_open": ()}


@dataclass
class MemberSource(ImageSource):
    """Images that are members of some tar files (a flat validation tar, WebDataset shards): ``members`` maps a class
    to ``{name: (file, offset, size)}``, found by one indexing pass."""

    origin: str
    members: dict[str, dict[str, Member]]
    form: str = "tar_members"
    revision: str = ""

    def classes(self) -> list[str]:
        return sorted(self.members)

    def names(self, class_id: str) -> list[str]:
        return sorted(self.members[class_id])

    def read(self, class_id: str, name: str) -> bytes:
        path, offset, size = self.members[class_id][name]
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(size)

    def subset(self, class_ids: tuple[str, ...]) -> MemberSource:
        return MemberSource(
            self.origin, {c: self.members[c] for c in class_ids if c in self.members}, self.form, self.revision
        )

    def identity(self) -> str:
        return f"{self.form}:{self.origin if self.origin.startswith('hf://') else Path(self.origin).resolve()}"

    def location(self, class_id: str) -> str:
        return f"{self.origin} (class {class_id})"


def read_val_labels(path: str | Path) -> dict[str, str]:
    """``image name -> wnid`` of the ImageNet-1K validation images, from either label file people have:

    - the ILSVRC2012 devkit archive (``ILSVRC2012_devkit_t12.tar.gz``, read without unpacking):
      ``data/ILSVRC2012_validation_ground_truth.txt`` gives the ILSVRC2012_ID of image ``i`` on line ``i``, and
      ``data/meta.mat`` maps the IDs to wnids;
    - Kaggle's ``LOC_val_solution.csv`` (``ImageId,PredictionString``; the first token of a prediction is the wnid).
    """
    path = Path(path)
    if not path.is_file():
        raise BenchmarkError(f"{path}: no such label file")
    if path.suffix == ".csv":
        import pandas as pd

        table = pd.read_csv(path, dtype=str)
        if list(table.columns[:2]) != ["ImageId", "PredictionString"]:
            raise BenchmarkError(
                f"{path} must have the header ImageId,PredictionString (Kaggle's LOC_val_solution.csv)"
            )
        return {f"{i}.JPEG": p.split()[0] for i, p in zip(table["ImageId"], table["PredictionString"])}
    try:
        with tarfile.open(path) as tar:
            found = {Path(m.name).name: m for m in tar if m.isfile()}
            if not {"meta.mat", "ILSVRC2012_validation_ground_truth.txt"} <= found.keys():
                raise BenchmarkError(f"{path} is not the ILSVRC2012 devkit (no data/meta.mat and ground truth file)")
            meta = tar.extractfile(found["meta.mat"]).read()
            truth = tar.extractfile(found["ILSVRC2012_validation_ground_truth.txt"]).read().decode().split()
    except tarfile.TarError as exc:
        raise BenchmarkError(f"{path} is neither a devkit archive nor a LOC_val_solution.csv ({exc})") from exc
    from scipy.io import loadmat

    synsets = loadmat(io.BytesIO(meta), squeeze_me=True)["synsets"]
    wnids = {int(s["ILSVRC2012_ID"]): str(s["WNID"]) for s in synsets}
    return {f"ILSVRC2012_val_{i:08d}.JPEG": wnids[int(label)] for i, label in enumerate(truth, start=1)}


def val_tar_source(path: str, labels: dict[str, str]) -> MemberSource:
    """The flat validation tar (``ILSVRC2012_val_*.JPEG``), each image in its labelled class; an image without a label
    is an error, so is a label without an image."""
    members: dict[str, dict[str, Member]] = defaultdict(dict)
    for member, offset, size in index_tar(path):
        name = image_name(member)
        if name not in labels:
            raise BenchmarkError(f"{path}: {name} has no label in the label file")
        members[labels[name]][name] = (path, offset, size)
    found = sum(len(m) for m in members.values())
    if found != len(labels):
        raise BenchmarkError(f"{path} holds {found} images, the label file labels {len(labels)}")
    return MemberSource(path, dict(members), "val_tar")
