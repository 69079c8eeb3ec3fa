"""The result record's shape, in one place: typed parts, the one constructor, and the JSON Schema derived from them.

A field's annotation gives its JSON type (``X | None``: may be null); its :func:`spec` says the rest: a number's range
(every number field has one, so that no record holds a number the board cannot hold), a format, whether a paper record
may leave it null (``reported``), its table column. The validator (:mod:`leaderboard.schema`), ``record.schema.json``
(``python -m leaderboard.record`` rewrites it) and the table read these declarations, so a new field is declared here
and nowhere else in the leaderboard. The metrics' fields (of the parts ``Level``, ``IdMetrics`` and ``Summary``) come
from the metric registry (:mod:`harness.method.registry`): a metric in [0, 1] has that range, any other the range of
a kappa's values (:data:`SCORES`).

A record states its schema version; the leaderboard reads every version in :data:`READ_VERSIONS`: a field added
after version 1 is declared ``absent_in_older``, so a record written before it lacks it (the table shows it blank).
The version changes only for a breaking change: a metric added without one (``since`` None) is described in the
record's ``metrics`` block, so a board that does not know it reads and shows it (:mod:`leaderboard.foreign`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path

from harness.method.registry import Metric, generation, registered
from harness.method.severity_names import default_rule, rules_described

SCHEMA_VERSION = 2  # 2: fpr_at_99_tpr per level
READ_VERSIONS = (1, 2)  # every version this leaderboard ever wrote
PROVENANCES = ("harness", "paper")
VERIFIED = "verified"  # re-run by the leaderboard's own worker from a request; anything else is self-reported
MAX_NAME_BYTES = 200  # model and kappa names end up in file names, page titles and table cells
NOT_NAMES = (".", "..")  # a name is never a path's "here" or "up"
# the optional metrics (``since`` None) that every leaderboard reading schema version 2 knows (the releases' own): a
# record holds them undescribed; one added after them (a later release's, a plugin's) is described in its ``metrics``
KNOWN_OPTIONAL = (
    "fpr_at_95_tpr_ood",
    "fpr_at_99_tpr_ood",
    "aurc",
    "e_aurc",
    "sac_95",
    "sac_99",
    "ece",
    "ece_mass",
    "nll",
    "brier",
    "nll_multiclass",
    "brier_multiclass",
)
CANONICAL_SEVERITY_RULE = default_rule()  # the harness's default severity rule: what a record without one used
SCHEMA_FILE = Path(__file__).with_name("record.schema.json")
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.\-]{0,95}$")  # a Hub repo, owner/name
# string formats: name -> (pattern, what a value must be); "name" also has the byte and character rules of the validator
FORMATS = {
    "name": (None, "a name"),
    "sha256": (re.compile(r"^[0-9a-f]{64}$"), "a lowercase 64-digit hex sha256"),
    "kappa_name": (re.compile(r"^[A-Za-z][A-Za-z0-9_.\-]*$"), "a kappa name (letters, digits, _ . -)"),
    "rule_name": (re.compile(r"^[a-z][a-z0-9_]{0,63}$"), "a severity rule's name (a lower-case identifier)"),
    "request_id": (re.compile(r"^[0-9a-f]{12}$"), "a request id (12 hex digits)"),
    "commit": (re.compile(r"^[0-9a-f]{40}$"), "a commit sha (40 lowercase hex digits)"),
    "repo_id": (REPO_ID, "a Hub repo id (owner/name)"),
    # no part starting with "." (no ".", "..", hidden file or folder), no absolute path
    "relative_path": (
        re.compile(r"^[A-Za-z0-9_\-][A-Za-z0-9_.\-]*(/[A-Za-z0-9_\-][A-Za-z0-9_.\-]*)*$"),
        "a relative path",
    ),
    "weights_entry": (re.compile(r"^[A-Za-z][A-Za-z0-9_]*\.[A-Za-z][A-Za-z0-9_]*$"), "a weights entry (Enum.NAME)"),
    "url": (re.compile(r"^https://[!-~]+$"), "an https url (printable ASCII)"),
    "date-time": (None, "an ISO-8601 date-time"),
    "params": (None, "kappa parameters"),
}
UNIT = (0, 1)  # probabilities, rates, AUROCs, percentiles
MAX_INT64 = 2**63 - 1
MAX_CLASSES = 10**7  # classes of a benchmark or outputs of a model: ImageNet-21K has 21,841
MAX_IMAGES = 10**10  # images of one test set: ImageNet-21K has 14 million, LAION-5B 5.85 billion
MAX_PARAMETERS = 10**15  # the largest models have about 2 * 10**12; exact in a float64 (the site's JavaScript)
MAX_LEVELS = 1000  # severity levels: the paper has 11; each is a column of the table and a point of every curve
SEEDS = (0, MAX_INT64)  # the harness draws 63-bit order seeds; the table keeps seeds as int64
SCORES = (-1e300, 1e300)  # a kappa's values (any float64): sums and differences over MAX_LEVELS levels stay finite
Z_CAP = 40  # the private check's test statistic is capped there (harness.method.private_check)
OPEN = (-(2**63), MAX_INT64)  # a number inside an open object (preprocessing, timings, kappa params): an int64's range
_NAME_CHARS = "^[^/\\\\\\u0000-\\u001f\\u007f-\\u009f]+$"  # JSON Schema's half of the name rule


def spec(
    *,
    unit: bool = False,
    range: tuple[float, float] | None = None,
    format: str | None = None,
    reported: bool = False,
    const=None,
    enum: tuple | None = None,
    items: tuple[int, int | None] | None = None,
    keys: tuple = (),
    optional: bool = False,
    absent_in_older: bool = False,
    unset_absent: bool = False,
    column: str | None = None,
    doc: str | None = None,
):
    """A record field: ``range``: (lowest, highest) of a number, or of a list's numbers (every number field has one);
    ``unit``: the range [0, 1]; a ``format`` of :data:`FORMATS`; ``reported``: null allowed in a paper record only;
    ``const``/``enum``: the allowed values; ``items``: (min, max) list length; ``keys``: keys an open object must hold;
    ``optional``: left out of the record when None; ``absent_in_older``: always written (null when None), but records
    made before the field existed leave it out and stay valid (a record states what it has); ``unset_absent``: left out
    of the record when not given, rather than null (a metric that not every maker of records measures: one added
    without a schema version); ``column``: its table column; ``doc``: a description for the JSON Schema. The numbers
    inside an open object (``dict``) lie in :data:`OPEN`."""
    assert format is None or format in FORMATS, format
    meta = {
        "range": UNIT if unit else range,
        "format": format,
        "reported": reported,
        "const": const,
        "enum": enum,
        "items": items,
        "keys": keys,
        "optional": optional,
        "absent_in_older": absent_in_older,
        "unset_absent": unset_absent,
        "column": column,
        "doc": doc,
    }
    return dataclasses.field(default=None, metadata=meta) if optional else dataclasses.field(metadata=meta)


PARTS: dict[str, type] = {}  # the record's parts by name: the names their annotations use
_METRIC_PARTS: dict[str, str] = {}  # a metric scope -> the name of the part that holds its registered metrics


def _shape(cls: type) -> type:
    part = dataclass(frozen=True, kw_only=True)(cls)
    PARTS[cls.__name__] = part
    return part


@_shape
class Benchmark:
    """The benchmark revision a record was computed on (a paper's results may leave the hash and OOD count null)."""

    id: str = spec(format="name", column="benchmark_id")
    version: str = spec(format="name", column="benchmark_version")
    manifest_sha256: str | None = spec(format="sha256", reported=True, column="manifest_sha256")
    num_id_classes: int = spec(range=(2, MAX_CLASSES))
    num_ood_classes: int | None = spec(range=(1, MAX_CLASSES), reported=True)


@_shape
class HubWeights:
    """Where a zoo target's pretrained weights came from: a Hub model repo, the commit, the file the harness read."""

    repo: str = spec(format="repo_id")
    revision: str = spec(format="commit")
    file: str = spec(format="relative_path")


@_shape
class TorchvisionWeights:
    """Where a ``torchvision:`` target's pretrained weights came from: its weights entry and the entry's url."""

    entry: str = spec(format="weights_entry")
    url: str = spec(format="url")


@_shape
class ClassSubset:
    """A model evaluated on a subset of the classes it was trained on: its logits restricted to the ID classes'."""

    source: str = spec(format="name")
    outputs_used: int = spec(range=(1, MAX_CLASSES))
    model_outputs: int = spec(range=(2, MAX_CLASSES))


@_shape
class Model:
    """What was evaluated. Its identity (:func:`leaderboard.schema.model_identity`) is the code the harness hashed
    itself: a submission file's bundle, or a zoo target with its weights file; the weights hash is informational."""

    name: str = spec(format="name", column="model")
    source: str | None = spec(column="model_source")
    file_sha256: str | None = spec(format="sha256")
    weights_sha256: str | None = spec(format="sha256", reported=True, column="weights_sha256")
    bundle_sha256: str | None = spec(
        format="sha256",
        absent_in_older=True,
        column="bundle_sha256",
        doc="a submission file's identity: the sha256 of every file of its folder, computed by the harness (not the "
        "submission's code); null for zoo targets, in-memory models and published results; absent from records made "
        "before it existed",
    )
    num_parameters: int | None = spec(range=(0, MAX_PARAMETERS), reported=True, column="num_parameters")
    preprocessing: dict = spec()
    aliases: list[str] | None = spec(
        optional=True,
        format="name",
        items=(1, None),
        doc="optional: the other names a published table lists the same model under (its rows identical), in name "
        "order; absent otherwise and from records made before it",
    )
    hub_weights: HubWeights | None = spec(
        optional=True,
        doc="optional: for a zoo target given no weights file, the Hub model repo, commit and file its pretrained "
        "weights were fetched from (file_sha256 is that file's hash); absent otherwise and from records made before it",
    )
    torchvision_weights: TorchvisionWeights | None = spec(
        optional=True,
        doc="optional: for a torchvision: target given no weights file, the weights entry and url its pretrained "
        "weights were fetched from through torch.hub's cache (file_sha256 is that file's hash); absent otherwise and "
        "from records made before it",
    )
    class_subset: ClassSubset | None = spec(
        optional=True,
        doc="optional: for a model whose outputs number the label space the benchmark's ID classes were drawn from "
        "(source, e.g. ImageNet-1K), evaluated on the columns of the ID classes only: outputs_used of its "
        "model_outputs; absent otherwise and from records made before it",
    )


@_shape
class Kappa:
    name: str = spec(format="kappa_name", column="kappa_name")
    params: dict = spec(format="params")
    probability: bool = spec(
        absent_in_older=True,
        unset_absent=True,
        doc="whether the kappa's reported value is a probability that the prediction is right (the max softmax "
        "probability: true; entropy, energy, max logit, distances: false): the ID calibration metrics (ece, ece_mass, "
        "nll, brier) are null where it is false; absent from published results and records made before it existed",
    )


def _metric_field(metric: Metric) -> tuple:
    """A registered metric as a field of its part."""
    added = metric.since != 1
    doc = f"{metric.definition}; absent from records made before it existed" if added else None
    return (
        metric.name,
        float if metric.null == "never" else float | None,
        spec(
            range=UNIT if metric.unit else SCORES,
            reported=metric.null == "paper",
            absent_in_older=added,
            unset_absent=metric.since is None,
            column=metric.table_column if metric.scope != "level" else None,
            doc=doc,
        ),
    )


def _interval_fields(metric: Metric) -> list[tuple]:
    """The ends of a registered metric's interval (none without one) as fields of its part: null where the metric is
    undefined, left out where no interval was computed (published results, records made before intervals)."""
    column = metric.table_column if metric.scope != "level" else None
    return [
        (
            end,
            float | None,
            spec(
                range=UNIT if metric.unit else SCORES,
                absent_in_older=True,
                unset_absent=True,
                column=f"{column}_{side}" if column else None,
                doc=f"the {side} end of {metric.name}'s interval (intervals.methods says how); null where "
                f"{metric.name} is; absent where no interval was computed (published results, records made before "
                "intervals)",
            ),
        )
        for end, side in zip(metric.bounds or (), ("low", "high"))
    ]


def _metric_part(name: str, scope: str, doc: str, before: tuple = (), after: tuple = ()) -> type:
    metrics = registered(scope)
    fields = [*before, *map(_metric_field, metrics), *after, *(f for m in metrics for f in _interval_fields(m))]
    part = dataclasses.make_dataclass(name, fields, frozen=True, kw_only=True, namespace={"__doc__": doc})
    PARTS[name], _METRIC_PARTS[scope] = part, name
    return part


def _metric_parts() -> tuple[type, type, type]:
    """The parts that hold the registered metrics: a severity level's, the ID test set's and the summary's."""
    level = _metric_part(
        "Level",
        "level",
        "One severity level's metrics, easiest level first.",
        before=(
            ("level", int, spec(range=(0, MAX_LEVELS - 1))),
            ("percentile", float, spec(unit=True)),
            (
                "window_percentile",
                float,
                spec(
                    unit=True,
                    absent_in_older=True,
                    unset_absent=True,
                    doc="the level's window start over the last window's, start / (N - 1) (0 when N = 1), where "
                    "percentile is the nominal l / (L - 1); absent from records made before it and reported results",
                ),
            ),
            ("level_score", float | None, spec(range=SCORES, reported=True)),
        ),
        after=(
            ("num_id", int | None, spec(range=(1, MAX_IMAGES), reported=True)),
            ("num_ood", int | None, spec(range=(1, MAX_IMAGES), reported=True)),
        ),
    )
    ids = _metric_part(
        "IdMetrics",
        "id",
        "The ID test set: by default accuracy, the AUROC of correct vs wrong (null when all are right or all wrong), "
        "mean confidence.",
        after=(("num", int, spec(range=(1, MAX_IMAGES))),),
    )
    return level, ids, _metric_part("Summary", "summary", "The summary of the levels.")


Level, IdMetrics, Summary = _metric_parts()
_BUILT_FOR = [generation()]


@_shape
class HardClass:
    id: str = spec()
    name: str = spec()
    ood_auroc: float = spec(unit=True)
    mean_confidence: float = spec(range=SCORES)
    thumbnails: list[str] = spec(format="relative_path")


@_shape
class PerClassLevel:
    level: int = spec(range=(0, MAX_LEVELS - 1))
    n_classes: int = spec(range=(1, MAX_CLASSES))
    ood_auroc_quantiles: list[float] = spec(unit=True, items=(5, 5))
    hardest: list[HardClass] = spec()


@_shape
class PerClass:
    file: str = spec(format="relative_path")
    levels: list[PerClassLevel] = spec(items=(2, MAX_LEVELS))


MAX_PER_IMAGE_ROWS = 100_000_000  # far above any benchmark's images (ImageNet-21k's test splits are ~1M)


@_shape
class PerImage:
    """The file of the run's per-image scores: its path (relative to the record's folder), sha256 and row count."""

    file: str = spec(format="relative_path")
    sha256: str = spec(format="sha256")
    rows: int = spec(range=(1, MAX_PER_IMAGE_ROWS))


@_shape
class Intervals:
    """How the record's intervals were computed, said once: their confidence and, per metric by its place
    (``levels.ood_auroc``, ``id.acc``, ``summary.mean_ood_auroc``), the method."""

    confidence: float = spec(unit=True)
    methods: dict[str, str] = spec()


@_shape
class PrivateCheck:
    """The record's levels scored on the benchmark's private test images (never published) beside its public ones,
    and the one-sided test that the private mean ood-auroc is below the public one (docs/method.md, "Private
    images")."""

    manifest_sha256: str = spec(format="sha256")
    num_id: int = spec(range=(2, MAX_IMAGES))
    num_ood: int = spec(range=(2, MAX_IMAGES))
    mean_ood_auroc: float = spec(unit=True, column="private_mean_ood_auroc")
    level_ood_auroc: list[float] = spec(unit=True, items=(2, MAX_LEVELS))
    difference: float = spec(range=(-1, 1), doc="the public mean ood-auroc minus the private one")
    z: float = spec(
        range=(-Z_CAP, Z_CAP),
        doc="the difference over its standard error (public and private variances summed), within +-40",
    )
    p_value: float = spec(unit=True)
    alpha: float = spec(unit=True)
    reproduced: bool = spec(doc="false: the private scores fall below the public ones at alpha (flagged)")


@_shape
class Verification:
    status: str = spec(const=VERIFIED)
    request: str = spec(format="request_id")
    requests_repo: str = spec(format="repo_id")
    worker: str = spec(format="name")


@_shape
class Record:
    """One (model, kappa) run on one benchmark revision."""

    schema_version: int = spec(enum=READ_VERSIONS, doc=f"the record's schema version; written as {SCHEMA_VERSION}")
    benchmark: Benchmark = spec()
    model: Model = spec()
    kappa: Kappa = spec()
    num_levels: int = spec(range=(2, MAX_LEVELS), column="num_levels")
    severity_rule: str = spec(
        format="rule_name",
        absent_in_older=True,
        unset_absent=True,
        column="severity_rule",
        doc=f"the rule the levels' windows start by (docs/method.md section 3): {rules_described()}; absent from "
        f"records made before it and reported results, which used {CANONICAL_SEVERITY_RULE}",
    )
    levels: list[Level] = spec(items=(2, MAX_LEVELS))
    id: IdMetrics = spec()
    summary: Summary = spec()
    metric_definitions: dict[str, str] = spec(keys=("ood_auroc",))
    metrics: dict | None = spec(
        optional=True,
        doc="optional: what a board that does not know them needs to show the metrics the record holds that were "
        "added without a schema version (a plugin's, named x_<plugin>_<name>; a later build's): per name its scope "
        "(level, id, summary), label and higher_is_better; their definitions are in metric_definitions; absent where "
        "the record holds none",
    )
    seed: int | None = spec(range=SEEDS, reported=True, column="seed")
    order_seed: int | None = spec(
        range=SEEDS,
        optional=True,
        doc="optional: the seed of the secret order the harness streamed the images in (drawn per run; a rerun given "
        "it streams the same batches); absent from records made before it existed and from reported results",
    )
    order_seed_drawn: bool | None = spec(
        optional=True,
        doc="optional: true when the harness drew the order seed itself, a secret order nobody knew before the run "
        "(the worker's runs, and any run without --order-seed), false when it was given (a rerun that reproduces a "
        "record's batches, which verifies nothing); only a drawn seed's records can be verified; absent from records "
        "made before it",
    )
    harness_version: str | None = spec(reported=True, column="harness_version")
    created: str | None = spec(format="date-time", reported=True, column="created")
    timings: dict | None = spec(reported=True)
    provenance: str = spec(
        enum=PROVENANCES,
        column="provenance",
        doc="harness: computed by cood-bench, every field required; paper: reported by a publication, unreported "
        "metrics, hashes and run details may be null",
    )
    per_class: PerClass | None = spec(
        optional=True,
        doc="optional: the per-OOD-class drill-down (the validator also checks levels == num_levels, quantiles not "
        "decreasing, the hardest classes in order within the level's range)",
    )
    per_image: PerImage | None = spec(
        optional=True,
        doc="optional: the run's per-image scores, a Parquet file of one row per public image of the record's splits "
        "(docs/leaderboard.md, Per-image scores), named by its path, sha256 and row count (the store checks all three "
        "at add); absent from published results and records made before it",
    )
    intervals: Intervals | None = spec(
        optional=True,
        doc="optional: the confidence and methods of the intervals whose ends (<metric>_low, <metric>_high) the "
        "levels, id and summary hold; absent from published results and records made before intervals",
    )
    private: PrivateCheck | None = spec(
        optional=True,
        doc="optional: the levels on the benchmark's private test images, where the run had them (the worker's runs "
        "on a benchmark with a private part); absent: not checked on private images",
    )
    verification: Verification | None = spec(
        optional=True,
        doc="optional: present only on records the leaderboard's own worker produced from a request (the store "
        "refuses it on records added by hand, which are self-reported)",
    )


@dataclass(frozen=True)
class Field:
    """A declared field, its annotation resolved: ``kind`` is the type without None (a class, or ``list``/``dict``),
    ``item`` a list's item type or a typed dict's value type; ``part``: ``kind`` is a record part, ``parts``: a list
    of them."""

    name: str
    kind: type
    item: type | None
    nullable: bool
    meta: dict
    part: bool
    parts: bool


def shape_fields(cls: type) -> tuple[Field, ...]:
    """The fields of a record part, in record order; resolved once per set of :data:`PARTS`, so a part replaced
    there is seen by the parts that name it (the metric parts are rebuilt when a metric is registered)."""
    if generation() != _BUILT_FOR[0]:
        _BUILT_FOR[0] = generation()
        _metric_parts()
    return _resolved(cls, tuple(PARTS.values()))


@functools.cache
def _resolved(cls: type, parts: tuple[type, ...]) -> tuple[Field, ...]:  # parts: only the cache key
    hints = typing.get_type_hints(cls, localns=PARTS)
    out = []
    for f in dataclasses.fields(cls):
        hint, nullable = hints[f.name], False
        if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
            members = [a for a in typing.get_args(hint) if a is not type(None)]
            hint, nullable = members[0], True
        args = typing.get_args(hint)
        kind = typing.get_origin(hint) or hint
        item = args[-1] if args else None
        numeric = kind in (int, float) or (kind is list and item in (int, float))
        if numeric and not (f.metadata["range"] or f.metadata["enum"]):
            raise TypeError(f"{cls.__name__}.{f.name}: a number field needs a range (or an enum)")
        out.append(Field(f.name, kind, item, nullable, dict(f.metadata), is_part(kind), kind is list and is_part(item)))
    return tuple(out)


def metric_keys(scope: str) -> set[str]:
    """The keys of the part that holds the registered metrics of ``scope`` (``level``, ``id``, ``summary``), as the
    registry makes them now."""
    shape_fields(PARTS["Record"])  # rebuilds the metric parts where a metric was registered since
    return {f.name for f in shape_fields(PARTS[_METRIC_PARTS[scope]])}


def is_part(kind) -> bool:
    return dataclasses.is_dataclass(kind)


def required_keys(cls: type) -> tuple[str, ...]:
    """The keys every record holds (not the optional parts, nor the fields older records may lack)."""
    return tuple(f.name for f in shape_fields(cls) if not f.meta["optional"] and not f.meta["absent_in_older"])


def older_keys(cls: type) -> tuple[str, ...]:
    """The keys a record always writes but one made before they existed may lack."""
    return tuple(f.name for f in shape_fields(cls) if f.meta["absent_in_older"])


def optional_keys(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in shape_fields(cls) if f.meta["optional"])


def make_record(**parts) -> dict:
    """The one way to build a record: its parts as plain values (nested parts as dicts, keys exactly the fields; a
    nullable field left out is null), ``schema_version`` and ``num_levels`` filled in. Returns the record's JSON object,
    keys in field order, optional parts left out when None; the metrics it holds that a board may not know described
    (:func:`described_metrics`)."""
    filled = {"schema_version": SCHEMA_VERSION, "num_levels": len(parts["levels"]), **parts}
    filled.setdefault("metrics", described_metrics(parts))
    return _to_json(_build(Record, filled))


def described_metrics(parts: dict) -> dict | None:
    """What a record says of the metrics it holds that were added without a schema version after
    :data:`KNOWN_OPTIONAL` (a plugin's, a later release's), so that a board without them shows them: ``{name: {scope,
    label, higher_is_better}}``; None for none (every record of the built-in metrics today)."""
    held = {
        "level": {key for level in parts.get("levels") or () for key in level},
        "id": set(parts.get("id") or ()),
        "summary": set(parts.get("summary") or ()),
    }
    described = {
        m.name: {"scope": m.scope, "label": m.label, "higher_is_better": m.higher_is_better}
        for m in registered()
        if m.since is None and m.name not in KNOWN_OPTIONAL and m.name in held[m.scope]
    }
    return described or None


_UNSET = object()  # an unset_absent field not given: left out


def _build(cls: type, data: dict):
    fields = shape_fields(cls)
    unknown = sorted(set(data) - {f.name for f in fields})
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {unknown[0]!r}")
    values = {}
    for f in fields:
        if f.name not in data:
            if f.meta["unset_absent"]:
                values[f.name] = _UNSET
            elif not f.nullable:
                raise TypeError(f"{cls.__name__} needs {f.name!r}")
            else:
                values[f.name] = None
        elif f.part and data[f.name] is not None:
            values[f.name] = _build(f.kind, data[f.name])
        elif f.parts:
            values[f.name] = [_build(f.item, item) for item in data[f.name]]
        else:
            values[f.name] = data[f.name]
    return cls(**values)


def _to_json(value):
    if value is None or isinstance(value, (str, int, float)):
        return value
    if isinstance(value, list):
        return [_to_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_json(v) for k, v in value.items()}
    if is_part(type(value)):
        return {
            f.name: _to_json(getattr(value, f.name))
            for f in shape_fields(type(value))
            if not (f.meta["optional"] and getattr(value, f.name) is None) and getattr(value, f.name) is not _UNSET
        }
    return value


def columns() -> dict[str, tuple[tuple[str, ...], Field]]:
    """The table columns taken straight from a record: column name -> (the field's path, the field)."""
    out = {}

    def walk(cls, path):
        for f in shape_fields(cls):
            if f.meta["column"]:
                out[f.meta["column"]] = ((*path, f.name), f)
            elif f.part:
                walk(f.kind, (*path, f.name))

    walk(Record, ())
    return out


def json_schema() -> dict:
    """The record's JSON Schema (draft 2020-12), derived from the parts; the validator is the reference."""
    conditional = _harness_only(Record)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://github.com/cood-bench/cood-bench/leaderboard/record.schema.json",
        "title": f"cood-bench result record, schema version {SCHEMA_VERSION}",
        "description": "One (model, kappa) run on one benchmark revision. leaderboard.schema.validate_record is the "
        "reference; it also checks what JSON Schema cannot say: len(levels) == num_levels, level i has "
        "level == i, percentiles rise, level scores do not decrease, summary.mean_ood_auroc is the mean "
        "of the levels' ood_auroc, names are at most 200 UTF-8 bytes, created parses as ISO-8601. "
        "Generated from leaderboard/record.py (python -m leaderboard.record).",
        **_object_schema(Record),
        "allOf": [
            {
                "if": {"properties": {"provenance": {"const": "harness"}}, "required": ["provenance"]},
                "then": conditional,
            },
            *_since_rules(),
        ],
        "$defs": {
            "sha256": {"type": "string", "pattern": FORMATS["sha256"][0].pattern},
            "name": {
                "type": "string",
                "minLength": 1,
                "pattern": _NAME_CHARS,
                "not": {"enum": list(NOT_NAMES)},
                "description": f"at most {MAX_NAME_BYTES} UTF-8 bytes (the validator checks bytes), no path "
                "separator or control character, not '.' or '..'",
            },
            "relative_path": {"type": "string", "pattern": FORMATS["relative_path"][0].pattern},
            "open_number": {"type": "number", "minimum": OPEN[0], "maximum": OPEN[1]},
            "scalar": {
                "anyOf": [{"type": "string"}, {"type": "boolean"}, {"type": "null"}, {"$ref": "#/$defs/open_number"}]
            },
            "open": {
                "anyOf": [
                    {"$ref": "#/$defs/scalar"},
                    {"type": "array", "items": {"$ref": "#/$defs/open"}},
                    {"type": "object", "additionalProperties": {"$ref": "#/$defs/open"}},
                ],
                "description": "a value of an open object (preprocessing, timings): any JSON, its numbers in an "
                "int64's range",
            },
            "params0": _params_schema({"$ref": "#/$defs/scalar"}),
            "params1": _params_schema({"anyOf": [{"$ref": "#/$defs/scalar"}, {"$ref": "#/$defs/params0"}]}),
            "params2": {
                **_params_schema({"anyOf": [{"$ref": "#/$defs/scalar"}, {"$ref": "#/$defs/params1"}]}),
                "description": "a kappa's parameters: scalars, or objects of them two levels deep at most "
                "(a fitted kappa's fit: split, size, seed, sample)",
            },
        },
    }


def _since_rules() -> list[dict]:
    """A metric added in a schema version: required in the records of that version and later."""
    rules = []
    for version in sorted({m.since for m in registered() if m.since and m.since > 1}):
        added = [m for m in registered() if m.since == version]
        then = {}
        for scope, key in (("level", "levels"), ("id", "id"), ("summary", "summary")):
            names = [m.name for m in added if m.scope == scope]
            if names:
                then[key] = {"items": {"required": names}} if scope == "level" else {"required": names}
        rules.append(
            {
                "if": {"properties": {"schema_version": {"minimum": version}}, "required": ["schema_version"]},
                "then": {"properties": then},
            }
        )
    return rules


def _params_schema(values: dict) -> dict:
    return {"type": "object", "propertyNames": {"$ref": "#/$defs/name"}, "additionalProperties": values}


def _object_schema(cls: type) -> dict:
    fields = shape_fields(cls)
    return {
        "type": "object",
        "additionalProperties": False,
        "required": list(required_keys(cls)),
        "properties": {f.name: _field_schema(f) for f in fields},
    }


def _field_schema(f: Field) -> dict:
    schema = _value_schema(f)
    if f.nullable and not f.meta["optional"]:
        schema = {"anyOf": [schema, {"type": "null"}]}
    return {**({"description": f.meta["doc"]} if f.meta["doc"] else {}), **schema}


def _value_schema(f: Field, kind=None) -> dict:
    kind, meta = kind or f.kind, f.meta
    if meta["const"] is not None:
        return {"const": meta["const"]}
    if meta["enum"]:
        return {"enum": list(meta["enum"])}
    if is_part(kind):
        return _object_schema(kind)
    if kind is list:
        low, high = meta["items"] or (None, None)
        return {
            "type": "array",
            **({"minItems": low} if low else {}),
            **({"maxItems": high} if high else {}),
            "items": _value_schema(f, f.item),
        }
    if kind is dict:
        if meta["format"] == "params":
            return {"$ref": "#/$defs/params2"}
        schema = {"type": "object"} if f.item else {"type": "object", "additionalProperties": {"$ref": "#/$defs/open"}}
        if meta["keys"]:
            schema.update(required=list(meta["keys"]), additionalProperties={"type": "string", "minLength": 1})
        return schema
    if kind is str:
        return _string_schema(meta["format"])
    if kind is bool:
        return {"type": "boolean"}
    low, high = meta["range"]
    return {"type": "integer" if kind is int else "number", "minimum": low, "maximum": high}


def _string_schema(format: str | None) -> dict:
    if format in ("name", "sha256", "relative_path"):
        return {"$ref": f"#/$defs/{format}"}
    if format == "kappa_name":
        return {"allOf": [{"$ref": "#/$defs/name"}, {"pattern": FORMATS[format][0].pattern}]}
    if format == "date-time":
        return {"type": "string", "minLength": 1, "format": "date-time"}
    if format is not None:
        return {"type": "string", "pattern": FORMATS[format][0].pattern}
    return {"type": "string", "minLength": 1}


def _harness_only(cls: type) -> dict:
    """What a harness record must fill that a paper record may leave null: the non-null schemas, nested as in the
    record (an empty dict when ``cls`` has none)."""
    properties = {}
    for f in shape_fields(cls):
        if f.meta["reported"]:
            full = _value_schema(f)
            properties[f.name] = full if "$ref" in full else {"type": _json_type(f.kind)}
        elif f.part and (inner := _harness_only(f.kind)):
            properties[f.name] = inner
        elif f.parts and (inner := _harness_only(f.item)):
            properties[f.name] = {"items": inner}
    return {"properties": properties} if properties else {}


def _json_type(kind: type) -> str:
    return {bool: "boolean", int: "integer", float: "number", str: "string", dict: "object", list: "array"}[kind]


def schema_text() -> str:
    """The committed file's exact text."""
    return json.dumps(json_schema(), indent=1, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    SCHEMA_FILE.write_text(schema_text())
    print(f"wrote {SCHEMA_FILE.name}")
