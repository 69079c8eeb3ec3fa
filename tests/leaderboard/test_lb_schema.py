import copy
import math
import re

import pytest

from leaderboard.errors import LeaderboardError
from leaderboard.schema import entry_id, flags, kappa_label, validate_record


def test_valid_record_passes(make_record):
    validate_record(make_record())


def _set(record, path, value):
    target = record
    keys = path.split(".")
    for key in keys[:-1]:
        target = target[int(key)] if isinstance(target, list) else target[key]
    last = keys[-1]
    if value is _DELETE:
        del target[last]
    elif isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value


class _Delete:
    """Delete the field (a stable repr: parallel workers must collect the same test ids)."""

    def __repr__(self) -> str:
        return "DELETE"


_DELETE = _Delete()

REJECTIONS = [
    ("schema_version", 2, "schema_version: unsupported 2"),
    ("model", _DELETE, "record: missing field 'model'"),
    ("extra", 1, "record: unknown field 'extra'"),
    ("provenance", "self-reported", "provenance: must be one of harness, paper"),
    ("benchmark.manifest_sha256", "XYZ", "benchmark.manifest_sha256: not a lowercase 64-digit hex sha256"),
    ("benchmark.manifest_sha256", None, "benchmark.manifest_sha256: must be a non-empty string"),
    ("model.weights_sha256", None, "model.weights_sha256: must be a non-empty string"),
    ("model.name", "", "model.name: must be a non-empty string"),
    ("model.num_parameters", 1.5, "model.num_parameters: must be an integer, got float"),
    ("kappa.name", "soft max", "kappa.name: not a kappa name"),
    ("kappa.params", {"temperature": math.inf}, "kappa.params.temperature: must be a finite number, got inf"),
    ("levels.3.ood_auroc", math.nan, "levels[3].ood_auroc: must be a finite number, got nan"),
    ("levels.3.ood_auroc", 1.2, "levels[3].ood_auroc: out of range [0, 1]: 1.2"),
    ("levels.0.fpr_at_95_tpr", -0.1, "levels[0].fpr_at_95_tpr: out of range [0, 1]: -0.1"),
    ("levels.0.aupr_in", None, "levels[0].aupr_in: must be a number, got null"),
    ("levels.2.ood_avg_conf", "0.5", "levels[2].ood_avg_conf: must be a number, got str"),
    ("levels.2.ood_avg_conf", True, "levels[2].ood_avg_conf: must be a number, got bool"),
    ("levels.4.level", 5, "levels[4].level: must be 4, got 5"),
    ("levels.4.percentile", 0.5, "levels[4].percentile: must be 4/10, got 0.5"),
    ("levels.5.level_score", -5.0, "levels[5].level_score: decreases (-5.0 after"),
    ("levels.5.num_ood", 0, "levels[5].num_ood: must be >= 1, got 0"),
    ("levels.5.surprise", 1, "levels[5]: unknown field 'surprise'"),
    ("num_levels", 12, "levels: has 11 entries but num_levels is 12"),
    ("num_levels", 1, "num_levels: must be >= 2, got 1"),
    ("levels", {}, "levels: must be a list, got dict"),
    ("summary.mean_ood_auroc", 0.5, "summary.mean_ood_auroc: is 0.5 but the levels' ood_auroc average 0.85"),
    ("id.acc", 1.01, "id.acc: out of range [0, 1]: 1.01"),
    ("id.avg_conf", math.inf, "id.avg_conf: must be a finite number, got inf"),
    ("id.num", 0, "id.num: must be >= 1, got 0"),
    ("metric_definitions", {"aupr": "x"}, "metric_definitions: missing field 'ood_auroc'"),
    ("seed", None, "seed: must be an integer, got null"),
    ("created", "yesterday", "created: not an ISO-8601 date-time: 'yesterday'"),
    ("timings", None, "timings: must be an object, got NoneType"),
    ("verification", {"status": "self-reported", "request": "0" * 12, "requests_repo": "o/r", "worker": "w"},
     "verification.status: must be 'verified'"),
    ("verification", {"status": "verified", "request": "r1", "requests_repo": "o/r", "worker": "w"},
     "verification.request: not a request id (12 hex digits)"),
    ("verification", {"status": "verified", "request": "0" * 12, "requests_repo": "requests", "worker": "w"},
     "verification.requests_repo: not a Hub repo id (owner/name)"),
    ("verification", {"status": "verified", "request": "0" * 12, "requests_repo": "o/r"},
     "verification: missing field 'worker'"),
]


@pytest.mark.parametrize(("path", "value", "message"), REJECTIONS, ids=[f"{p}={v!r}" for p, v, _ in REJECTIONS])
def test_rejections_name_the_problem(make_record, path, value, message):
    record = make_record()
    _set(record, path, value)
    with pytest.raises(LeaderboardError) as info:
        validate_record(record)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_not_an_object_is_rejected():
    with pytest.raises(LeaderboardError, match="record: must be an object, got list"):
        validate_record([1, 2])


def test_unbounded_kappa_values_and_null_id_auroc_are_fine(make_record):
    record = make_record(kappa="max_logit")
    record["id"]["auroc"] = None
    record["id"]["avg_conf"] = 37.5
    for level in record["levels"]:
        level["ood_avg_conf"] = -120.0 + level["level"]
        level["level_score"] = 10.0 * level["level"]
    validate_record(record)


def test_paper_provenance_allows_unreported_metrics(make_record):
    record = make_record()
    record["provenance"] = "paper"
    record["benchmark"]["manifest_sha256"] = record["model"]["weights_sha256"] = None
    record["benchmark"]["num_ood_classes"] = record["model"]["num_parameters"] = None
    record["seed"] = record["harness_version"] = record["created"] = record["timings"] = None
    for level in record["levels"]:
        level.update(level_score=None, fpr_at_95_tpr=None, aupr_in=None, aupr_out=None, num_id=None, num_ood=None)
    validate_record(record)
    record["levels"][0]["ood_auroc"] = None  # the primary metric is never optional
    with pytest.raises(LeaderboardError, match=r"levels\[0\].ood_auroc: must be a number, got null"):
        validate_record(record)


def test_entry_identity(make_record):
    base = make_record(kappa="odin", params={"temperature": 2, "epsilon": 1e-5})
    same = copy.deepcopy(base)
    same["model"]["name"] = "renamed"            # identity is the weights hash, not the name
    same["kappa"]["params"] = {"epsilon": 1e-5, "temperature": 2.0}
    same["levels"][0]["ood_auroc"] = 0.5         # nor the numbers
    assert entry_id(same) == entry_id(base)
    assert re.fullmatch(r"[0-9a-f]{16}", entry_id(base))
    other_params = make_record(kappa="odin", params={"temperature": 1000, "epsilon": 0.0014})
    other_weights = make_record(kappa="odin", params={"temperature": 2, "epsilon": 1e-5}, weights="33" * 32)
    other_bench = copy.deepcopy(base)
    other_bench["benchmark"]["manifest_sha256"] = "cd" * 32
    assert len({entry_id(r) for r in (base, other_params, other_weights, other_bench)}) == 4


def test_kappa_label():
    assert kappa_label("softmax", {}) == "softmax"
    assert kappa_label("odin", {"temperature": 2, "epsilon": 1e-05}) == "odin(epsilon=1e-05,temperature=2)"


def test_flags_near_chance(make_record):
    assert flags(make_record(acc=0.81)) == []
    assert flags(make_record(acc=0.03)) == ["id-acc near chance (0.0300, chance 0.0278)"]


def test_a_fitted_kappa_carries_its_fit_in_the_params(make_record):
    fit = {"split": "id_fit", "size": 100000, "seed": 0, "sample": {"per_class": 100, "seed": 0}}
    record = make_record(kappa="knn", params={"k": 50, "normalize": True, "fit": fit})
    validate_record(record)
    assert kappa_label("knn", record["kappa"]["params"]) == "knn(k=50,normalize=True)"
    other_fit = make_record(kappa="knn", params={"k": 50, "normalize": True, "fit": {**fit, "size": 5000}})
    assert entry_id(other_fit) != entry_id(record)  # another fit set is another entry
    same = make_record(kappa="knn", params={"k": 50.0, "normalize": True, "fit": {**fit, "size": 100000.0}})
    assert entry_id(same) == entry_id(record)
    for bad, message in (({"fit": {"split": [1]}}, r"kappa.params.fit.split: must be a number, got list"),
                         ({"a": {"b": {"c": {"d": 1}}}}, r"kappa.params.a.b.c: must be a number, got dict"),
                         ({"fit": {"s/plit": 1}}, r"kappa.params.fit \(a key\): contains a path separator")):
        with pytest.raises(LeaderboardError, match=message):
            validate_record(make_record(kappa="knn", params=bad))
