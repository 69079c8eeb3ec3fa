"""A record's per-OOD-class drill-down and per-image scores: the files its ``per_class`` and ``per_image`` fields name,
where they are, and a level's classes.

A record's ``per_class`` paths (``file``, thumbnails) and its ``per_image`` file are relative to its **folder**: for
a run's outputs, the folder that holds ``records/``; in a leaderboard, ``attachments/<seq>-<entry>/`` beside
``records/``, where the store keeps the files of each record it accepts (:func:`record_folder` finds it from the
record file's path).

What a store takes and a site publishes is only what the harness's drill-down writes (``harness/drilldown.py``): the
sidecar, a parquet file, and thumbnails, PNG or JPEG images, each checked by its magic bytes, under a visible relative
path (no part starting with ``.``, no absolute path, no ``..``), within :data:`MAX_FILE_BYTES` per file and
:data:`MAX_RECORD_BYTES` per record; and what ``harness/per_image.py`` writes: the per-image file, a parquet file
within :data:`leaderboard.per_image.MAX_BYTES`, checked against its record (:func:`leaderboard.per_image.check`).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from leaderboard import per_image
from leaderboard.errors import LeaderboardError

ATTACHMENTS = "attachments"
MAX_FILE_BYTES = 64 << 20  # one file: a sidecar of 10,000 classes x a few kappas is a few MiB; a thumbnail a few KiB
MAX_RECORD_BYTES = 128 << 20  # all the files of one record together
PARQUET = b"PAR1"  # a parquet file starts and ends with it
IMAGES = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff")  # PNG, JPEG: how a thumbnail starts
SIDECAR_TYPES = (".parquet",)
THUMBNAIL_TYPES = (".png", ".jpg", ".jpeg")


def files(record: dict) -> list[str]:
    """The relative paths a record names: its ``per_class`` sidecar, every thumbnail, then its per-image file (each
    once)."""
    images = per_image.name(record)
    return list(dict.fromkeys([*_per_class_files(record), *([images] if images is not None else [])]))


def _per_class_files(record: dict) -> list[str]:
    """The relative paths a record's ``per_class`` names: its sidecar, then every thumbnail (each once)."""
    per_class = record.get("per_class")
    if per_class is None:
        return []
    thumbs = [t for level in per_class["levels"] for entry in level["hardest"] for t in entry["thumbnails"]]
    return list(dict.fromkeys([per_class["file"], *thumbs]))


def resolve(folder: str | Path, relative: str) -> Path:
    """``folder/relative``, refused when it leaves ``folder`` (a link pointing out of it)."""
    root = Path(folder).resolve()
    path = (root / relative).resolve()
    if not path.is_relative_to(root):
        raise LeaderboardError(f"{relative}: leaves the folder {folder}")
    return path


def name_problem(name: str, types: tuple[str, ...]) -> str | None:
    """Why a file a record names may not be kept or published (``types``: the suffixes its role allows), or None."""
    parts = name.split("/")
    if name.startswith("/") or "\\" in name or any(part in ("", ".", "..") for part in parts):
        return "is not a relative path inside the record's folder"
    if any(part.startswith(".") for part in parts):
        return "is a hidden file or in a hidden folder"
    if not name.lower().endswith(types):
        return f"is not a {' or '.join(types)} file"
    return None


def content_problem(name: str, head: bytes, tail: bytes) -> str | None:
    """Why a file's bytes (its first and last few) are not what its name says, or None."""
    if name.lower().endswith(SIDECAR_TYPES):
        return None if head.startswith(PARQUET) and tail.endswith(PARQUET) else "is not a parquet file (no PAR1)"
    return None if head.startswith(IMAGES) else "is not a PNG or JPEG image (by its first bytes)"


def _types(record: dict, name: str) -> tuple[str, ...]:
    sidecars = (per_image.name(record), (record.get("per_class") or {}).get("file"))
    return SIDECAR_TYPES if name in sidecars else THUMBNAIL_TYPES


def _limit(record: dict, name: str) -> int:
    """The size limit of the file ``name`` of a record: the per-image file's own, else :data:`MAX_FILE_BYTES`."""
    return per_image.MAX_BYTES if name == per_image.name(record) else MAX_FILE_BYTES


def read_files(source: str, record: dict, folder: str | Path | None) -> list[tuple[str, bytes]]:
    """The bytes of every file a record names, read from its ``folder``; a one-line error naming the first that is
    missing, too large, hidden, not of the drill-down's types, or (the per-image file) not the record's (see the
    module's docstring)."""
    names, images = files(record), per_image.name(record)
    field = lambda name: "per_image" if name == images else "per_class"  # noqa: E731
    if names and folder is None:
        raise LeaderboardError(f"{source}: {field(names[0])} names {names[0]}, but no folder holding it was given")
    out, total = [], 0
    for name in names:
        data = _read_one(source, field(name), record, name, folder)
        total += len(data) if name != images else 0
        if total > MAX_RECORD_BYTES:
            raise LeaderboardError(
                f"{source}: the files per_class names are over the size limit of {MAX_RECORD_BYTES:,} bytes per record"
            )
        if name == images:
            per_image.check(source, record, data)
        out.append((name, data))
    return out


def _read_one(source: str, field: str, record: dict, name: str, folder: str | Path) -> bytes:
    """The bytes of the file ``name`` (of the record's ``field``) in its ``folder``, or a one-line refusal."""
    names = f"{source}: {field} names"
    problem = name_problem(name, _types(record, name))
    if problem is not None:
        raise LeaderboardError(f"{names} {name[:80]!r}, which {problem}")
    path = resolve(folder, name)
    if not path.is_file():
        raise LeaderboardError(f"{names} {name}, which is not in {folder}")
    if any(part.startswith(".") for part in path.relative_to(Path(folder).resolve()).parts):
        raise LeaderboardError(f"{names} {name}, which leads to a hidden file")
    limit = _limit(record, name)
    if path.stat().st_size > limit:
        raise LeaderboardError(f"{source}: {name} is over the size limit of {limit:,} bytes")
    data = path.read_bytes()
    problem = content_problem(name, data[:8], data[-4:])
    if problem is not None:
        raise LeaderboardError(f"{names} {name}, which {problem}")
    return data


def publishable(folder: str | Path, record: dict, name: str) -> Path | None:
    """The file ``name`` of a record's ``folder`` when a site may publish it (a visible path of the drill-down's types
    whose bytes say so, within the size limit), else None: a store refuses the others at ``add``, and one kept from
    before that check is left out."""
    if name_problem(name, _types(record, name)) is not None:
        return None
    try:
        path = resolve(folder, name)
        if any(part.startswith(".") for part in path.relative_to(Path(folder).resolve()).parts):
            return None
        if not path.is_file() or path.stat().st_size > _limit(record, name):
            return None
        with path.open("rb") as file:
            head = file.read(8)
            file.seek(max(0, path.stat().st_size - 4))
            tail = file.read(4)
    except (OSError, LeaderboardError):
        return None
    return None if content_problem(name, head, tail) is not None else path


def stored_folder(directory: str | Path, record_file: str) -> Path:
    """Where a leaderboard keeps the files of its record ``records/<seq>-<entry>.json``."""
    return Path(directory) / ATTACHMENTS / Path(record_file).stem


def record_folder(record_path: str | Path) -> Path:
    """The folder a record file's ``per_class`` paths are relative to (see the module's docstring)."""
    path = Path(record_path)
    if path.parent.name != "records":
        return path.parent
    root = path.parent.parent
    return stored_folder(root, path.name) if (root / "leaderboard.json").is_file() else root


def level_classes(record: dict, level: int, folder: str | Path | None = None) -> list[dict]:
    """The classes of severity level ``level``, lowest ood-auroc first, as ``{id, name, ood_auroc, mean_confidence,
    n, thumbnails}``: every class of the level from the sidecar in ``folder``, or without a folder the record's
    hardest classes (``n`` None). Thumbnails are relative to the folder (:func:`thumbnail_paths` resolves them)."""
    per_class = record.get("per_class")
    if per_class is None:
        raise LeaderboardError(
            f"{record['model']['name']} / {record['kappa']['name']}: the record has no per-class drill-down"
        )
    levels = per_class["levels"]
    if not 0 <= level < len(levels):
        raise LeaderboardError(f"no level {level}: the record has levels 0 to {len(levels) - 1}")
    listed = {entry["id"]: entry for entry in levels[level]["hardest"]}
    if folder is None:
        return [{**entry, "n": None} for entry in listed.values()]
    path = resolve(folder, per_class["file"])
    try:
        table = pd.read_parquet(path, filters=[("kappa", "==", record["kappa"]["name"]), ("level", "==", level)])
    except (OSError, ValueError) as exc:
        raise LeaderboardError(f"cannot read the per-class table {path}: {exc}") from exc
    table = table.sort_values(["ood_auroc", "class_index"], kind="stable")
    return [
        {
            "id": row.class_id,
            "name": row.name,
            "ood_auroc": float(row.ood_auroc),
            "mean_confidence": float(row.mean_confidence),
            "n": int(row.n),
            "thumbnails": listed.get(row.class_id, {}).get("thumbnails", []),
        }
        for row in table.itertuples()
    ]


def thumbnail_paths(record: dict, folder: str | Path) -> dict[str, Path]:
    """Every thumbnail a record lists, relative path -> file in ``folder`` (for a site to copy next to its pages)."""
    return {name: resolve(folder, name) for name in _per_class_files(record)[1:]}
