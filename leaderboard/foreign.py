"""Metrics a record describes itself: fields of a record's levels, ``id`` or ``summary`` that this leaderboard's metric
registry does not declare (a later build's metric, a plugin's), read, kept and shown from the record's own words.

A record that holds such a field describes it in its optional ``metrics`` block, ``{name: {scope, label,
higher_is_better}}``, and defines it in ``metric_definitions`` (as it does every metric it holds); a board then
validates its values (finite numbers or null) and shows it as a column, its heading marked with :data:`MARK`.
"""

from __future__ import annotations

import math

from harness.method.registry import SCOPES
from leaderboard.errors import LeaderboardError
from leaderboard.record import SCORES, metric_keys

MARK = "*"  # after the heading of a column this leaderboard shows from the record's own definition
NOTE = "shown from the record's own definition (not a metric this leaderboard knows)"
DESCRIPTION = ("scope", "label", "higher_is_better")  # what the ``metrics`` block says of each metric


def column(scope: str, name: str) -> str:
    """The table column of a described metric: a level metric's mean over the levels, an ID one as ``id_<name>``."""
    return {"level": f"mean_{name}", "id": f"id_{name}", "summary": name}[scope]


def _parts(record: dict) -> list[tuple[str, str, dict]]:
    """(scope, path, part) of each metric part of ``record`` that is an object."""
    levels = record.get("levels") if isinstance(record.get("levels"), list) else []
    found = [("level", f"levels[{i}]", level) for i, level in enumerate(levels)]
    found += [(scope, scope, record.get(scope)) for scope in ("id", "summary")]
    return [(scope, path, part) for scope, path, part in found if isinstance(part, dict)]


def foreign_names(record: dict) -> dict[str, str]:
    """The fields of ``record``'s metric parts this board does not declare: name -> scope."""
    declared = {scope: metric_keys(scope) for scope in SCOPES}
    return {key: scope for scope, _, part in _parts(record) for key in part if key not in declared[scope]}


def check_foreign(record: dict) -> dict:
    """Raise :class:`LeaderboardError` for a foreign field the record does not describe or whose value is not a finite
    number or null; return ``record`` without its foreign fields (what the board's own checks read)."""
    names = foreign_names(record)
    if not names:
        return record
    described = record.get("metrics") if isinstance(record.get("metrics"), dict) else {}
    defined = record.get("metric_definitions") if isinstance(record.get("metric_definitions"), dict) else {}
    for scope, path, part in _parts(record):
        for key in (k for k in part if names.get(k) == scope):
            entry = described.get(key)
            if not isinstance(entry, dict) or entry.get("scope") != scope or key not in defined:
                raise LeaderboardError(
                    f"{path}: unknown field '{key}' (a metric this leaderboard does not know needs the record's "
                    f"metrics.{key} with scope '{scope}', label and higher_is_better, and metric_definitions.{key})"
                )
            _check_value(part[key], f"{path}.{key}")
    return _without(record, names)


def _check_value(value, path: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise LeaderboardError(f"{path}: must be a finite number or null, got {value!r}")
    if not SCORES[0] <= value <= SCORES[1]:
        raise LeaderboardError(f"{path}: out of range [{SCORES[0]:g}, {SCORES[1]:g}]: {value!r}")


def _without(record: dict, names: dict[str, str]) -> dict:
    def strip(part, scope):
        return {k: v for k, v in part.items() if names.get(k) != scope} if isinstance(part, dict) else part

    levels = record["levels"]
    return {
        **record,
        "levels": [strip(level, "level") for level in levels] if isinstance(levels, list) else levels,
        "id": strip(record.get("id"), "id"),
        "summary": strip(record.get("summary"), "summary"),
    }


def check_descriptions(block) -> None:
    """The ``metrics`` block: per name, its scope, a non-empty label and whether higher is better."""
    for name, entry in block.items():
        path = f"metrics.{name}"
        if not isinstance(entry, dict) or sorted(entry) != sorted(DESCRIPTION):
            raise LeaderboardError(f"{path}: must be an object of {', '.join(DESCRIPTION)}")
        if entry["scope"] not in SCOPES:
            raise LeaderboardError(f"{path}.scope: must be one of {', '.join(SCOPES)}, got {entry['scope']!r}")
        if not isinstance(entry["label"], str) or not entry["label"].strip():
            raise LeaderboardError(f"{path}.label: must be a non-empty string")
        if not isinstance(entry["higher_is_better"], bool):
            raise LeaderboardError(f"{path}.higher_is_better: must be true or false")


def foreign_values(record: dict) -> dict:
    """The table cells of a valid record's foreign fields: column -> value (a level metric's mean over the levels,
    None where a level has none)."""
    out = {}
    for name, scope in foreign_names(record).items():
        if scope == "level":
            values = [level.get(name) for level in record["levels"]]
            out[column(scope, name)] = None if None in values else math.fsum(values) / len(values)
        else:
            out[column(scope, name)] = record[scope][name]
    return out


def foreign_columns(records) -> dict[str, dict]:
    """The foreign columns of valid ``records``, in first-seen order: column -> its heading (the record's label,
    ``mean`` before a level metric's, :data:`MARK` after), label, direction and definition."""
    out = {}
    for record in records:
        for name, scope in foreign_names(record).items():
            described = record["metrics"][name]
            label = f"mean {described['label']}" if scope == "level" else described["label"]
            out.setdefault(
                column(scope, name),
                {
                    "name": name,
                    "heading": f"{label}{MARK}",
                    "higher_is_better": described["higher_is_better"],
                    "definition": record["metric_definitions"][name],
                },
            )
    return out
