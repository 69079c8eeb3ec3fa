"""``manifest.json``: what a benchmark is (id, version, seed, rules, classes, shards with sha256)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from dataset_builder.errors import BenchmarkError

MANIFEST = "manifest.json"
FORMAT_VERSION = 1


def dumps(manifest: dict) -> bytes:
    """Canonical bytes: sorted keys, fixed indentation, trailing newline (so rebuilds are identical)."""
    return (json.dumps(manifest, sort_keys=True, indent=1, ensure_ascii=False) + "\n").encode()


def write_manifest(root: Path, manifest: dict) -> str:
    """Write the manifest atomically; return its sha256 (the benchmark revision)."""
    data = dumps(manifest)
    partial = root / (MANIFEST + ".partial")
    partial.write_bytes(data)
    os.replace(partial, root / MANIFEST)
    return hashlib.sha256(data).hexdigest()


def load_manifest(root: Path) -> tuple[dict, str]:
    """The manifest of a benchmark folder and its sha256."""
    path = Path(root) / MANIFEST
    if not path.is_file():
        raise BenchmarkError(f"{root} is not a benchmark folder: no {MANIFEST}")
    data = path.read_bytes()
    try:
        manifest = json.loads(data)
    except json.JSONDecodeError as exc:
        raise BenchmarkError(f"{path} is not valid JSON: {exc}") from None
    if manifest.get("format_version") != FORMAT_VERSION:
        raise BenchmarkError(f"{path} has format_version {manifest.get('format_version')!r}, this version reads {FORMAT_VERSION}")
    return manifest, hashlib.sha256(data).hexdigest()
