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

from leaderboard.errors import LeaderboardError

SCHEMA_VERSION = 1
PROVENANCES = ("harness", "paper")
NEAR_CHANCE_FACTOR = 2  # id-acc below twice chance (2 / num_id_classes) marks a broken run
MAX_NAME_BYTES = 200  # model and kappa names end up in file names, page titles and table cells
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_REQUEST_ID = re.compile(r"^[0-9a-f]{12}$")
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.\-]{0,95}$")
_KAPPA_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.\-]*$")
_TOP = ("schema_version", "benchmark", "model", "kappa", "num_levels", "levels", "id", "summary",
        "metric_definitions", "seed", "harness_version", "created", "timings", "provenance")
_BENCHMARK = ("id", "version", "manifest_sha256", "num_id_classes", "num_ood_classes")
_MODEL = ("name", "source", "file_sha256", "weights_sha256", "num_parameters", "preprocessing")
_LEVEL = ("level", "percentile", "level_score", "ood_auroc", "fpr_at_95_tpr", "aupr_in", "aupr_out",
          "ood_avg_conf", "num_id", "num_ood")
_ID = ("acc", "auroc", "avg_conf", "num")
_OPTIONAL = ("per_class", "verification")
VERIFIED = "verified"  # re-run by the leaderboard's own worker from a request; anything else is self-reported
_VERIFICATION = ("status", "request", "requests_repo", "worker")
_PER_CLASS_LEVEL = ("level", "n_classes", "ood_auroc_quantiles", "hardest")
_PER_CLASS_ENTRY = ("id", "name", "ood_auroc", "mean_confidence", "thumbnails")
_RELATIVE_PATH = re.compile(r"^(?!.*(^|/)\.\.?(/|$))[A-Za-z0-9_.\-]+(/[A-Za-z0-9_.\-]+)*$")


def _fail(path: str, reason: str) -> LeaderboardError:
    return LeaderboardError(f"{path}: {reason}")


def _object(value, path: str, fields: tuple[str, ...] | None = None) -> dict:
    if not isinstance(value, dict):
        raise _fail(path, f"must be an object, got {type(value).__name__}")
    if fields is not None:
        for key in fields:
            if key not in value:
                raise _fail(path, f"missing field '{key}'")
        unknown = sorted(set(value) - set(fields))
        if unknown:
            raise _fail(path, f"unknown field '{unknown[0]}'")
    return value


def _number(value, path: str, nullable: bool = False, unit: bool = False) -> float | None:
    if value is None:
        if nullable:
            return None
        raise _fail(path, "must be a number, got null")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(path, f"must be a number, got {type(value).__name__}")
    if not math.isfinite(value):
        raise _fail(path, f"must be a finite number, got {value}")
    if unit and not 0.0 <= value <= 1.0:
        raise _fail(path, f"out of range [0, 1]: {value}")
    return float(value)


def _integer(value, path: str, minimum: int, nullable: bool = False) -> int | None:
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(path, f"must be an integer, got {type(value).__name__ if value is not None else 'null'}")
    if value < minimum:
        raise _fail(path, f"must be >= {minimum}, got {value}")
    return value


def _string(value, path: str, nullable: bool = False, pattern: re.Pattern | None = None, what: str = "") -> str | None:
    if value is None and nullable:
        return None
    if not isinstance(value, str) or not value:
        raise _fail(path, "must be a non-empty string")
    if pattern is not None and not pattern.match(value):
        raise _fail(path, f"not {what}: {value[:80]!r}")
    return value


def _name(value, path: str, pattern: re.Pattern | None = None, what: str = "") -> str:
    """A name: a non-empty string of at most :data:`MAX_NAME_BYTES` UTF-8 bytes, no path separator or control character."""
    _string(value, path)
    if len(value.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        raise _fail(path, f"longer than {MAX_NAME_BYTES} bytes: {value[:40]!r}...")
    bad = next((c for c in value if c in "/\\" or unicodedata.category(c) in ("Cc", "Cs")), None)
    if bad is not None:
        kind = "a path separator" if bad in "/\\" else "a control character"
        raise _fail(path, f"contains {kind} ({bad!r}): {value[:80]!r}")
    return _string(value, path, pattern=pattern, what=what)


def _hash(value, path: str, nullable: bool) -> None:
    _string(value, path, nullable, _HEX64, "a lowercase 64-digit hex sha256")


def validate_record(record) -> None:
    """Raise :class:`LeaderboardError` naming the first problem of ``record``; return if it is valid."""
    _object(record, "record")
    if record.get("schema_version") != SCHEMA_VERSION:
        raise _fail("schema_version", f"unsupported {record.get('schema_version')!r} (this leaderboard reads {SCHEMA_VERSION})")
    _object({k: v for k, v in record.items() if k not in _OPTIONAL}, "record", _TOP)
    if record["provenance"] not in PROVENANCES:
        raise _fail("provenance", f"must be one of {', '.join(PROVENANCES)}, got {record['provenance']!r}")
    paper = record["provenance"] == "paper"

    validate_benchmark(record["benchmark"], reported=paper)

    model = _object(record["model"], "model", _MODEL)
    _name(model["name"], "model.name")
    _string(model["source"], "model.source", nullable=True)
    _hash(model["file_sha256"], "model.file_sha256", nullable=True)
    _hash(model["weights_sha256"], "model.weights_sha256", nullable=paper)
    _integer(model["num_parameters"], "model.num_parameters", 0, nullable=paper)
    _object(model["preprocessing"], "model.preprocessing")

    kappa = _object(record["kappa"], "kappa", ("name", "params"))
    _name(kappa["name"], "kappa.name", pattern=_KAPPA_NAME, what="a kappa name (letters, digits, _ . -)")
    _params(kappa["params"], "kappa.params")

    _validate_levels(record, paper)

    ident = _object(record["id"], "id", _ID)
    _number(ident["acc"], "id.acc", unit=True)
    _number(ident["auroc"], "id.auroc", nullable=True, unit=True)
    _number(ident["avg_conf"], "id.avg_conf")
    _integer(ident["num"], "id.num", 1)

    definitions = _object(record["metric_definitions"], "metric_definitions")
    if "ood_auroc" not in definitions:
        raise _fail("metric_definitions", "missing field 'ood_auroc'")
    for key, value in definitions.items():
        _string(value, f"metric_definitions.{key}")
    _integer(record["seed"], "seed", 0, nullable=paper)
    _string(record["harness_version"], "harness_version", nullable=paper)
    created = _string(record["created"], "created", nullable=paper)
    if created is not None:
        try:
            datetime.fromisoformat(created)
        except ValueError:
            raise _fail("created", f"not an ISO-8601 date-time: {created[:40]!r}") from None
    if record["timings"] is not None or not paper:
        _object(record["timings"], "timings")
    if "per_class" in record:
        _validate_per_class(record["per_class"], record["num_levels"])
    if "verification" in record:
        _validate_verification(record["verification"])


def _validate_verification(verification) -> None:
    """Who vouches for the numbers: the leaderboard's worker (the request, its queue repo, the worker's name)."""
    block = _object(verification, "verification", _VERIFICATION)
    if block["status"] != VERIFIED:
        raise _fail("verification.status", f"must be {VERIFIED!r} (leave the block out for a self-reported record)")
    _string(block["request"], "verification.request", pattern=_REQUEST_ID, what="a request id (12 hex digits)")
    _string(block["requests_repo"], "verification.requests_repo", pattern=REPO_ID, what="a Hub repo id (owner/name)")
    _name(block["worker"], "verification.worker")


def verification_status(record: dict) -> str:
    """``"verified"`` for a record the leaderboard's worker produced, else ``"self-reported"``."""
    return (record.get("verification") or {}).get("status") or "self-reported"


def _params(params, path: str, depth: int = 0) -> None:
    """Parameters: strings, booleans, nulls, finite numbers, or (two levels deep at most, e.g. a fitted kappa's ``fit``:
    split, size, seed) objects of them."""
    for key, value in _object(params, path).items():
        _name(key, f"{path} (a key)")
        if isinstance(value, dict) and depth < 2:
            _params(value, f"{path}.{key}", depth + 1)
        elif not isinstance(value, (str, bool)) and value is not None:
            _number(value, f"{path}.{key}")


def validate_config(config, format_version: int) -> None:
    """Check a leaderboard's configuration (``leaderboard.json``): format version, benchmark revision, level count."""
    _object(config, "leaderboard", ("format_version", "benchmark", "num_levels"))
    if config["format_version"] != format_version:
        raise _fail("format_version", f"unsupported {config['format_version']!r} (this leaderboard reads {format_version})")
    validate_benchmark(config["benchmark"], reported=True)
    _integer(config["num_levels"], "num_levels", 2)


def validate_benchmark(benchmark, reported: bool = False) -> None:
    """Check a benchmark revision block; ``reported`` (published results) allows null hash and OOD count."""
    _object(benchmark, "benchmark", _BENCHMARK)
    _name(benchmark["id"], "benchmark.id")
    _name(benchmark["version"], "benchmark.version")
    _hash(benchmark["manifest_sha256"], "benchmark.manifest_sha256", nullable=reported)
    _integer(benchmark["num_id_classes"], "benchmark.num_id_classes", 2)
    _integer(benchmark["num_ood_classes"], "benchmark.num_ood_classes", 1, nullable=reported)


def _validate_levels(record: dict, paper: bool) -> None:
    count = _integer(record["num_levels"], "num_levels", 2)
    levels = record["levels"]
    if not isinstance(levels, list):
        raise _fail("levels", f"must be a list, got {type(levels).__name__}")
    if len(levels) != count:
        raise _fail("levels", f"has {len(levels)} entries but num_levels is {count}")
    previous = -math.inf
    for index, level in enumerate(levels):
        path = f"levels[{index}]"
        _object(level, path, _LEVEL)
        if _integer(level["level"], f"{path}.level", 0) != index:
            raise _fail(f"{path}.level", f"must be {index}, got {level['level']}")
        percentile = _number(level["percentile"], f"{path}.percentile", unit=True)
        if abs(percentile - index / (count - 1)) > 1e-9:
            raise _fail(f"{path}.percentile", f"must be {index}/{count - 1}, got {percentile}")
        score = _number(level["level_score"], f"{path}.level_score", nullable=paper)
        if score is not None:
            if score < previous - 1e-9 * max(1.0, abs(previous)):
                raise _fail(f"{path}.level_score", f"decreases ({score} after {previous}); levels must be ordered easiest first")
            previous = score
        _number(level["ood_auroc"], f"{path}.ood_auroc", unit=True)
        for key in ("fpr_at_95_tpr", "aupr_in", "aupr_out"):
            _number(level[key], f"{path}.{key}", nullable=paper, unit=True)
        _number(level["ood_avg_conf"], f"{path}.ood_avg_conf")
        _integer(level["num_id"], f"{path}.num_id", 1, nullable=paper)
        _integer(level["num_ood"], f"{path}.num_ood", 1, nullable=paper)
    summary = _object(record["summary"], "summary", ("mean_ood_auroc",))
    mean = _number(summary["mean_ood_auroc"], "summary.mean_ood_auroc", unit=True)
    actual = math.fsum(level["ood_auroc"] for level in levels) / count
    if abs(mean - actual) > 1e-6:
        raise _fail("summary.mean_ood_auroc", f"is {mean} but the levels' ood_auroc average {actual}")


def _validate_per_class(per_class, num_levels: int) -> None:
    """The optional per-OOD-class summary: a relative sidecar path and, per level, quantiles and the hardest classes."""
    _object(per_class, "per_class", ("file", "levels"))
    _string(per_class["file"], "per_class.file", pattern=_RELATIVE_PATH, what="a relative path")
    levels = per_class["levels"]
    if not isinstance(levels, list) or len(levels) != num_levels:
        raise _fail("per_class.levels", f"must be a list of num_levels ({num_levels}) entries")
    for index, level in enumerate(levels):
        path = f"per_class.levels[{index}]"
        _object(level, path, _PER_CLASS_LEVEL)
        if _integer(level["level"], f"{path}.level", 0) != index:
            raise _fail(f"{path}.level", f"must be {index}, got {level['level']}")
        count = _integer(level["n_classes"], f"{path}.n_classes", 1)
        quantiles = level["ood_auroc_quantiles"]
        if not isinstance(quantiles, list) or len(quantiles) != 5:
            raise _fail(f"{path}.ood_auroc_quantiles", "must be a list of 5 numbers [min, q25, median, q75, max]")
        values = [_number(q, f"{path}.ood_auroc_quantiles[{i}]", unit=True) for i, q in enumerate(quantiles)]
        if values != sorted(values):
            raise _fail(f"{path}.ood_auroc_quantiles", f"must not decrease, got {values}")
        hardest = level["hardest"]
        if not isinstance(hardest, list) or len(hardest) > count:
            raise _fail(f"{path}.hardest", f"must be a list of at most n_classes ({count}) classes")
        previous = values[0]
        for rank, entry in enumerate(hardest):
            where = f"{path}.hardest[{rank}]"
            _object(entry, where, _PER_CLASS_ENTRY)
            _string(entry["id"], f"{where}.id")
            _string(entry["name"], f"{where}.name")
            auroc = _number(entry["ood_auroc"], f"{where}.ood_auroc", unit=True)
            if not previous <= auroc <= values[-1]:
                raise _fail(f"{where}.ood_auroc", f"{auroc} is out of order (hardest first, within the level's min and max)")
            previous = auroc
            _number(entry["mean_confidence"], f"{where}.mean_confidence")
            if not isinstance(entry["thumbnails"], list):
                raise _fail(f"{where}.thumbnails", "must be a list of relative paths")
            for i, thumbnail in enumerate(entry["thumbnails"]):
                _string(thumbnail, f"{where}.thumbnails[{i}]", pattern=_RELATIVE_PATH, what="a relative path")


def canonical_params(params: dict) -> dict:
    """Kappa params with integers as floats (nested ones too), so ``{"temperature": 2}`` and ``2.0`` are the same kappa."""
    return {k: canonical_params(v) if isinstance(v, dict) else float(v) if isinstance(v, int) and not isinstance(v, bool) else v
            for k, v in sorted(params.items())}


def kappa_label(name: str, params: dict) -> str:
    """``softmax``, or ``odin(epsilon=1e-05,temperature=2)`` when the kappa has parameters; nested ones (a fitted kappa's
    ``fit``) are left to the record."""
    flat = {k: v for k, v in canonical_params(params).items() if not isinstance(v, dict)}
    if not flat:
        return name
    shown = ",".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in flat.items())
    return f"{name}({shown})"


def revision(benchmark: dict) -> dict:
    """The benchmark revision a record belongs to (what a leaderboard directory is tied to)."""
    return {key: benchmark[key] for key in _BENCHMARK}


def entry_id(record: dict) -> str:
    """16 hex digits naming the entry: (model weights hash, kappa + params, benchmark revision).

    A null weights hash (reported results) falls back to the model name, a null manifest hash to
    the benchmark id and version.
    """
    model, bench = record["model"], record["benchmark"]
    identity = {
        "model": model["weights_sha256"] or f"name:{model['name']}",
        "kappa": [record["kappa"]["name"], canonical_params(record["kappa"]["params"])],
        "benchmark": bench["manifest_sha256"] or f"{bench['id']}@{bench['version']}",
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def flags(record: dict) -> list[str]:
    """Warnings derived from a valid record; an id-acc near chance marks a broken run."""
    chance = 1.0 / record["benchmark"]["num_id_classes"]
    if record["id"]["acc"] < NEAR_CHANCE_FACTOR * chance:
        return [f"id-acc near chance ({record['id']['acc']:.4f}, chance {chance:.4f})"]
    return []
