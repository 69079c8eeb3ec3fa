"""Frozen versions of the table: ``releases/v<N>/`` with the table, a changelog and a manifest.

A release is written to a hidden folder and renamed into place, so it appears whole or not at
all; its files are made read-only and are never rewritten. ``CHANGELOG.md`` at the top of the
leaderboard collects every release's notes, newest first.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from dataset_builder.console import plural
from dataset_builder.files import fsync_dir, write_atomic
from leaderboard import jsonio
from leaderboard.errors import LeaderboardError
from leaderboard.schema import validate_benchmark
from leaderboard.store import load_config, locked, records_table
from leaderboard.table import PARQUET, on_board, read_table, write_table

RELEASES = "releases"
RELEASE_JSON = "release.json"
CHANGES = "CHANGES.md"
CHANGELOG = "CHANGELOG.md"
_VERSION_DIR = re.compile(r"^v([1-9][0-9]*)$")
_INFO = ("version", "created", "benchmark", "num_levels", "num_entries", "added", "note")


def list_releases(directory: str | Path) -> list[int]:
    """Released version numbers, ascending."""
    root = Path(directory) / RELEASES
    found = (_VERSION_DIR.match(p.name) for p in root.iterdir()) if root.is_dir() else ()
    return sorted(int(m.group(1)) for m in found if m)


def release_dir(directory: str | Path, version: int) -> Path:
    path = Path(directory) / RELEASES / f"v{version}"
    if not path.is_dir():
        known = ", ".join(f"v{v}" for v in list_releases(directory)) or "none"
        raise LeaderboardError(f"no release v{version} in {directory} (released: {known})")
    return path


def release_table(directory: str | Path, version: int) -> pd.DataFrame:
    """The table as frozen in release ``version``."""
    return read_table(release_dir(directory, version) / PARQUET)


def release_info(directory: str | Path, version: int) -> dict:
    """The ``release.json`` of release ``version``; a one-line error naming the file when it is damaged."""
    path = release_dir(directory, version) / RELEASE_JSON
    info = jsonio.load(path)
    missing = [key for key in _INFO if key not in info] if isinstance(info, dict) else ["version"]
    if missing:
        raise LeaderboardError(f"{path}: missing field '{missing[0]}'")
    try:
        validate_benchmark(info["benchmark"], reported=True)
    except LeaderboardError as exc:
        raise LeaderboardError(f"{path}: {exc}") from exc
    return info


def release(directory: str | Path, note: str = "") -> dict:
    """Freeze the current entries as the next version; return its ``release.json`` content.

    Refuses when nothing entered since the previous release.
    """
    directory = Path(directory)
    config = load_config(directory)
    with locked(directory):
        table = on_board(records_table(directory, config["num_levels"]))
        versions = list_releases(directory)
        before = set(release_table(directory, versions[-1])["record_file"]) if versions else set()
        added = table[~table["record_file"].isin(before)]  # new entries, and the records new to an entry
        if added.empty:
            raise LeaderboardError(
                f"nothing to release: no entries since v{versions[-1]}"
                if versions
                else "nothing to release: the leaderboard is empty"
            )
        version = versions[-1] + 1 if versions else 1
        info = {
            "version": version,
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "benchmark": config["benchmark"],
            "num_levels": config["num_levels"],
            "num_entries": len(table),
            "added": added["entry_id"].tolist(),
            "note": note,
        }
        _write_release(directory, version, table, info, changes(info, added))
        write_atomic(directory / CHANGELOG, changelog(directory).encode())
        return info


def _write_release(directory: Path, version: int, table: pd.DataFrame, info: dict, notes: str) -> None:
    root = directory / RELEASES
    root.mkdir(exist_ok=True)
    staging = root / f".v{version}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        write_table(staging, table)
        write_atomic(staging / RELEASE_JSON, (json.dumps(info, indent=1) + "\n").encode())
        write_atomic(staging / CHANGES, notes.encode())
        for path in staging.iterdir():
            path.chmod(0o444)
        os.rename(staging, root / f"v{version}")
        fsync_dir(root)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def changes(info: dict, added: pd.DataFrame) -> str:
    """The changelog section of one release: what entered, and which new entries are flagged."""
    bench = info["benchmark"]
    manifest = (bench["manifest_sha256"] or "none")[:12]
    lines = [
        f"## v{info['version']} ({info['created']})",
        "",
        f"Benchmark {bench['id']} {bench['version']} (manifest {manifest}), {info['num_levels']} levels; "
        f"{plural(info['num_entries'], 'entry', 'entries')}, {len(added)} new.",
    ]
    if info["note"]:
        lines += ["", info["note"]]
    lines += ["", "Entered:"]
    lines += [
        f"- {r.model} / {r.kappa} ({r.provenance}): mean ood-auroc {r.mean_ood_auroc:.4f} [{r.entry_id}]"
        for r in added.itertuples()
    ]
    flagged = added[added["flag"] != ""]
    if not flagged.empty:
        lines += ["", "Flagged:"]
        lines += [f"- {r.model} / {r.kappa}: {r.flag}" for r in flagged.itertuples()]
    return "\n".join(lines) + "\n"


def changelog(directory: str | Path, up_to: int | None = None) -> str:
    """Every release's changes (up to version ``up_to``), newest first."""
    versions = [v for v in list_releases(directory) if up_to is None or v <= up_to]
    return "# Changelog\n\n" + "\n".join((release_dir(directory, v) / CHANGES).read_text() for v in reversed(versions))
