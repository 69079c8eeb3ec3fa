"""A submission bundle: the submission file and every file of its folder, the identity of a submission's code.

Everything the file can read of its own lives in its folder (its weights, its helpers), so the bundle's hash, which the
harness computes itself, is what names the code in records and keys the score cache. A sandboxed run reads a copy of
the bundle made while hashing, so the bytes that ran are the bytes that were hashed.

Hidden entries (``.git``, ``.venv``), ``__pycache__`` and the folders the harness writes (a cache folder, tagged with
``CACHEDIR.TAG`` as the cache-directory tagging convention has it; an output folder, with its ``per_level.csv`` and
``records/``) are left out, so that a run's own outputs never change the identity of the code that made them. A link is
refused, since following it could hand the submission a file from outside its folder (a token, say).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from harness.errors import HarnessError

MAX_FILES = 10_000
SKIPPED = ("__pycache__",)
CACHE_TAG = "CACHEDIR.TAG"
CACHE_TAG_SIGNATURE = "Signature: 8a477f597d28d172789f06886806bc55"


@dataclass(frozen=True)
class Bundle:
    """A submission file's folder: its files relative to ``root`` (sorted), and ``file`` among them."""

    root: Path
    file: str
    files: tuple[str, ...]

    @classmethod
    def of(cls, path: str | Path) -> Bundle:
        """The bundle of a submission file; a link, or more than ``MAX_FILES`` files, is refused in one line."""
        path = Path(path)
        if not path.is_file():
            raise HarnessError(f"submission file {path} not found")
        if path.is_symlink():
            raise HarnessError(f"submission file {path} is a link; pass the file itself")
        root = path.resolve().parent
        files = []
        for folder, dirs, names in os.walk(root):
            dirs[:] = sorted(d for d in dirs if not _skipped(d) and not _written_by_harness(Path(folder, d)))
            for name in [*dirs, *names]:
                if not _skipped(name) and (Path(folder) / name).is_symlink():
                    raise HarnessError(
                        f"the submission's folder {root} holds a link, {Path(folder, name).relative_to(root)}; "
                        "links are not followed: copy what it points to into the folder"
                    )
            files += [Path(folder, name).relative_to(root).as_posix() for name in names if not _skipped(name)]
            if len(files) > MAX_FILES:
                raise HarnessError(
                    f"the submission's folder {root} holds more than {MAX_FILES:,} files; put {path.name} and "
                    "the files it reads in a folder of their own"
                )
        return cls(root, path.name, tuple(sorted(files)))

    def hash(self, copy_to: Path | None = None) -> tuple[str, dict[str, str]]:
        """The bundle's hash (sha256 over each file's relative path and sha256, in path order) and each file's sha256,
        every file read once. With ``copy_to``, the files are copied there as they are read (readable by anyone: the
        sandbox's user reads them)."""
        files = {name: _file_digest(self.root / name, copy_to and copy_to / name) for name in self.files}
        digest = hashlib.sha256()
        for name, file_digest in files.items():
            digest.update(f"{name}\0{file_digest}\n".encode())
        if copy_to is not None:
            for folder, dirs, _ in os.walk(copy_to):
                for d in dirs:
                    os.chmod(Path(folder, d), 0o755)
            os.chmod(copy_to, 0o755)
        return digest.hexdigest(), files


def _skipped(name: str) -> bool:
    return name.startswith(".") or name in SKIPPED


def _written_by_harness(folder: Path) -> bool:
    return (folder / CACHE_TAG).is_file() or ((folder / "per_level.csv").is_file() and (folder / "records").is_dir())


def tag_cache(folder: Path) -> None:
    """Mark ``folder`` as a cache (the cache-directory tagging convention: backup tools and bundles leave it out)."""
    tag = folder / CACHE_TAG
    if not tag.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        tag.write_text(CACHE_TAG_SIGNATURE + "\n# a cood-bench cache: see https://bford.info/cachedir/\n")


def _file_digest(source: Path, target: Path | None) -> str:
    """A file's sha256, writing its bytes to ``target`` (mode 0644) on the way when given."""
    digest = hashlib.sha256()
    if target is not None:
        target.parent.mkdir(parents=True, exist_ok=True)
    with open(source, "rb") as src, open(os.devnull if target is None else target, "wb") as out:
        for block in iter(lambda: src.read(1 << 20), b""):
            digest.update(block)
            out.write(block)
    if target is not None:
        os.chmod(target, 0o644)
    return digest.hexdigest()
