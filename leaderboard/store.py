"""A leaderboard directory: its benchmark revision, the append-only record store and the current table.

Layout::

    leaderboard.json          benchmark revision and number of levels this leaderboard accepts
    records/<seq>-<entry>.json  accepted records, byte for byte as they came; never changed or removed
    table.parquet, table.csv  the current table, rebuilt from records/ after every add
    releases/v<N>/            frozen versions (see :mod:`leaderboard.release`)
    .lock                     serialises writers (``add``, ``release``)
"""

from __future__ import annotations

import hashlib
import json
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from leaderboard.atomic import write_bytes_atomic
from leaderboard.errors import LeaderboardError
from leaderboard.schema import entry_id, kappa_label, revision, validate_benchmark, validate_record
from leaderboard.table import PARQUET, build_table, read_table, record_row, write_table

CONFIG = "leaderboard.json"
RECORDS = "records"
LOCK = ".lock"
FORMAT_VERSION = 1
LOCK_TIMEOUT_S = 300


@contextmanager
def locked(directory: Path):
    """Hold the leaderboard's write lock (other writers wait, up to :data:`LOCK_TIMEOUT_S`)."""
    try:
        with FileLock(directory / LOCK, timeout=LOCK_TIMEOUT_S):
            yield
    except Timeout:
        raise LeaderboardError(f"{directory} is locked by another writer (waited {LOCK_TIMEOUT_S}s)") from None


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
    (directory / RECORDS).mkdir(exist_ok=True)
    write_bytes_atomic(directory / CONFIG, (json.dumps(config, indent=1) + "\n").encode())
    write_table(directory, build_table([], config["num_levels"]))


def load_config(directory: str | Path) -> dict:
    path = Path(directory) / CONFIG
    if not path.is_file():
        raise LeaderboardError(f"{directory} is not a leaderboard (no {CONFIG}); create it with `cood-leaderboard init`")
    return json.loads(path.read_text())


def parse_record(data: bytes, source: str) -> dict:
    """The JSON object in ``data``; a one-line error naming ``source`` when it is not JSON."""
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise LeaderboardError(f"{source}: malformed JSON: {exc}") from None


def stored_records(directory: str | Path) -> list[tuple[Path, bytes]]:
    """The accepted record files in arrival order, with their bytes."""
    paths = sorted(Path(directory, RECORDS).glob("*.json"))
    return [(path, path.read_bytes()) for path in paths]


def current_table(directory: str | Path):
    """The current table (all accepted entries)."""
    load_config(directory)
    return read_table(Path(directory) / PARQUET)


def add_records(directory: str | Path, records: list[dict], create: bool = False) -> list[str]:
    """Validate and append result records (dicts); return their entry ids.

    All or nothing: if any record is rejected, nothing is written and the error names it. With
    ``create``, a directory that is not yet a leaderboard is initialised from the first record's
    benchmark revision and level count. Safe to call from concurrent processes.
    """
    items = [(f"record {i + 1}", record, (json.dumps(record, indent=1) + "\n").encode()) for i, record in enumerate(records)]
    return _add(Path(directory), items, create)


def add_files(directory: str | Path, paths: list[str | Path], create: bool = False) -> list[str]:
    """Like :func:`add_records` for record files, which are stored byte for byte."""
    items = []
    for path in map(Path, paths):
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise LeaderboardError(f"{path}: cannot read: {exc.strerror}") from None
        items.append((str(path), parse_record(data, str(path)), data))
    return _add(Path(directory), items, create)


def _add(directory: Path, items: list[tuple[str, dict, bytes]], create: bool) -> list[str]:
    if not items:
        raise LeaderboardError("no records given")
    if create:
        directory.mkdir(parents=True, exist_ok=True)
    else:
        load_config(directory)
    with locked(directory):
        for source, record, _ in items:
            _checked(source, record)
        fresh = create and not (directory / CONFIG).exists()
        first = items[0][1]
        config = _new_config(first["benchmark"], first["num_levels"]) if fresh else load_config(directory)
        stored = stored_records(directory)
        known = {_entry_of(path): path.name for path, _ in stored}
        accepted = []
        for source, record, data in items:
            _check_belongs(source, record, config)
            key = entry_id(record)
            if key in known:
                raise LeaderboardError(
                    f"{source}: duplicate entry {key} (model {record['model']['name']!r}, kappa "
                    f"{kappa_label(record['kappa']['name'], record['kappa']['params'])}) already in {known[key]}")
            known[key] = source
            accepted.append((key, record, data))
        if fresh:
            _write_config(directory, config)
        seq = len(stored)
        for key, _, data in accepted:
            seq += 1
            write_bytes_atomic(directory / RECORDS / f"{seq:06d}-{key}.json", data)
        write_table(directory, records_table(directory, config["num_levels"]))
        return [key for key, _, _ in accepted]


def _entry_of(path: Path) -> str:
    return path.stem.split("-", 1)[1]


def _checked(source: str, record: dict) -> None:
    try:
        validate_record(record)
    except LeaderboardError as exc:
        raise LeaderboardError(f"{source}: {exc}") from None


def _check_belongs(source: str, record: dict, config: dict) -> None:
    mine, theirs = config["benchmark"], revision(record["benchmark"])
    if theirs["id"] != mine["id"]:
        raise LeaderboardError(f"{source}: unknown benchmark {theirs['id']!r}; this leaderboard holds {mine['id']!r}")
    for key in ("version", "manifest_sha256", "num_id_classes", "num_ood_classes"):
        if theirs[key] != mine[key]:
            raise LeaderboardError(
                f"{source}: benchmark revision mismatch: benchmark.{key} is {theirs[key]!r}, this leaderboard holds {mine[key]!r}")
    if record["num_levels"] != config["num_levels"]:
        raise LeaderboardError(f"{source}: wrong number of levels: {record['num_levels']}, this leaderboard uses {config['num_levels']}")


def records_table(directory: Path, num_levels: int):
    """The table derived from every stored record."""
    rows = []
    for path, data in stored_records(directory):
        seq = int(path.stem.split("-", 1)[0])
        record = parse_record(data, str(path))
        rows.append(record_row(record, seq, f"{RECORDS}/{path.name}", hashlib.sha256(data).hexdigest()))
    return build_table(rows, num_levels)
