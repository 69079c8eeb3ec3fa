"""Shared test data: a valid harness record, and malformed ones with the validator's first complaint."""

from __future__ import annotations

import copy
import math
import zlib

from harness.method.registry import registered
from leaderboard.record import READ_VERSIONS, SCHEMA_VERSION, make_record

GLYPHS = {
    "id": "glyphs",
    "version": "1.0.0",
    "manifest_sha256": "ab" * 32,
    "num_id_classes": 36,
    "num_ood_classes": 432,
}
LEVEL_VALUES = {  # the built-in level metrics' values at level i (the tests read them); ood_auroc is record()'s
    "fpr_at_95_tpr": lambda i: 0.3 + 0.01 * i,
    "aupr_in": lambda i: 0.9,
    "aupr_out": lambda i: 0.92,
    "ood_avg_conf": lambda i: 0.4 + 0.01 * i,
    "fpr_at_99_tpr": lambda i: 0.5 + 0.01 * i,
}
ID_VALUES = {"auroc": 0.86, "avg_conf": 0.77}  # acc is record()'s


def metric_value(name: str, level: int = 0) -> float:
    """A value in [0, 1] for any other registered metric: fixed by its name, rising by 0.01 per level."""
    return round(0.2 + (zlib.crc32(name.encode()) % 50) / 100 + 0.01 * level, 6)


def held(scope: str) -> list[str]:
    """The registered metrics of ``scope`` that every record holds (those with a ``since``); a metric without one is
    left out, as by a maker of records that does not measure it."""
    return [m.name for m in registered(scope) if m.since is not None]


def _level(i: int, num_levels: int, auroc: float) -> dict:
    values = {name: LEVEL_VALUES.get(name, lambda i, name=name: metric_value(name, i))(i) for name in held("level")}
    percentile = {"level": i, "percentile": i / (num_levels - 1), "level_score": -1.0 + 0.1 * i}
    return {**percentile, **values, "ood_auroc": auroc, "num_id": 1800, "num_ood": 1800}


def record(
    model: str = "glyph_cnn",
    weights: str = "11" * 32,
    kappa: str = "softmax",
    params: dict | None = None,
    aurocs: list[float] | None = None,
    acc: float = 0.81,
    num_levels: int = 11,
    bundle: str | None = None,
) -> dict:
    """A valid harness record, built by ``make_record`` with every metric of the schema version the registry declares
    (:func:`held`); ood-auroc falls from 0.95 by 0.02 per level unless ``aurocs`` is given. ``bundle``: a submission
    file's bundle hash (its identity); without it the model is known by its source and hashes."""
    aurocs = aurocs or [round(0.95 - 0.02 * i, 6) for i in range(num_levels)]
    levels = [_level(i, num_levels, a) for i, a in enumerate(aurocs)]
    ids = {name: ID_VALUES.get(name, metric_value(name)) for name in held("id")}
    summary = {m.name: m.compute(levels) for m in registered("summary") if m.name in held("summary")}
    return make_record(
        benchmark=copy.deepcopy(GLYPHS),
        model={
            "name": model,
            "source": "examples/glyph_cnn.py",
            "file_sha256": "22" * 32,
            "weights_sha256": weights,
            "bundle_sha256": bundle,
            "num_parameters": 123456,
            "preprocessing": {"size": 32},
        },
        kappa={"name": kappa, "params": params or {}},
        levels=levels,
        id={**ids, "acc": acc, "num": 1800},
        summary=summary,
        metric_definitions={
            "ood_auroc": "Mann-Whitney AUROC with average ranks, ID positive",
            "fpr_at_95_tpr": "ODIN convention",
            "aupr": "average precision",
        },
        seed=0,
        harness_version="0.1.0",
        created="2026-12-02T10:00:00+00:00",
        timings={"total_s": 61.2},
        provenance="harness",
    )


STATEMENT = {
    "confidence": 0.95,
    "methods": {
        "levels.ood_auroc": "newcombe-score",
        "id.acc": "wilson-cc",
        "id.auroc": "newcombe-score",
        "summary.mean_ood_auroc": "newcombe-score-mean-delong-correlation",
    },
}  # what a harness record says of its intervals


def with_intervals(rec: dict, half: float = 0.01) -> dict:
    """``rec`` with every interval a harness record carries: ``half`` either side of each value."""
    rec = copy.deepcopy(rec)
    for level in rec["levels"]:
        level["ood_auroc_low"], level["ood_auroc_high"] = level["ood_auroc"] - half, level["ood_auroc"] + half
    for part, names in ((rec["id"], ("acc", "auroc")), (rec["summary"], ("mean_ood_auroc",))):
        for name in names:
            part[f"{name}_low"], part[f"{name}_high"] = part[name] - half, part[name] + half
    rec["intervals"] = copy.deepcopy(STATEMENT)
    return rec


def interval_records(halves: dict[str, float | None]) -> list[dict]:
    """One model per item, mean ood-auroc 0.80, 0.79, 0.70, 0.695 in order, with intervals ``half`` either side of each
    value (None: no intervals, as a record made before them)."""
    records = []
    for i, (name, half) in enumerate(halves.items()):
        shift = [0.0, -0.01, -0.1, -0.105][i]
        rec = record(
            model=name, weights=f"{i + 1:02d}" * 32, aurocs=[round(0.9 + shift - 0.02 * j, 6) for j in range(11)]
        )
        records.append(with_intervals(rec, half) if half is not None else rec)
    return records


def set_field(record: dict, path: str, value) -> None:
    """Set (or, with ``DELETE``, delete) the field at a dotted ``path`` (list indices as numbers)."""
    target = record
    keys = path.split(".")
    for key in keys[:-1]:
        target = target[int(key)] if isinstance(target, list) else target[key]
    last = keys[-1]
    if value is DELETE:
        del target[last]
    elif isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value


class _Delete:
    """Delete the field (a stable repr: parallel workers must collect the same test ids)."""

    def __repr__(self) -> str:
        return "DELETE"


DELETE = _Delete()
READS = ", ".join(map(str, READ_VERSIONS))  # the versions the validator names

REJECTIONS = [
    (
        "schema_version",
        SCHEMA_VERSION + 1,
        f"schema_version: unsupported {SCHEMA_VERSION + 1} (this leaderboard reads {READS})",
    ),
    ("schema_version", True, "schema_version: unsupported True"),
    ("model", DELETE, "record: missing field 'model'"),
    ("extra", 1, "record: unknown field 'extra'"),
    ("provenance", "self-reported", "provenance: must be one of harness, paper"),
    ("benchmark.manifest_sha256", "XYZ", "benchmark.manifest_sha256: not a lowercase 64-digit hex sha256"),
    ("benchmark.manifest_sha256", None, "benchmark.manifest_sha256: must be a non-empty string"),
    ("model.weights_sha256", None, "model.weights_sha256: must be a non-empty string"),
    ("model.name", "", "model.name: must be a non-empty string"),
    ("model.name", "..", "model.name: '..' is not a name"),
    ("model.bundle_sha256", "XYZ", "model.bundle_sha256: not a lowercase 64-digit hex sha256"),
    ("model.num_parameters", 1.5, "model.num_parameters: must be an integer, got float"),
    ("model.num_parameters", 10**30, "model.num_parameters: out of range [0, 1e15]: 1000000000000000000000000000000"),
    ("model.num_parameters", -1, "model.num_parameters: out of range [0, 1e15]: -1"),
    ("model.preprocessing", {"size": 2**70}, "model.preprocessing.size: out of range [-9223372036854775808, 92233720"),
    (
        "model.class_subset",
        {"source": "in1k", "outputs_used": 2, "model_outputs": 0},
        "model.class_subset.model_outputs",
    ),
    ("model.hub_weights", None, "model.hub_weights: must be an object, got NoneType"),
    (
        "model.hub_weights",
        {"repo": "timm/resnet50.a1_in1k", "revision": "main", "file": "model.safetensors"},
        "model.hub_weights.revision: not a commit sha (40 lowercase hex digits): 'main'",
    ),
    (
        "model.hub_weights",
        {"repo": "resnet50", "revision": "a" * 40, "file": "model.safetensors"},
        "model.hub_weights.repo: not a Hub repo id (owner/name)",
    ),
    ("model.hub_weights", {"repo": "timm/r", "revision": "a" * 40}, "model.hub_weights: missing field 'file'"),
    (
        "model.torchvision_weights",
        {"entry": "IMAGENET1K_V1", "url": "https://download.pytorch.org/models/resnet18-f37072fd.pth"},
        "model.torchvision_weights.entry: not a weights entry (Enum.NAME): 'IMAGENET1K_V1'",
    ),
    (
        "model.torchvision_weights",
        {"entry": "ResNet18_Weights.IMAGENET1K_V1", "url": "http://download.pytorch.org/models/resnet18-f37072fd.pth"},
        "model.torchvision_weights.url: not an https url (printable ASCII)",
    ),
    (
        "model.torchvision_weights",
        {"entry": "ResNet18_Weights.IMAGENET1K_V1"},
        "model.torchvision_weights: missing field 'url'",
    ),
    ("kappa.name", "soft max", "kappa.name: not a kappa name"),
    ("kappa.params", {"temperature": math.inf}, "kappa.params.temperature: must be a finite number, got inf"),
    ("levels.3.ood_auroc", math.nan, "levels[3].ood_auroc: must be a finite number, got nan"),
    ("levels.3.ood_auroc", 1.2, "levels[3].ood_auroc: out of range [0, 1]: 1.2"),
    ("levels.0.fpr_at_95_tpr", -0.1, "levels[0].fpr_at_95_tpr: out of range [0, 1]: -0.1"),
    ("levels.0.fpr_at_99_tpr", 1.5, "levels[0].fpr_at_99_tpr: out of range [0, 1]: 1.5"),
    (
        "levels.6.fpr_at_99_tpr",
        DELETE,
        f"levels[6]: missing field 'fpr_at_99_tpr' (schema version {SCHEMA_VERSION} has it)",
    ),
    ("levels.0.aupr_in", None, "levels[0].aupr_in: must be a number, got null"),
    ("levels.2.ood_avg_conf", "0.5", "levels[2].ood_avg_conf: must be a number, got str"),
    ("levels.2.ood_avg_conf", True, "levels[2].ood_avg_conf: must be a number, got bool"),
    ("levels.4.level", 5, "levels[4].level: must be 4, got 5"),
    ("levels.4.percentile", 0.2, "levels[4].percentile: does not rise (0.2 after 0.3)"),
    ("levels.4.percentile", 1.5, "levels[4].percentile: out of range [0, 1]: 1.5"),
    ("levels.5.level_score", -5.0, "levels[5].level_score: decreases (-5.0 after"),
    ("levels.5.num_ood", 0, "levels[5].num_ood: out of range [1, 1e10]: 0"),
    ("levels.5.surprise", 1, "levels[5]: unknown field 'surprise'"),
    ("num_levels", 12, "levels: has 11 entries but num_levels is 12"),
    ("num_levels", 1, "num_levels: out of range [2, 1000]: 1"),
    ("levels", {}, "levels: must be a list, got dict"),
    ("summary.mean_ood_auroc", 0.5, "summary.mean_ood_auroc: is 0.5 but the levels' ood_auroc average 0.85"),
    ("id.acc", 1.01, "id.acc: out of range [0, 1]: 1.01"),
    ("id.avg_conf", math.inf, "id.avg_conf: must be a finite number, got inf"),
    ("id.num", 0, "id.num: out of range [1, 1e10]: 0"),
    ("metric_definitions", {"aupr": "x"}, "metric_definitions: missing field 'ood_auroc'"),
    ("seed", None, "seed: must be an integer, got null"),
    ("seed", 2**70, "seed: out of range [0, 9223372036854775807]: 1180591620717411303424"),
    ("order_seed", -1, "order_seed: out of range [0, 9223372036854775807]: -1"),
    ("levels.2.level_score", 1e308, "levels[2].level_score: out of range [-1e+300, 1e+300]: 1e+308"),
    ("kappa.params", {"t": 2**70}, "kappa.params.t: out of range [-9223372036854775808, 9223372036854775807]: 1"),
    ("timings", {"total_s": -math.inf}, "timings.total_s: must be a finite number, got -inf"),
    ("private", {}, "private: missing field 'manifest_sha256'"),
    ("created", "yesterday", "created: not an ISO-8601 date-time: 'yesterday'"),
    ("timings", None, "timings: must be an object, got NoneType"),
    (
        "verification",
        {"status": "self-reported", "request": "0" * 12, "requests_repo": "o/r", "worker": "w"},
        "verification.status: must be 'verified'",
    ),
    (
        "verification",
        {"status": "verified", "request": "r1", "requests_repo": "o/r", "worker": "w"},
        "verification.request: not a request id (12 hex digits)",
    ),
    (
        "verification",
        {"status": "verified", "request": "0" * 12, "requests_repo": "requests", "worker": "w"},
        "verification.requests_repo: not a Hub repo id (owner/name)",
    ),
    (
        "verification",
        {"status": "verified", "request": "0" * 12, "requests_repo": "o/r"},
        "verification: missing field 'worker'",
    ),
]
