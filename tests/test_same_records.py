"""``benchmarks/same_records.py``: its comparison masks the creation time, the durations and the measured start-up in
the memory limit of a record, and nothing else."""

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "same_records.py"


@pytest.fixture(scope="module")
def same_records():
    spec = importlib.util.spec_from_file_location("same_records", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write(folder: Path, name: str, text: str) -> None:
    (folder / name).parent.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)


def test_only_the_named_fields_are_masked(same_records, tmp_path):
    before, after = tmp_path / "before", tmp_path / "after"
    record = {
        "created": "2026-12-05T02:52:40+00:00",
        "id": {"acc": 0.98},
        "timings": {
            "total_s": 327.1,
            "id_test_s": 2.9,
            "id_test_images": 1800,
            "isolation": {"limits": {"memory": "RLIMIT_AS start-up + 1709260800, /tmp 1073741824"}},
        },
    }
    _write(before, "records/softmax.json", same_records.canonical(record))
    measured = {"limits": {"memory": "RLIMIT_AS start-up + 1709289472, /tmp 1073741824"}}
    later = {
        **record,
        "created": "2026-12-05T02:58:30+00:00",
        "timings": {**record["timings"], "total_s": 219.3, "isolation": measured},
    }
    _write(after, "records/softmax.json", same_records.canonical(later))
    assert same_records.compare(before, after, "records/softmax.json") == "same"

    for changed, where in (
        ({**later, "id": {"acc": 0.97}}, "id.acc"),
        ({**later, "timings": {**later["timings"], "id_test_images": 1799}}, "timings.id_test_images"),
        (  # the rest of the memory limit's text is compared
            {**later, "timings": {**later["timings"], "isolation": {"limits": {"memory": "RLIMIT_AS start-up + 1"}}}},
            "timings.isolation.limits.memory",
        ),
    ):
        _write(after, "records/softmax.json", same_records.canonical(changed))
        assert same_records.compare(before, after, "records/softmax.json") == f"differs  at {where}"
    _write(after, "records/softmax.json", json.dumps(later, indent=2, sort_keys=True) + "\n")
    assert same_records.compare(before, after, "records/softmax.json").startswith("differs (not in the canonical form")

    _write(before, "per_level.csv", "level,ood-auroc\n0,0.95\n")
    _write(after, "per_level.csv", "level,ood-auroc\n0,0.96\n")
    _write(after, "severity_curves.png", "png")
    assert same_records.compare(before, after, "per_level.csv") == "differs"
    assert same_records.compare(before, after, "severity_curves.png") == "only in after"
