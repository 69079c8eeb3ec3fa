"""Result records (schema version 1): validation, entry identity and derived flags.

A record is the JSON the harness writes for one (model, kappa) run on one benchmark
revision. ``provenance`` says where its numbers come from: ``"harness"`` (computed by this
project; every field required) or ``"paper"`` (reported by a publication; metrics the
publication did not report, hashes and run details may be null).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import unicodedata
from datetime import datetime

from harness.method.registry import registered
from leaderboard.errors import LeaderboardError
from leaderboard.foreign import check_descriptions, check_foreign
from leaderboard.record import (
    CANONICAL_SEVERITY_RULE,
    FORMATS,
    MAX_NAME_BYTES,
    NOT_NAMES,
    OPEN,
    PROVENANCES,
    READ_VERSIONS,
    VERIFIED,
    Benchmark,
    Field,
    Record,
    Verification,
    older_keys,
    optional_keys,
    required_keys,
    shape_fields,
)

NEAR_CHANCE_FACTOR = 2  # id-acc below twice chance (2 / num_id_classes) marks a broken run


def _fail(path: str, reason: str) -> LeaderboardError:
    return LeaderboardError(f"{path}: {reason}")


def _object(value, path: str, fields: tuple[str, ...] | None = None, older: tuple[str, ...] = ()) -> dict:
    """An object holding ``fields`` and nothing else but ``older`` (fields a record made before them may lack)."""
    if not isinstance(value, dict):
        raise _fail(path, f"must be an object, got {type(value).__name__}")
    if fields is not None:
        for key in fields:
            if key not in value:
                raise _fail(path, f"missing field '{key}'")
        unknown = sorted(set(value) - set(fields) - set(older))
        if unknown:
            raise _fail(path, f"unknown field '{unknown[0]}'")
    return value


def shown(value) -> str:
    """A number for a one-line message: as written, or its first digits and length when it is long."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}... ({len(text)} characters)"


def range_text(bounds: tuple) -> str:
    """``[0, 1]``, ``[0, 1e15]``: a range as a message names it (a large power of ten by its exponent)."""
    return "[" + ", ".join(_bound(v) for v in bounds) + "]"


def _bound(value) -> str:
    power = len(str(abs(value))) - 1 if isinstance(value, int) else 0
    return f"{'-' if value < 0 else ''}1e{power}" if power > 5 and abs(value) == 10**power else repr(value)


def _number(value, path: str, bounds: tuple) -> None:
    """A finite number within ``bounds`` (an integer of any size is compared exactly, never converted)."""
    if value is None:
        raise _fail(path, "must be a number, got null")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(path, f"must be a number, got {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise _fail(path, f"must be a finite number, got {value}")
    _within(value, path, bounds)


def _integer(value, path: str, bounds: tuple) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(path, f"must be an integer, got {type(value).__name__ if value is not None else 'null'}")
    _within(value, path, bounds)


def _within(value, path: str, bounds: tuple) -> None:
    if not bounds[0] <= value <= bounds[1]:
        raise _fail(path, f"out of range {range_text(bounds)}: {shown(value)}")


def _string(value, path: str, pattern: re.Pattern | None = None, what: str = "") -> str:
    if not isinstance(value, str) or not value:
        raise _fail(path, "must be a non-empty string")
    if pattern is not None and not pattern.match(value):
        raise _fail(path, f"not {what}: {value[:80]!r}")
    return value


def _name(value, path: str, pattern: re.Pattern | None = None, what: str = "") -> str:
    """A name: a non-empty string of at most :data:`MAX_NAME_BYTES` UTF-8 bytes, no path separator or control
    character, not ``.`` or ``..``."""
    _string(value, path)
    if value in NOT_NAMES:
        raise _fail(path, f"{value!r} is not a name (it means a folder in a path)")
    if len(value.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        raise _fail(path, f"longer than {MAX_NAME_BYTES} bytes: {value[:40]!r}...")
    bad = next((c for c in value if c in "/\\" or unicodedata.category(c) in ("Cc", "Cs")), None)
    if bad is not None:
        kind = "a path separator" if bad in "/\\" else "a control character"
        raise _fail(path, f"contains {kind} ({bad!r}): {value[:80]!r}")
    return _string(value, path, pattern, what)


def _part(value, path: str, cls: type, paper: bool = False) -> dict:
    """Check an object against a record part (:mod:`leaderboard.record`): its keys, then every field it holds in order,
    an optional part where present (``paper`` allows the nulls a publication may leave). The rules across fields are
    the callers'."""
    optional = optional_keys(cls)
    present = {k: v for k, v in value.items() if k not in optional} if optional and isinstance(value, dict) else value
    _object(present, path or "record", required_keys(cls), older_keys(cls))
    for field in shape_fields(cls):
        if field.name in value:  # else: an optional part left out, or a field a record made before it lacks
            _value(value[field.name], f"{path}.{field.name}" if path else field.name, field, paper)
    return value


def _value(value, path: str, field: Field, paper: bool) -> None:
    """One field's value, by its declaration."""
    meta = field.meta
    if value is None and field.nullable and not field.part and (paper or not meta["reported"]):
        return
    if meta["enum"]:
        if value not in meta["enum"] or isinstance(value, bool):
            raise _fail(path, f"must be one of {', '.join(map(str, meta['enum']))}, got {value!r}")
        return
    if meta["const"] is not None and value != meta["const"]:
        raise _fail(path, f"must be {meta['const']!r}, got {value!r}")
    if field.part:
        _part(value, path, field.kind, paper)
    elif field.kind is list:
        _list(value, path, field, paper)
    elif field.kind is dict:
        _dict(value, path, field)
    elif field.kind is str:
        _text(value, path, meta["format"])
    elif field.kind is int:
        _integer(value, path, meta["range"])
    elif field.kind is bool:
        if not isinstance(value, bool):
            raise _fail(path, f"must be true or false, got {value!r}")
    else:
        _number(value, path, meta["range"])


def _list(value, path: str, field: Field, paper: bool) -> None:
    """A list of as many items as the field's ``items`` allows, each checked as the field's item type."""
    low, high = field.meta["items"] or (0, None)
    if not isinstance(value, list):
        raise _fail(path, f"must be a list, got {type(value).__name__}")
    if len(value) < low or (high is not None and len(value) > high):
        what = "objects" if field.parts else "numbers" if field.item in (int, float) else "items"
        count = f"{low}" if low == high else f"at least {low}" if high is None else f"{low} to {high}"
        raise _fail(path, f"must be a list of {count} {what}, got {len(value)}")
    item = Field(field.name, field.item, None, False, field.meta, field.parts, False)
    for index, entry in enumerate(value):
        _value(entry, f"{path}[{index}]", item, paper)


def _dict(value, path: str, field: Field) -> None:
    """An object: kappa parameters, strings by key (``dict[str, str]``), or open (any JSON, its numbers within
    :data:`leaderboard.record.OPEN`); with the keys the field requires."""
    if field.meta["format"] == "params":
        _params(value, path)
        return
    _object(value, path)
    for key in field.meta["keys"]:
        if key not in value:
            raise _fail(path, f"missing field '{key}'")
    for key, item in value.items():
        if field.item is str:
            _string(item, f"{path}.{key}")
        else:
            _open(item, f"{path}.{key}")


def _open(value, path: str) -> None:
    """A value of an open object: strings, booleans and nulls as they are, numbers within
    :data:`leaderboard.record.OPEN`, lists and objects of them (nested as deep as the file allows)."""
    if isinstance(value, dict):
        for key, item in value.items():
            _open(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _open(item, f"{path}[{index}]")
    elif not isinstance(value, (str, bool)) and value is not None:
        _number(value, path, OPEN)


def _text(value, path: str, format: str | None) -> None:
    """A string in one of :data:`leaderboard.record.FORMATS` (or any non-empty string)."""
    pattern, what = FORMATS.get(format, (None, ""))
    if format in ("name", "kappa_name"):
        _name(value, path, pattern, what)
        return
    if format == "relative_path" and isinstance(value, str):
        hidden = next((part for part in value.split("/") if part.startswith(".") and part not in NOT_NAMES), None)
        if hidden is not None:
            raise _fail(path, f"names a hidden file or folder ({hidden[:40]!r}): {value[:80]!r}")
    if _string(value, path, pattern, what) and format == "date-time":
        try:
            datetime.fromisoformat(value)
        except ValueError as exc:
            raise _fail(path, f"not an ISO-8601 date-time: {value[:40]!r}") from exc


def validate_record(record) -> None:
    """Raise :class:`LeaderboardError` naming the first problem of ``record``; return if it is valid."""
    _object(record, "record")
    version = record.get("schema_version")
    if isinstance(version, bool) or version not in READ_VERSIONS:
        shown = ", ".join(map(str, READ_VERSIONS))
        ahead = isinstance(version, int) and not isinstance(version, bool) and version > max(READ_VERSIONS)
        upgrade = f": version {version} is newer than this leaderboard; upgrade cood-bench to read it" if ahead else ""
        raise _fail("schema_version", f"unsupported {version!r} (this leaderboard reads {shown}){upgrade}")
    if isinstance(record.get("metrics"), dict):
        check_descriptions(record["metrics"])
    record = check_foreign(record)
    present = {k: v for k, v in record.items() if k not in optional_keys(Record)}
    _object(present, "record", required_keys(Record), older_keys(Record))
    if record["provenance"] not in PROVENANCES:
        raise _fail("provenance", f"must be one of {', '.join(PROVENANCES)}, got {record['provenance']!r}")
    paper = record["provenance"] == "paper"
    if "verification" in record:
        _validate_verification(record["verification"])
    _part(record, "", Record, paper)
    _validate_levels(record)
    _validate_since(record)
    _validate_intervals(record)
    if "per_class" in record:
        _validate_per_class(record["per_class"], record["num_levels"])
    if "verification" in record and record.get("order_seed_drawn") is False:  # absent: a record made before the field
        raise _fail("verification", "a verified record's order seed must have been drawn by the harness")


def _validate_verification(verification) -> None:
    """Who vouches for the numbers: the leaderboard's worker (the request, its queue repo, the worker's name)."""
    block = _object(verification, "verification", required_keys(Verification))
    if block["status"] != VERIFIED:
        raise _fail("verification.status", f"must be {VERIFIED!r} (leave the block out for a self-reported record)")


def verification_status(record: dict) -> str:
    """``"verified"`` for a record the leaderboard's worker produced, else ``"self-reported"``."""
    return (record.get("verification") or {}).get("status") or "self-reported"


def _params(params, path: str, depth: int = 0) -> None:
    """Parameters: strings, booleans, nulls, numbers within :data:`leaderboard.record.OPEN`, or (two levels deep at
    most, e.g. a fitted kappa's ``fit``: split, size, seed) objects of them."""
    for key, value in _object(params, path).items():
        _name(key, f"{path} (a key)")
        if isinstance(value, dict) and depth < 2:
            _params(value, f"{path}.{key}", depth + 1)
        elif not isinstance(value, (str, bool)) and value is not None:
            _number(value, f"{path}.{key}", OPEN)


def validate_config(config, format_version: int) -> None:
    """Check a leaderboard's configuration (``leaderboard.json``): format version, benchmark revision, level count."""
    _object(config, "leaderboard", ("format_version", "benchmark", "num_levels"))
    if config["format_version"] != format_version:
        raise _fail(
            "format_version", f"unsupported {config['format_version']!r} (this leaderboard reads {format_version})"
        )
    validate_benchmark(config["benchmark"], reported=True)
    validate_num_levels(config["num_levels"])


def validate_num_levels(count) -> None:
    """Check a leaderboard's number of levels: an integer in the range a record's ``num_levels`` has."""
    _value(count, "num_levels", next(f for f in shape_fields(Record) if f.name == "num_levels"), False)


def validate_benchmark(benchmark, reported: bool = False) -> None:
    """Check a benchmark revision block; ``reported`` (published results) allows null hash and OOD count."""
    _part(benchmark, "benchmark", Benchmark, reported)


def _validate_levels(record: dict) -> None:
    """What holds under any severity rule: one entry per level in order, percentiles rising, level scores not
    decreasing (easiest level first), and the summary's mean of the levels' ood-auroc."""
    count, levels = record["num_levels"], record["levels"]
    if not isinstance(levels, list):
        raise _fail("levels", f"must be a list, got {type(levels).__name__}")
    if len(levels) != count:
        raise _fail("levels", f"has {len(levels)} entries but num_levels is {count}")
    previous, last_percentile = -math.inf, -math.inf
    for index, level in enumerate(levels):
        path = f"levels[{index}]"
        if level["level"] != index:
            raise _fail(f"{path}.level", f"must be {index}, got {level['level']}")
        if level["percentile"] <= last_percentile:
            raise _fail(
                f"{path}.percentile",
                f"does not rise ({level['percentile']} after {last_percentile}); levels must be ordered easiest first",
            )
        last_percentile = level["percentile"]
        score = level["level_score"]
        if score is not None:
            if score < previous - 1e-9 * max(1.0, abs(previous)):
                raise _fail(
                    f"{path}.level_score", f"decreases ({score} after {previous}); levels must be ordered easiest first"
                )
            previous = score
    _validate_windows(levels)
    mean = record["summary"]["mean_ood_auroc"]
    actual = math.fsum(level["ood_auroc"] for level in levels) / count
    if abs(mean - actual) > 1e-6:
        raise _fail("summary.mean_ood_auroc", f"is {mean} but the levels' ood_auroc average {actual}")


def _validate_windows(levels: list) -> None:
    """The levels' real window percentiles: in every level or in none (a record made before them), never
    decreasing."""
    held = ["window_percentile" in level for level in levels]
    if any(held) and not all(held):
        raise _fail(f"levels[{held.index(False)}]", "missing field 'window_percentile' (other levels have it)")
    for index in range(1, len(levels) if all(held) else 0):
        if levels[index]["window_percentile"] < levels[index - 1]["window_percentile"]:
            raise _fail(f"levels[{index}].window_percentile", "decreases; levels must be ordered easiest first")


def _validate_since(record: dict) -> None:
    """A metric added in a schema version is in every record of that version or later (older ones lack it)."""
    version = record["schema_version"]
    parts = {"level": record["levels"], "id": [record["id"]], "summary": [record["summary"]]}
    for metric in registered():
        if metric.since is None or metric.since > version:
            continue
        for index, part in enumerate(parts[metric.scope]):
            if metric.name not in part:
                where = {"level": f"levels[{index}]", "id": "id", "summary": "summary"}[metric.scope]
                raise _fail(where, f"missing field '{metric.name}' (schema version {version} has it)")


def _validate_intervals(record: dict) -> None:
    """An interval's ends are both null (none: a published result, an undefined metric) or both numbers around the
    metric's value, and the record says how it computed them (``intervals``)."""
    parts = {"level": record["levels"], "id": [record["id"]], "summary": [record["summary"]]}
    for metric in registered():
        for index, part in enumerate(parts[metric.scope] if metric.bounds else ()):
            where = {"level": f"levels[{index}]", "id": "id", "summary": "summary"}[metric.scope]
            low, high = (part.get(end) for end in metric.bounds)
            if low is None and high is None:
                continue
            value = part.get(metric.name)
            if low is None or high is None or value is None:
                raise _fail(f"{where}.{metric.bounds[0]}", f"{metric.name}'s interval needs both ends and the value")
            if not low - 1e-9 <= value <= high + 1e-9:
                raise _fail(f"{where}.{metric.bounds[0]}", f"[{low}, {high}] does not hold {metric.name} {value}")
            if "intervals" not in record:
                raise _fail("record", "missing field 'intervals' (it says how the intervals were computed)")


def _validate_per_class(per_class: dict, num_levels: int) -> None:
    """The optional per-OOD-class summary (its fields checked with the record's): one entry per level in order,
    quantiles not decreasing, at most n_classes hardest classes, hardest first within the level's min and max."""
    levels = per_class["levels"]
    if len(levels) != num_levels:
        raise _fail("per_class.levels", f"must be a list of num_levels ({num_levels}) entries")
    for index, level in enumerate(levels):
        path = f"per_class.levels[{index}]"
        if level["level"] != index:
            raise _fail(f"{path}.level", f"must be {index}, got {level['level']}")
        count, quantiles, hardest = level["n_classes"], level["ood_auroc_quantiles"], level["hardest"]
        if quantiles != sorted(quantiles):
            raise _fail(f"{path}.ood_auroc_quantiles", f"must not decrease, got {quantiles}")
        if len(hardest) > count:
            raise _fail(f"{path}.hardest", f"must be a list of at most n_classes ({count}) classes")
        previous = quantiles[0]
        for rank, entry in enumerate(hardest):
            auroc = entry["ood_auroc"]
            if not previous <= auroc <= quantiles[-1]:
                raise _fail(
                    f"{path}.hardest[{rank}].ood_auroc",
                    f"{auroc} is out of order (hardest first, within the level's min and max)",
                )
            previous = auroc


def canonical_params(params: dict) -> dict:
    """Kappa params with integers as floats (nested ones too), so ``{"temperature": 2}`` and ``2.0`` are the same
    kappa."""
    return {
        k: canonical_params(v)
        if isinstance(v, dict)
        else float(v)
        if isinstance(v, int) and not isinstance(v, bool)
        else v
        for k, v in sorted(params.items())
    }


def kappa_label(name: str, params: dict) -> str:
    """``softmax``, or ``odin(epsilon=1e-05,temperature=2)`` when the kappa has parameters; nested ones (a fitted
    kappa's ``fit``) are left to the record."""
    flat = {k: v for k, v in canonical_params(params).items() if not isinstance(v, dict)}
    if not flat:
        return name
    shown = ",".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in flat.items())
    return f"{name}({shown})"


def revision(benchmark: dict) -> dict:
    """The benchmark revision a record belongs to (what a leaderboard directory is tied to)."""
    return {key: benchmark[key] for key in required_keys(Benchmark)}


def model_identity(model: dict) -> str | list:
    """What names the model of an entry: the code the harness itself hashed, never what the model's code reports.

    - a submission file (``bundle_sha256``): its bundle, the sha256 of every file of its folder, computed by the
      harness's own process, and the file of the bundle that was run (``source``: one folder may hold several);
      other code with the same weights is another model;
    - a zoo target or an in-memory model (``bundle_sha256`` null): its source (``timm:resnet18``) with the hash of the
      weights file the harness read and the weights hash;
    - a record made before the bundle hash existed (no ``bundle_sha256`` field): the weights hash, as when it was added;
    - published results without hashes: the model's name.
    """
    if "bundle_sha256" not in model:
        return model["weights_sha256"] or f"name:{model['name']}"
    if model["bundle_sha256"] is not None:
        return ["bundle", model["bundle_sha256"], model["source"]]
    if model["file_sha256"] is None and model["weights_sha256"] is None:
        return f"name:{model['name']}"
    return [model["source"], model["file_sha256"], model["weights_sha256"]]


def entry_id(record: dict) -> str:
    """16 hex digits naming the entry: (model identity (:func:`model_identity`), kappa + params, benchmark revision,
    and the severity rule where it is not the canonical one, so that every entry of that rule keeps its id).

    A null manifest hash (reported results) falls back to the benchmark id and version.
    """
    model, bench = record["model"], record["benchmark"]
    identity = {
        "model": model_identity(model),
        "kappa": [record["kappa"]["name"], canonical_params(record["kappa"]["params"])],
        "benchmark": bench["manifest_sha256"] or f"{bench['id']}@{bench['version']}",
    }
    if record.get("severity_rule", CANONICAL_SEVERITY_RULE) != CANONICAL_SEVERITY_RULE:
        identity["severity_rule"] = record["severity_rule"]
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def flags(record: dict) -> list[str]:
    """Warnings derived from a valid record: an id-acc near chance marks a broken run; private scores below the public
    ones, a model that may have memorised the public images."""
    chance = 1.0 / record["benchmark"]["num_id_classes"]
    if record["id"]["acc"] < NEAR_CHANCE_FACTOR * chance:
        return [f"id-acc near chance ({record['id']['acc']:.4f}, chance {chance:.4f})"]
    private = record.get("private")
    if private is not None and not private["reproduced"]:
        return [
            f"scores not reproduced on private images (mean ood-auroc {record['summary']['mean_ood_auroc']:.4f} "
            f"public, {private['mean_ood_auroc']:.4f} private, p = {private['p_value']:.2g})"
        ]
    return []


def private_status(record: dict) -> str:
    """What the private images say of a record: reproduced, not reproduced, or not checked (no private part)."""
    private = record.get("private")
    if private is None:
        return "not checked"
    return "reproduced" if private["reproduced"] else "not reproduced"
