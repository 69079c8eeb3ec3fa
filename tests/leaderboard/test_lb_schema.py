import copy
import re

import pytest

from leaderboard.errors import LeaderboardError
from leaderboard.schema import entry_id, flags, kappa_label, private_status, validate_record


def test_valid_record_passes(make_record):
    validate_record(make_record())


def test_rejections_name_the_problem(make_record, set_field, rejection):
    path, value, message = rejection
    record = make_record()
    set_field(record, path, value)
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


def test_any_severity_rule_passes_the_level_checks(make_record):
    record = make_record()
    for level, percentile in zip(record["levels"], [0.0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.45, 0.6, 0.75, 0.9, 0.97]):
        level["percentile"] = percentile  # not l / (L - 1): another rule's spacing
    validate_record(record)
    record["levels"][6]["percentile"] = 0.3  # a tie: two levels at one place
    with pytest.raises(LeaderboardError, match=r"^levels\[6\].percentile: does not rise \(0.3 after 0.3\)"):
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
    same["model"]["name"] = "renamed"  # identity is the weights hash, not the name
    same["kappa"]["params"] = {"epsilon": 1e-5, "temperature": 2.0}
    same["levels"][0]["ood_auroc"] = 0.5  # nor the numbers
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
    for bad, message in (
        ({"fit": {"split": [1]}}, r"kappa.params.fit.split: must be a number, got list"),
        ({"a": {"b": {"c": {"d": 1}}}}, r"kappa.params.a.b.c: must be a number, got dict"),
        ({"fit": {"s/plit": 1}}, r"kappa.params.fit \(a key\): contains a path separator"),
    ):
        with pytest.raises(LeaderboardError, match=message):
            validate_record(make_record(kappa="knn", params=bad))


def test_a_verified_record_needs_an_order_seed_the_harness_drew(make_record):
    record = make_record()
    record["verification"] = {"status": "verified", "request": "0123456789ab", "requests_repo": "o/q", "worker": "w"}
    record["order_seed_drawn"] = False
    with pytest.raises(LeaderboardError, match="order seed must have been drawn by the harness"):
        validate_record(record)
    for drawn in (True, None):  # None: a record made before the field (its worker drew every seed)
        record["order_seed_drawn"] = drawn
        validate_record(record)


def test_private_scores_below_the_public_ones_are_flagged(make_record):
    record = make_record()
    assert private_status(record) == "not checked"
    private = {
        "manifest_sha256": "a" * 64,
        "num_id": 144,
        "num_ood": 192,
        "mean_ood_auroc": 0.5,
        "level_ood_auroc": [0.5] * len(record["levels"]),
        "difference": 0.4,
        "z": 9.0,
        "p_value": 0.0,
        "alpha": 0.01,
        "reproduced": False,
    }
    record["private"] = private
    validate_record(record)
    assert private_status(record) == "not reproduced"
    assert flags(record) == [
        f"scores not reproduced on private images (mean ood-auroc {record['summary']['mean_ood_auroc']:.4f} public, "
        "0.5000 private, p = 0)"
    ]
    record["private"] = {**private, "reproduced": True, "p_value": 0.4}
    assert private_status(record) == "reproduced" and flags(record) == []
