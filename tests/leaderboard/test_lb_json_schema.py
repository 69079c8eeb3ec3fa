"""The record format as a JSON Schema file inside the package, generated from leaderboard.record and checked against
the validator: what one accepts the other accepts, and every rejection the schema can express it makes too."""

from __future__ import annotations

import copy
import json
import math
from importlib.resources import files

import jsonschema
import pytest

from leaderboard import record as shape
from leaderboard import schema as validator
from leaderboard.errors import LeaderboardError
from leaderboard.paper import paper_records

SCHEMA = json.loads(files("leaderboard").joinpath("record.schema.json").read_text())
CHECK = jsonschema.Draft202012Validator(SCHEMA)
# what JSON Schema cannot express (the validator's cross-field and non-JSON checks)
VALIDATOR_ONLY = {
    "levels.4.level",
    "levels.4.percentile=0.2",
    "levels.5.level_score",
    "num_levels=12",
    "summary.mean_ood_auroc",
    "created",
    "kappa.params",
    "levels.3.ood_auroc=nan",
    "id.avg_conf",
}


def test_the_schema_is_a_valid_draft_2020_12_schema():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["properties"]["schema_version"]["enum"] == [1, 2] == list(shape.READ_VERSIONS)
    assert shape.SCHEMA_VERSION == 2


def test_the_committed_file_is_the_generated_one():
    assert files("leaderboard").joinpath("record.schema.json").read_text() == shape.schema_text(), (
        "record.schema.json is stale: run python -m leaderboard.record"
    )
    assert SCHEMA["properties"]["provenance"]["enum"] == ["harness", "paper"]
    assert SCHEMA["properties"]["model"]["required"] == [
        "name",
        "source",
        "file_sha256",
        "weights_sha256",
        "num_parameters",
        "preprocessing",
    ]
    assert SCHEMA["allOf"][0]["then"]["properties"]["model"] == {
        "properties": {"weights_sha256": {"$ref": "#/$defs/sha256"}, "num_parameters": {"type": "integer"}}
    }


def test_valid_records_pass_both(make_record, paper_table):
    fitted = make_record(
        kappa="knn", params={"k": 50, "fit": {"split": "id_fit", "size": 10, "sample": {"per_class": 1}}}
    )
    fetched = make_record()  # pretrained weights fetched from the Hub name their repo, commit and file
    fetched["model"]["hub_weights"] = {"repo": "timm/resnet50.a1_in1k", "revision": "0f" * 20, "file": "w.safetensors"}
    torchvision = make_record()  # a torchvision: target's weights entry, through torch.hub's cache
    torchvision["model"]["torchvision_weights"] = {
        "entry": "ResNet18_Weights.IMAGENET1K_V1",
        "url": "https://download.pytorch.org/models/resnet18-f37072fd.pth",
    }
    for record in [make_record(), fitted, fetched, torchvision, *paper_records(paper_table)[:50]]:
        validator.validate_record(record)
        CHECK.validate(record)


def _key(path, value) -> set[str]:
    return {path, f"{path}={value!r}" if not (isinstance(value, float) and math.isnan(value)) else f"{path}=nan"}


def test_invalid_records_fail_both(make_record, set_field, rejection):
    path, value, _ = rejection
    record = make_record()
    set_field(record, path, value)
    with pytest.raises(LeaderboardError):
        validator.validate_record(record)
    if _key(path, value) & VALIDATOR_ONLY:
        return
    assert not CHECK.is_valid(json.loads(json.dumps(record))), f"the schema accepts {path}={value!r}"


def test_a_paper_record_may_leave_out_what_a_harness_record_may_not(paper_table):
    record = copy.deepcopy(paper_records(paper_table)[0])
    assert record["model"]["weights_sha256"] is None
    CHECK.validate(record)
    record["provenance"] = "harness"
    assert not CHECK.is_valid(record)
    with pytest.raises(LeaderboardError):
        validator.validate_record(record)
