"""A leaderboard directory: its benchmark revision, the append-only record store and the current table.

Layout::

    leaderboard.json          benchmark revision and number of levels this leaderboard accepts
    records/<seq>-<entry>.json  accepted records, byte for byte as they came; never changed or removed
    index.txt                 the accepted record files in arrival order, one per line
    table.parquet, table.csv  the current table, rebuilt from the records after every add
    attachments/<seq>-<entry>/  the files a record's ``per_class`` names (see :mod:`leaderboard.drilldown`)
    releases/v<N>/            frozen versions (see :mod:`leaderboard.release`)
    .lock                     serialises writers (``add``, ``release``)

An add is all or nothing, even when killed or out of disk: the batch's record files are written
first (each flushed to disk), then ``index.txt`` is replaced in one atomic rename, which is the
moment the whole batch becomes visible. Record files that the index does not list are leftovers
of an interrupted add: every reader ignores them and the next add removes them. A table older than
the index (an add stopped after its commit) is rebuilt in memory by readers and on disk by the
next add.
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
from leaderboard.drilldown import ATTACHMENTS, read_files, stored_folder
from leaderboard.errors import LeaderboardError
from leaderboard.schema import (
    VERIFIED,
    entry_id,
    kappa_label,
    revision,
    validate_benchmark,
    validate_config,
    validate_record,
)
from leaderboard.table import PARQUET, build_table, read_table, record_row, write_table

CONFIG = "leaderboard.json"
INDEX = "index.txt"
RECORDS = "records"
LOCK = ".lock"
FORMAT_VERSION = 1
LOCK_TIMEOUT_S = 300
# two runs of one model differ in these
RUN_DETAILS = ("created", "timings", "harness_version", "order_seed", "order_seed_drawn")
SAME_WITHIN = 1e-6  # two runs in other secret orders sum in other batches: their metrics agree to float rounding
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
    if num_levels < 2:
        raise LeaderboardError(f"num_levels must be >= 2, got {num_levels}")
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
    """The current table (all accepted entries)."""
    directory = Path(directory)
    config = load_config(directory)
    table = read_table(directory / PARQUET)
    if table["record_file"].tolist() != [f"{RECORDS}/{name}" for name in accepted_files(directory)]:
        return records_table(directory, config["num_levels"])  # an add stopped between its commit and the table
    return table


def add_records(
    directory: str | Path,
    records: list[dict],
    create: bool = False,
    folder: str | Path | None = None,
    verified: dict | None = None,
    say: Callable[[str], None] | None = None,
) -> list[str]:
    """Validate and append result records (dicts); return their entry ids (one per record).

    All or nothing: if any record is rejected, nothing is written and the error names it; an
    interrupted add leaves none of its records visible, or all of them. With ``create``, a
    directory that is not yet a leaderboard is initialised from the first record's benchmark
    revision and level count. Safe to call from concurrent processes. The files a record's ``per_class`` names are
    read from ``folder`` (the run's output folder) and kept beside it.

    A record with the identity of an entry already on the board (or earlier in the batch) never replaces it: with the
    same results (it may differ only in :data:`RUN_DETAILS`) it is that entry, skipped with a line to ``say`` (default:
    stderr); with other results the whole add is refused in one line naming both.

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
        items.append((f"record {i + 1}", record, (json.dumps(record, indent=1) + "\n").encode()))
    return _add(Path(directory), items, create, [folder] * len(items), say)


def add_files(
    directory: str | Path, paths: list[str | Path], create: bool = False, say: Callable[[str], None] | None = None
) -> list[str]:
    """Like :func:`add_records` for record files, which are stored byte for byte (their ``per_class`` files are read
    from the folder above ``records/``, or from the record's own folder)."""
    items = []
    for path in map(Path, paths):
        data = jsonio.read_limited(path)
        items.append((str(path), jsonio.parse(data, str(path)), data))
        _refuse_claimed(str(path), items[-1][1])
    folders = [p.parent.parent if p.parent.name == RECORDS else p.parent for p in map(Path, paths)]
    return _add(Path(directory), items, create, folders, say)


def _add(
    directory: Path,
    items: list[tuple[str, dict, bytes]],
    create: bool,
    folders: list | None = None,
    say: Callable[[str], None] | None = None,
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
        known = {_RECORD_FILE.match(name).group(2): (name, None) for name in names}  # entry -> (where, record)
        accepted, files, ids, skipped = [], [], [], []
        for (source, record, data), attachments in zip(items, attached):
            _check_belongs(source, record, config)
            key = entry_id(record)
            ids.append(key)
            if key in known:
                skipped.append(_same_entry(directory, source, record, key, *known[key]))
                continue
            known[key] = (source, record)
            accepted.append((f"{len(names) + len(accepted) + 1:06d}-{key}.json", data))
            files.append(attachments)
        if accepted:
            if fresh:
                _write_config(directory, config)
            _commit(directory, names, accepted, files)
        for line in skipped:  # once the add stands
            (say or _to_stderr)(line)
        if not accepted and _table_is_current(directory, names):
            return ids
        try:
            faults.point("add:after-commit", directory / PARQUET)
            write_table(directory, records_table(directory, config["num_levels"]))
        except OSError as exc:
            raise LeaderboardError(
                f"the records are added, but the table could not be written ({exc.strerror or exc}); "
                "the next add rewrites it"
            ) from exc
        return ids


def _same_entry(directory: Path, source: str, record: dict, key: str, where: str, existing: dict | None) -> str:
    """A record whose entry is already ``where`` (a stored record file, or an earlier record of the batch): the line
    that says it is skipped when its results are the same, else a one-line refusal naming both (the existing entry is
    kept)."""
    if existing is None:
        path = directory / RECORDS / where
        existing = jsonio.parse(jsonio.read_limited(path), str(path))
    kappa = record["kappa"]
    what = f"(model {record['model']['name']!r}, kappa {kappa_label(kappa['name'], kappa['params'])})"
    differs = first_difference(
        {k: v for k, v in record.items() if k not in RUN_DETAILS},
        {k: v for k, v in existing.items() if k not in RUN_DETAILS},
    )
    if differs is not None:
        raise LeaderboardError(
            f"{source}: duplicate entry {key} {what} differs from {where} (model {existing['model']['name']!r}) in "
            f"{differs}; refused, the existing entry is kept"
        )
    return f"{source}: entry {key} {what} is already in {where} with the same results; skipped"


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


def first_difference(a, b, path: str = "") -> str | None:
    """The first path (``model.name``, ``levels[3].ood_auroc``) where two JSON values differ, or None; a key one
    object lacks and the other holds as null counts as the same (a field older records leave out), and numbers within
    ``SAME_WITHIN`` are the same."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in dict.fromkeys([*a, *b]):
            found = first_difference(a.get(key), b.get(key), f"{path}.{key}" if path else key)
            if found is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for index, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y, f"{path}[{index}]")
            if found is not None:
                return found
        return None
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b))  # 2 and 2.0 are one value
    if numbers:
        return None if abs(a - b) <= SAME_WITHIN else path or "the record"
    return None if a == b and type(a) is type(b) else path or "the record"


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
    rows = []
    for path, data in stored_records(directory):
        seq = int(path.stem.split("-", 1)[0])
        record = jsonio.parse(data, str(path))
        rows.append(record_row(record, seq, f"{RECORDS}/{path.name}", hashlib.sha256(data).hexdigest()))
    return build_table(rows, num_levels)
