"""A leaderboard directory: its benchmark revision, the append-only record store and the current table.

Layout::

    leaderboard.json          benchmark revision and number of levels this leaderboard accepts
    records/<seq>-<entry>.json  accepted records, byte for byte as they came; never changed or removed
    index.txt                 the accepted record files in arrival order, one per line
    table.parquet, table.csv  a row per accepted record, rebuilt from the records after every add (its ``conflict``
                              column says how a record stands beside the others of its entry)
    attachments/<seq>-<entry>/  the files a record's ``per_class`` names (see :mod:`leaderboard.drilldown`)
    releases/v<N>/            frozen versions (see :mod:`leaderboard.release`)
    .lock                     serialises writers (``add``, ``release``)

An add is all or nothing, even when killed or out of disk: the batch's record files are written
first (each flushed to disk), then ``index.txt`` is replaced in one atomic rename, which is the
moment the whole batch becomes visible. Record files that the index does not list are leftovers
of an interrupted add: every reader ignores them and the next add removes them. A table older than
the index (an add stopped after its commit) is rebuilt in memory by readers and on disk by the
next add. The table of an add is built before anything is written: a record it could not hold changes nothing.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sys
from collections.abc import Callable
from contextlib import contextmanager, suppress
from pathlib import Path

from filelock import FileLock, Timeout

from dataset_builder import faults
from dataset_builder.files import fsync_dir, write_atomic, written_for
from leaderboard import jsonio
from leaderboard.conflicts import difference, is_verified, repeats, standings
from leaderboard.conflicts import first_difference as first_difference  # re-exported: callers compare records
from leaderboard.drilldown import ATTACHMENTS, read_files, stored_folder
from leaderboard.errors import LeaderboardError
from leaderboard.schema import (
    VERIFIED,
    entry_id,
    kappa_label,
    revision,
    validate_benchmark,
    validate_config,
    validate_num_levels,
    validate_record,
)
from leaderboard.table import PARQUET, build_table, on_board, read_table, record_row, write_table

CONFIG = "leaderboard.json"
INDEX = "index.txt"
RECORDS = "records"
LOCK = ".lock"
FORMAT_VERSION = 1
LOCK_TIMEOUT_S = 300
_RECORD_FILE = re.compile(r"^([0-9]{6,})-([0-9a-f]{16})\.json$")


@contextmanager
def locked(directory: Path):
    """Hold the leaderboard's write lock (other writers wait, up to :data:`LOCK_TIMEOUT_S`)."""
    try:
        with FileLock(directory / LOCK, timeout=LOCK_TIMEOUT_S):
            yield
    except Timeout as exc:
        raise LeaderboardError(f"{directory} is locked by another writer (waited {LOCK_TIMEOUT_S}s)") from exc


def init_leaderboard(directory: str | Path, benchmark: dict, num_levels: int = 11) -> dict:
    """Create a leaderboard for one benchmark revision (a record's ``benchmark`` block) and return its config."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    with locked(directory):
        return _init(directory, benchmark, num_levels)


def _init(directory: Path, benchmark: dict, num_levels: int) -> dict:
    if (directory / CONFIG).exists():
        raise LeaderboardError(f"{directory} is already a leaderboard")
    config = _new_config(benchmark, num_levels)
    _write_config(directory, config)
    return config


def _new_config(benchmark: dict, num_levels: int) -> dict:
    validate_benchmark(benchmark, reported=True)
    validate_num_levels(num_levels)
    return {"format_version": FORMAT_VERSION, "benchmark": revision(benchmark), "num_levels": num_levels}


def _write_config(directory: Path, config: dict) -> None:
    """An empty store, then its configuration last: a directory with ``leaderboard.json`` is a whole leaderboard."""
    (directory / RECORDS).mkdir(exist_ok=True)
    if any((directory / RECORDS).iterdir()):
        raise LeaderboardError(
            f"{directory / RECORDS} already holds files; create the leaderboard in an empty directory"
        )
    _write_index(directory, [])
    write_table(directory, build_table([], config["num_levels"]))
    write_atomic(directory / CONFIG, (json.dumps(config, indent=1) + "\n").encode())


def load_config(directory: str | Path) -> dict:
    """The checked ``leaderboard.json``; a one-line error naming the file and field when it is damaged."""
    path = Path(directory) / CONFIG
    if not path.is_file():
        raise LeaderboardError(
            f"{directory} is not a leaderboard (no {CONFIG}); create it with `cood-leaderboard init`"
        )
    config = jsonio.load(path)
    try:
        validate_config(config, FORMAT_VERSION)
    except LeaderboardError as exc:
        raise LeaderboardError(f"{path}: {exc}") from exc
    return config


def accepted_files(directory: str | Path) -> list[str]:
    """The names of the accepted record files in arrival order (a leaderboard without an index: every record file)."""
    path = Path(directory) / INDEX
    if not path.exists():
        return sorted(p.name for p in Path(directory, RECORDS).glob("*.json") if _RECORD_FILE.match(p.name))
    try:
        names = path.read_bytes().decode().splitlines()
    except UnicodeDecodeError as exc:
        raise LeaderboardError(f"{path}: not UTF-8 text") from exc
    for line, name in enumerate(names, 1):
        match = _RECORD_FILE.match(name)
        if not match or int(match.group(1)) != line:
            raise LeaderboardError(f"{path}: line {line}: not the name of record file {line}: {name[:80]!r}")
    return names


def _write_index(directory: Path, names: list[str]) -> None:
    write_atomic(directory / INDEX, "".join(f"{name}\n" for name in names).encode())


def stored_records(directory: str | Path) -> list[tuple[Path, bytes]]:
    """The accepted record files in arrival order, with their bytes."""
    paths = [Path(directory, RECORDS, name) for name in accepted_files(directory)]
    return [(path, jsonio.read_limited(path)) for path in paths]


def current_table(directory: str | Path):
    """The current table: every accepted record but those a verified run replaced (:func:`.table.on_board`)."""
    directory = Path(directory)
    config = load_config(directory)
    table = read_table(directory / PARQUET)
    if table["record_file"].tolist() != [f"{RECORDS}/{name}" for name in accepted_files(directory)]:
        table = records_table(directory, config["num_levels"])  # an add stopped between its commit and the table
    return on_board(table)


def add_records(
    directory: str | Path,
    records: list[dict],
    create: bool = False,
    folder: str | Path | None = None,
    verified: dict | None = None,
    say: Callable[[str], None] | None = None,
    warn: Callable[[str], None] | None = None,
) -> list[str]:
    """Validate and append result records (dicts); return their entry ids (one per record).

    All or nothing: if any record is rejected, nothing is written and the error names it; an
    interrupted add leaves none of its records visible, or all of them. With ``create``, a
    directory that is not yet a leaderboard is initialised from the first record's benchmark
    revision and level count. Safe to call from concurrent processes. The files a record's ``per_class`` names are
    read from ``folder`` (the run's output folder) and kept beside it.

    A record of an entry already on the board (or earlier in the batch) with the same results (it may differ only in
    :data:`leaderboard.conflicts.RUN_DETAILS`), verified if the kept one is, is that entry: skipped, with a line to
    ``say`` (default: stderr). With other results it is kept beside the entry's records, with a line to ``warn``
    (default: stderr): the board shows them all as a conflict until a verified record of the entry replaces them
    (:mod:`leaderboard.conflicts`).

    Records are self-reported; only the leaderboard's worker passes ``verified`` (``request``, ``requests_repo``,
    ``worker``), which stamps them ``verification: verified``. A record that arrives already claiming it is refused.
    """
    for i, record in enumerate(records):
        _refuse_claimed(f"record {i + 1}", record)
    if verified is not None:
        records = [{**record, "verification": {"status": VERIFIED, **verified}} for record in records]
    items = []
    for i, record in enumerate(records):
        if jsonio.too_deep(record):
            raise LeaderboardError(f"record {i + 1}: nested deeper than {jsonio.MAX_DEPTH} levels")
        items.append((f"record {i + 1}", record, _encoded(f"record {i + 1}", record)))
    return _add(Path(directory), items, create, [folder] * len(items), say, warn)


def _encoded(source: str, record: dict) -> bytes:
    try:
        return (json.dumps(record, indent=1) + "\n").encode()
    except (TypeError, ValueError) as exc:  # an object JSON lacks, an integer of too many digits
        raise LeaderboardError(f"{source}: not JSON: {exc}") from exc


def add_files(
    directory: str | Path,
    paths: list[str | Path],
    create: bool = False,
    say: Callable[[str], None] | None = None,
    warn: Callable[[str], None] | None = None,
) -> list[str]:
    """Like :func:`add_records` for record files, which are stored byte for byte (their ``per_class`` files are read
    from the folder above ``records/``, or from the record's own folder)."""
    items = []
    for path in map(Path, paths):
        data = jsonio.read_limited(path)
        items.append((str(path), jsonio.parse(data, str(path)), data))
        _refuse_claimed(str(path), items[-1][1])
    folders = [p.parent.parent if p.parent.name == RECORDS else p.parent for p in map(Path, paths)]
    return _add(Path(directory), items, create, folders, say, warn)


def _add(
    directory: Path,
    items: list[tuple[str, dict, bytes]],
    create: bool,
    folders: list | None = None,
    say: Callable[[str], None] | None = None,
    warn: Callable[[str], None] | None = None,
) -> list[str]:
    if not items:
        raise LeaderboardError("no records given")
    for source, record, data in items:
        _checked(source, record, data)
    attached = [
        read_files(source, record, folder) for (source, record, _), folder in zip(items, folders or [None] * len(items))
    ]
    if create:
        directory.mkdir(parents=True, exist_ok=True)
    else:
        load_config(directory)
    with locked(directory):
        fresh = create and not (directory / CONFIG).exists()
        first = items[0][1]
        config = _new_config(first["benchmark"], first["num_levels"]) if fresh else load_config(directory)
        names = [] if fresh else _index(directory)
        known = _known(directory, names, {entry_id(record) for _, record, _ in items})
        accepted, files, ids, skipped, conflicts = _triage(items, attached, config, names, known)
        if accepted:
            table = _table(stored_records(directory) if names else [], accepted, config["num_levels"])
            if fresh:
                _write_config(directory, config)
            _commit(directory, names, [(name, data) for name, data, _ in accepted], files)
        for line in skipped:  # once the add stands
            (say or _to_stderr)(line)
        for line in conflicts:
            (warn or _to_stderr)(line)
        if not accepted:
            if _table_is_current(directory, names):
                return ids
            table = records_table(directory, config["num_levels"])
        try:
            faults.point("add:after-commit", directory / PARQUET)
            write_table(directory, table)
        except OSError as exc:
            raise LeaderboardError(
                f"the records are added, but the table could not be written ({exc.strerror or exc}); "
                "the next add rewrites it"
            ) from exc
        return ids


def _triage(items: list[tuple[str, dict, bytes]], attached: list, config: dict, names: list[str], known: dict) -> tuple:
    """Each record of ``items`` that belongs to the board, skipped as a repeat of a ``known`` one or accepted under its
    new file name: ``(accepted, their files, every entry id, the skipped lines, the conflicts' lines)``."""
    accepted, files, ids, skipped, conflicts = [], [], [], [], []
    for (source, record, data), attachments in zip(items, attached):
        _check_belongs(source, record, config)
        key = entry_id(record)
        ids.append(key)
        same = next((where for where, kept in known[key] if repeats(record, kept)), None)
        if same is not None:
            skipped.append(f"{source}: entry {key} {_what(record)} is already in {same} with the same results; skipped")
            continue
        conflicts += _conflict(source, record, key, known[key])
        known[key].append((source, record))
        accepted.append((f"{len(names) + len(accepted) + 1:06d}-{key}.json", data, record))
        files.append(attachments)
    return accepted, files, ids, skipped, conflicts


def _known(directory: Path, names: list[str], keys: set[str]) -> dict[str, list[tuple[str, dict]]]:
    """The stored records of the entries ``keys`` (by file name, the entry id in it): entry -> [(name, record)]."""
    known = {key: [] for key in keys}
    for name in names:
        key = _RECORD_FILE.match(name).group(2)
        if key in known:
            path = directory / RECORDS / name
            known[key].append((name, jsonio.parse(jsonio.read_limited(path), str(path))))
    return known


def _what(record: dict) -> str:
    kappa = record["kappa"]
    return f"(model {record['model']['name']!r}, kappa {kappa_label(kappa['name'], kappa['params'])})"


def _conflict(source: str, record: dict, key: str, known: list[tuple[str, dict]]) -> list[str]:
    """The line saying how a self-reported ``record`` stands beside ``known``, the records of its entry it does not
    repeat (:func:`leaderboard.conflicts.repeats`): in conflict with them, or in the history where one is verified.
    None for the first record of an entry, or a verified one (it replaces the self-reported records)."""
    if is_verified(record) or not known:
        return []
    where, kept = next(((where, kept) for where, kept in known if is_verified(kept)), known[0])
    head = f"{source}: entry {key} {_what(record)} differs from {where} (model {kept['model']['name']!r}) in "
    if is_verified(kept):
        return [f"{head}{difference(record, kept)}; kept in the board's history, the verified record stands"]
    return [f"{head}{difference(record, kept)}; both kept and shown as a conflict until a verified run settles it"]


def _table_is_current(directory: Path, names: list[str]) -> bool:
    """Whether ``table.parquet`` lists exactly the accepted records (an add stopped before its table leaves it
    older)."""
    try:
        table = read_table(directory / PARQUET)
    except LeaderboardError:
        return False
    return table["record_file"].tolist() == [f"{RECORDS}/{name}" for name in names]


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr)


def _index(directory: Path) -> list[str]:
    """The accepted record files, after removing an interrupted add's leftovers (and writing a missing index)."""
    names = accepted_files(directory)
    if not (directory / INDEX).exists():
        _write_index(directory, names)
    listed = set(names)
    for path in (directory / RECORDS).iterdir():
        stem = written_for(path.name) or path.name
        if path.name not in listed and _RECORD_FILE.match(stem):
            path.unlink()
    if (directory / ATTACHMENTS).is_dir():
        for path in (directory / ATTACHMENTS).iterdir():
            if f"{path.name}.json" not in listed:
                shutil.rmtree(path)
    return names


def _commit(directory: Path, names: list[str], batch: list[tuple[str, bytes]], attached: list | None = None) -> None:
    """Write the batch's record files (and their attachments), then list them in the index: the one step that makes
    them visible."""
    records = directory / RECORDS
    try:
        for (name, _), files in zip(batch, attached or []):
            for relative, data in files:
                path = stored_folder(directory, name) / relative
                path.parent.mkdir(parents=True, exist_ok=True)
                write_atomic(path, data)
            if files:
                stored = stored_folder(directory, name)
                for folder in [stored.parent, stored, *sorted(p for p in stored.rglob("*") if p.is_dir())]:
                    fsync_dir(folder)
        for name, data in batch:
            write_atomic(records / name, data)
            faults.point("add:after-stage", records / name)
        fsync_dir(records)
        faults.point("add:before-commit", directory / INDEX)
        _write_index(directory, names + [name for name, _ in batch])
    except BaseException:
        with suppress(OSError, LeaderboardError):  # what stays behind is removed by the next add
            listed = set(accepted_files(directory))  # a failure after the index's rename leaves the batch accepted
            for name, _ in batch:
                if name not in listed:
                    (records / name).unlink(missing_ok=True)
                    shutil.rmtree(stored_folder(directory, name), ignore_errors=True)
        raise


def _refuse_claimed(source: str, record) -> None:
    if isinstance(record, dict) and "verification" in record:
        raise LeaderboardError(
            f"{source}: carries a 'verification' block; only the leaderboard's worker marks records "
            "verified (remove the block to add the record as self-reported)"
        )


def _checked(source: str, record: dict, data: bytes) -> None:
    if len(data) > jsonio.MAX_BYTES:
        raise jsonio.too_large(source)
    try:
        validate_record(record)
    except LeaderboardError as exc:
        raise LeaderboardError(f"{source}: {exc}") from exc


def _check_belongs(source: str, record: dict, config: dict) -> None:
    mine, theirs = config["benchmark"], revision(record["benchmark"])
    if theirs["id"] != mine["id"]:
        raise LeaderboardError(f"{source}: unknown benchmark {theirs['id']!r}; this leaderboard holds {mine['id']!r}")
    for key in ("version", "manifest_sha256", "num_id_classes", "num_ood_classes"):
        if theirs[key] != mine[key]:
            raise LeaderboardError(
                f"{source}: benchmark revision mismatch: benchmark.{key} is {theirs[key]!r},"
                f" this leaderboard holds {mine[key]!r}"
            )
    if record["num_levels"] != config["num_levels"]:
        raise LeaderboardError(
            f"{source}: wrong number of levels: {record['num_levels']}, this leaderboard uses {config['num_levels']}"
        )


def records_table(directory: Path, num_levels: int):
    """The table derived from every accepted record."""
    return _table(stored_records(directory), [], num_levels)


def _table(stored: list[tuple[Path, bytes]], batch: list[tuple[str, bytes, dict]], num_levels: int):
    """The table of the ``stored`` records (path, bytes) followed by a ``batch`` about to be added (name, bytes,
    record): built before the batch is written, so that a record the table cannot hold is refused with nothing on
    disk changed."""
    files = [(path.name, data, jsonio.parse(data, str(path))) for path, data in stored] + batch
    ranks = standings([record for _, _, record in files])
    rows = [
        record_row(record, int(name.split("-", 1)[0]), f"{RECORDS}/{name}", hashlib.sha256(data).hexdigest(), rank)
        for (name, data, record), rank in zip(files, ranks)
    ]
    return build_table(rows, num_levels)
