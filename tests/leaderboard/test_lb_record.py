"""The record's shape declared once (leaderboard/record.py): the one constructor, and a new field picked up by the JSON
Schema, the validator, the table and both record producers with no other edit.

Adding a record field touches three files: its declaration in ``leaderboard/record.py``, the regenerated
``leaderboard/record.schema.json`` (``python -m leaderboard.record``), and the code that measures it. A metric is less:
its declaration in the metric registry (tests/leaderboard/test_lb_metrics.py).
"""

from __future__ import annotations

import dataclasses
import json
import re

import jsonschema
import pytest

from leaderboard import record as shape
from leaderboard.errors import LeaderboardError
from leaderboard.paper import paper_records
from leaderboard.schema import validate_record
from leaderboard.table import BACK, build_table, record_row

DERIVED = ("schema_version", "num_levels")


def _parts(record: dict) -> dict:
    return {k: v for k, v in record.items() if k not in DERIVED}


def test_the_constructor_gives_the_record_in_field_order(make_record):
    expected = make_record()
    built = shape.make_record(**_parts(expected))
    assert json.dumps(built, indent=1) == json.dumps(expected, indent=1)  # same keys, same order, same values
    given = [f.name for f in shape.shape_fields(shape.Record) if not f.meta["optional"] and not f.meta["unset_absent"]]
    assert list(built) == given  # a field left out when not given (the severity rule) is left out
    assert shape.make_record(**_parts(expected), verification=None) == expected  # an absent optional part is left out
    with pytest.raises(TypeError, match="IdMetrics has no field 'mce'"):
        shape.make_record(**{**_parts(expected), "id": {**expected["id"], "mce": 0.1}})
    with pytest.raises(TypeError, match="Level needs 'ood_auroc'"):
        shape.make_record(**{**_parts(expected), "levels": [{"level": 0, "percentile": 0.0}]})


def test_a_new_field_needs_only_its_declaration(make_record, paper_table, monkeypatch):
    with_mce = dataclasses.make_dataclass(
        "IdMetrics",
        [("mce", float | None, shape.spec(unit=True, reported=True, column="id_mce"))],
        bases=(shape.IdMetrics,),
        frozen=True,
        kw_only=True,
    )
    base = make_record()  # made before the field exists
    monkeypatch.setitem(shape.PARTS, "IdMetrics", with_mce)
    record = shape.make_record(**{**_parts(base), "id": {**base["id"], "mce": 0.04}})
    assert list(record["id"]) == [*base["id"], "mce"]  # after the fields declared before it

    schema = shape.json_schema()  # the schema
    assert "mce" in schema["properties"]["id"]["required"]
    assert schema["properties"]["id"]["properties"]["mce"] == {
        "anyOf": [{"type": "number", "minimum": 0, "maximum": 1}, {"type": "null"}]
    }
    assert schema["allOf"][0]["then"]["properties"]["id"] == {"properties": {"mce": {"type": "number"}}}
    check = jsonschema.Draft202012Validator(schema)
    check.validate(record)
    assert not check.is_valid({**record, "id": {**record["id"], "mce": 1.5}})

    validate_record(record)  # the validator
    for mce, message in ((1.5, "id.mce: out of range [0, 1]: 1.5"), (None, "id.mce: must be a number, got null")):
        with pytest.raises(LeaderboardError, match=f"^{re.escape(message)}$"):
            validate_record({**record, "id": {**record["id"], "mce": mce}})
    with pytest.raises(LeaderboardError, match="^id: missing field 'mce'$"):
        validate_record(base)

    paper = paper_records(paper_table.head(11))[0]  # the paper import: not reported, so null
    assert paper["id"]["mce"] is None
    validate_record(paper)

    row = record_row(record, 1, "records/a.json", "00" * 32)  # the table
    table = build_table([row], record["num_levels"])
    assert row["id_mce"] == 0.04
    columns = list(table.columns)
    assert columns[-1] == "id_mce" and columns.index(BACK[-1]) < columns.index("id_aurc") < len(columns) - 1
    assert table["id_mce"].dtype == "float64" and table["id_mce"].tolist() == [0.04]


def test_the_harness_passes_a_new_id_metric_through(make_record, monkeypatch):
    outputs = pytest.importorskip("harness.outputs")
    from harness.method.evaluation import KappaResult

    with_mce = dataclasses.make_dataclass(
        "IdMetrics", [("mce", float, shape.spec(unit=True))], bases=(shape.IdMetrics,), frozen=True, kw_only=True
    )
    base = make_record()  # made before the field exists
    monkeypatch.setitem(shape.PARTS, "IdMetrics", with_mce)
    result = KappaResult("softmax", None, base["levels"], {**base["id"], "mce": 0.04})
    record = outputs.record(
        result,
        benchmark=base["benchmark"],
        model=base["model"],
        kappa_params={},
        probability=True,
        seed=0,
        version="0.1.0",
        created=base["created"],
        timings=base["timings"],
        metric_definitions=base["metric_definitions"],
    )
    assert record["id"]["mce"] == 0.04
    validate_record(record)
