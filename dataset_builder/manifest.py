"""``manifest.json``: what a benchmark is (id, version, seed, rules, classes, shards with sha256)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path, PurePosixPath, PureWindowsPath

from dataset_builder.errors import BenchmarkError
from dataset_builder.files import write_atomic

MANIFEST = "manifest.json"
FORMAT_VERSION = 3  # 2: every sample has a ``cls`` label member, the class tables a ``label`` column; 3: every
# shard has a Parquet copy for ``datasets`` (columns image, label, key, class_id)
READ_VERSIONS = (1, 2, 3)
LABELLED_SINCE = 2  # the first format whose samples have ``cls``
COPIES_SINCE = 3  # the first format whose shards have Parquet copies
# Largest image (width x height) a benchmark holds: 8192 x 8192, at most 192 MiB decoded as RGB per image and
# reader, far above any classification photo, and below Pillow's own warning threshold (~89.5M pixels).
MAX_IMAGE_PIXELS = 2**26
HUB_PREFIX = "hf://datasets/"  # a benchmark on the Hub: hf://datasets/<owner>/<name>@<revision>


def dumps(manifest: dict) -> bytes:
    """Canonical bytes: sorted keys, fixed indentation, trailing newline (so rebuilds are identical)."""
    return (json.dumps(manifest, sort_keys=True, indent=1, ensure_ascii=False) + "\n").encode()


def write_manifest(root: Path, manifest: dict) -> str:
    """Write the manifest atomically; return its sha256 (the benchmark revision)."""
    data = dumps(manifest)
    write_atomic(root / MANIFEST, data)
    return hashlib.sha256(data).hexdigest()


def load_manifest(root: Path, *, local: bool = True) -> tuple[dict, str]:
    """The manifest of a benchmark folder and its sha256, checked: a JSON object of a format version this reads whose
    shard paths stay inside the folder (``local``: also after following symbolic links; a Hub snapshot's
    files are links into the Hub cache)."""
    path = Path(root) / MANIFEST
    if not path.is_file():
        raise BenchmarkError(f"{root} is not a benchmark folder: no {MANIFEST}")
    data = path.read_bytes()
    try:
        manifest = json.loads(data)
    except RecursionError as exc:
        raise BenchmarkError(f"{path} is not a manifest: JSON nested too deeply") from exc
    except ValueError as exc:  # JSONDecodeError, or bytes that are not UTF-8
        raise BenchmarkError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(manifest, dict):
        raise BenchmarkError(f"{path} is not a manifest: not a JSON object")
    if manifest.get("format_version") not in READ_VERSIONS:
        raise BenchmarkError(
            f"{path} has format_version {manifest.get('format_version')!r}, this version reads "
            f"{' and '.join(map(str, READ_VERSIONS))}"
        )
    _check_fields(Path(root), manifest, path, local)
    return manifest, hashlib.sha256(data).hexdigest()


def _check_fields(root: Path, manifest: dict, path: Path, local: bool) -> None:
    limit = manifest.get("max_image_pixels", MAX_IMAGE_PIXELS)
    if type(limit) is not int or limit < 1:
        raise BenchmarkError(f"{path}: max_image_pixels must be a positive integer, got {limit!r}")
    shards = manifest.get("shards")
    if not isinstance(shards, list) or not all(isinstance(s, dict) and isinstance(s.get("path"), str) for s in shards):
        raise BenchmarkError(f"{path}: shards must be a list of objects with a path")
    for i, shard in enumerate(shards):
        if not _inside(root, shard["path"], follow_links=local):
            raise BenchmarkError(f"{path}: shards[{i}].path {shard['path']!r} is outside the benchmark folder")
        if manifest["format_version"] >= COPIES_SINCE:
            _check_copy(root, shard.get("parquet"), f"{path}: shards[{i}].parquet", local)


def _check_copy(root: Path, copy, where: str, local: bool) -> None:
    """A shard's Parquet copy entry (format 3): an object whose path stays inside the folder."""
    if not (isinstance(copy, dict) and isinstance(copy.get("path"), str)):
        raise BenchmarkError(f"{where} must be an object with a path (the shard's Parquet copy)")
    if not _inside(root, copy["path"], follow_links=local):
        raise BenchmarkError(f"{where}.path {copy['path']!r} is outside the benchmark folder")


def _inside(root: Path, relpath: str, follow_links: bool = True) -> bool:
    """Whether ``relpath`` names a file under ``root``: relative, no ``..``, and (``follow_links``) no link out."""
    if not relpath or "\\" in relpath or PurePosixPath(relpath).is_absolute() or PureWindowsPath(relpath).drive:
        return False
    if ".." in PurePosixPath(relpath).parts:
        return False
    return not follow_links or (root / relpath).resolve().is_relative_to(root.resolve())
