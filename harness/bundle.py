"""A submission bundle: the submission file and every file of its folder, the identity of a submission's code.

Everything the file can read of its own lives in its folder (its weights, its helpers), so the bundle's hash, which the
harness computes itself, is what names the code in records and keys the score cache. A sandboxed run reads a copy of
the bundle made while hashing, so the bytes that ran are the bytes that were hashed.

Hidden entries (``.git``, ``.venv``), ``__pycache__`` and the folders the harness writes (a cache folder, tagged with
``CACHEDIR.TAG`` as the cache-directory tagging convention has it; an output folder, with its ``per_level.csv`` and
``records/``) are left out, so that a run's own outputs never change the identity of the code that made them.

A bundle holds folders and regular files only, each refused in one line naming it otherwise: a link (symbolic, or a
file with more than one hard link), since following it could hand the submission a file from outside its folder (a
token, say); a FIFO, socket or device, which reading would hang on or never finish; a name that is not UTF-8 or holds
a control character. It holds at most :data:`MAX_FILES` files and :func:`max_bytes` bytes, counted from each file's
size (a sparse file counts whole, as its copy would be) before anything is read. Each file is opened without
following links and without blocking, and read only if it is still the regular file that was counted.
"""

from __future__ import annotations

import hashlib
import os
import stat
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from harness.errors import HarnessError

MAX_FILES = 10_000
DEFAULT_MAX_BYTES = 8 * 2**30  # 8 GiB: the float32 weights of two billion parameters
SKIPPED = ("__pycache__",)
CACHE_TAG = "CACHEDIR.TAG"
CACHE_TAG_SIGNATURE = "Signature: 8a477f597d28d172789f06886806bc55"
LINE_BREAKING = ("Cc", "Cs", "Zl", "Zp")  # control characters, lone surrogates, line and paragraph separators
BLOCK = 1 << 20
KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}
_MAX_BYTES: ContextVar[int | None] = ContextVar("cood_bundle_max_bytes", default=None)


def max_bytes() -> int:
    """The most bytes a bundle may hold here: :data:`DEFAULT_MAX_BYTES`, or what :func:`limited_to` set."""
    value = _MAX_BYTES.get()
    return DEFAULT_MAX_BYTES if value is None else value


@contextmanager
def limited_to(limit: int | None) -> Iterator[None]:
    """Bundles made inside the block (the sandbox's copy, a trusted file's hash) hold at most ``limit`` bytes (None:
    the default); ``cood-harness submit --max-bundle-gb`` sets it for its run."""
    if limit is not None and limit <= 0:
        raise HarnessError(f"--max-bundle-gb must be positive, got {limit / 2**30:g}")
    token = _MAX_BYTES.set(limit)
    try:
        yield
    finally:
        _MAX_BYTES.reset(token)


@dataclass(frozen=True)
class Bundle:
    """A submission file's folder: its files relative to ``root`` (sorted), ``file`` among them, and what each was
    when counted (:func:`_identity`), so that it is read only if it is still that file, as it was."""

    root: Path
    file: str
    files: tuple[str, ...]
    counted: tuple[tuple[int, int, int, int], ...] = ()

    @property
    def size(self) -> int:
        """The bytes of its files, by their sizes."""
        return sum(counted[2] for counted in self.counted)

    @classmethod
    def of(cls, path: str | Path, limit: int | None = None) -> Bundle:
        """The bundle of a submission file, at most ``limit`` bytes (default: :func:`max_bytes`); a link, a file that is
        not a regular file, a bad name, or too many files or bytes are refused in one line."""
        path = Path(path)
        if not path.is_file():
            raise HarnessError(f"submission file {shown(str(path))} not found")
        if path.is_symlink():
            raise HarnessError(f"submission file {shown(str(path))} is a link; pass the file itself")
        root = path.resolve().parent
        limit = max_bytes() if limit is None else limit
        files: dict[str, os.stat_result] = {}
        for folder, dirs, names in os.walk(root):
            kept = []
            for name in sorted([*dirs, *names]):
                if _skipped(name):
                    continue
                entry = Path(folder, name)
                info = _checked(root, entry)
                if stat.S_ISDIR(info.st_mode):
                    if not _written_by_harness(entry):
                        kept.append(name)
                else:
                    files[entry.relative_to(root).as_posix()] = info
            dirs[:] = kept
            if len(files) > MAX_FILES:
                raise HarnessError(
                    f"the submission's folder {shown(str(root))} holds more than {MAX_FILES:,} files; put "
                    f"{shown(path.name)} and the files it reads in a folder of their own"
                )
        total = sum(info.st_size for info in files.values())
        if total > limit:
            raise HarnessError(
                f"the submission's folder {shown(str(root))} holds {_gib(total)} of files, more than the {_gib(limit)} "
                f"a bundle may hold; put {shown(path.name)} and the files it reads in a folder of their own, or raise "
                "--max-bundle-gb"
            )
        names = sorted(files)
        return cls(root, path.name, tuple(names), tuple(_identity(files[name]) for name in names))

    def hash(self, copy_to: Path | None = None) -> tuple[str, dict[str, str]]:
        """The bundle's hash (sha256 over each file's relative path and sha256, in path order) and each file's sha256,
        every file read once. With ``copy_to``, the files are copied there as they are read (readable by anyone: the
        sandbox's user reads them)."""
        counted = self.counted or tuple(_identity(os.lstat(self.root / name)) for name in self.files)
        root_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            files = {
                name: _file_digest(self, root_fd, name, expected, copy_to and copy_to / name)
                for name, expected in zip(self.files, counted)
            }
        finally:
            os.close(root_fd)
        digest = hashlib.sha256()
        for name, file_digest in files.items():
            digest.update(f"{name}\0{file_digest}\n".encode())
        if copy_to is not None:
            for folder, dirs, _ in os.walk(copy_to):
                for d in dirs:
                    os.chmod(Path(folder, d), 0o755)
            os.chmod(copy_to, 0o755)
        return digest.hexdigest(), files


def shown(name: str) -> str:
    """A file name as one line: a byte that is not UTF-8 as ``\\xNN``, a control character or a backslash escaped as
    Python writes them."""
    return "".join(map(_shown_char, name))


def _shown_char(c: str) -> str:
    if "\udc80" <= c <= "\udcff":  # a byte that is not UTF-8, as the file system's names carry it
        return f"\\x{ord(c) - 0xDC00:02x}"
    if unicodedata.category(c) in LINE_BREAKING or c == "\\":
        return c.encode("unicode_escape").decode()
    return c


def _checked(root: Path, entry: Path) -> os.stat_result:
    """``lstat`` of an entry of the bundle, refused in one line unless it is a folder or a regular file of one link,
    with a UTF-8 name free of control characters."""
    name = entry.name
    rel = entry.relative_to(root).as_posix()
    where = f"the submission's folder {shown(str(root))} holds"
    try:
        os.fsencode(name).decode("utf-8")
        bad_name = any(unicodedata.category(c) in LINE_BREAKING for c in name)
    except UnicodeDecodeError:
        bad_name = True
    if bad_name:
        raise HarnessError(
            f"{where} an entry named '{shown(rel)}', not valid UTF-8 or with a control character; rename it"
        )
    info = os.lstat(entry)
    if stat.S_ISLNK(info.st_mode):
        raise HarnessError(
            f"{where} a link, {shown(rel)}; links are not followed: copy what it points to into the folder"
        )
    if stat.S_ISDIR(info.st_mode):
        return info
    if not stat.S_ISREG(info.st_mode):
        kind = KINDS.get(stat.S_IFMT(info.st_mode), "not a regular file")
        raise HarnessError(f"{where} {shown(rel)}, {kind}; a bundle holds regular files and folders only")
    if info.st_nlink > 1:
        raise HarnessError(
            f"{where} {shown(rel)}, a file with {info.st_nlink} hard links; a link could be a file from outside the "
            "folder: copy the file instead of linking it"
        )
    return info


def _identity(info: os.stat_result) -> tuple[int, int, int, int]:
    """Which file it is and as it was: device, inode, size, status change time."""
    return info.st_dev, info.st_ino, info.st_size, info.st_ctime_ns


def _gib(size: int) -> str:
    return f"{size / 2**30:.3g} GiB"


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


def _open_beneath(root_fd: int, name: str) -> int:
    """Open the file ``name`` (relative) under the folder ``root_fd``, following no link on the way, without blocking
    (a FIFO put there since it was counted opens at once, and is then refused)."""
    *folders, last = name.split("/")
    fd = os.dup(root_fd)
    try:
        for folder in folders:
            inner = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = inner
        return os.open(last, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY, dir_fd=fd)
    finally:
        os.close(fd)


def _file_digest(
    bundle: Bundle, root_fd: int, name: str, expected: tuple[int, int, int, int], target: Path | None
) -> str:
    """A file's sha256, writing its bytes to ``target`` (mode 0644) on the way when given; refused in one line unless
    it is still the regular file of one link that was counted, and reads as long as it was."""
    changed = HarnessError(
        f"the submission's folder {shown(str(bundle.root))}: {shown(name)} changed while it was read; run again once "
        "the folder is left alone"
    )
    try:
        fd = _open_beneath(root_fd, name)
    except OSError as exc:
        raise changed from exc
    digest = hashlib.sha256()
    with open(fd, "rb", buffering=0) as source:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1 or _identity(info) != expected:
            raise changed
        if target is not None:
            target.parent.mkdir(parents=True, exist_ok=True)
        with open(os.devnull if target is None else target, "wb" if target is None else "xb") as out:
            left = expected[2]
            while left > 0:
                block = source.read(min(BLOCK, left))
                if not block:
                    break
                left -= len(block)
                digest.update(block)
                out.write(block)
            if left or source.read(1):
                raise changed
    if target is not None:
        os.chmod(target, 0o644)
    return digest.hexdigest()
