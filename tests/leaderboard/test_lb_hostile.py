"""A board no record can break: every number of a record has a declared range, checked at ``add`` in one line naming
the field and its range; a refused record changes nothing on disk, and the board stays readable (``show``, ``site``,
the next ``add``)."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lb_boards import drilldown_record
from lb_records import record, with_intervals
from leaderboard import record as shape
from leaderboard import store
from leaderboard.cli import app
from leaderboard.errors import LeaderboardError
from leaderboard.schema import range_text, shown, validate_record
from leaderboard.store import add_files, add_records, current_table

INT64 = (-(2**63), 2**63 - 1)
# the ranges of the fields declared in leaderboard/record.py (the metrics' come from the registry: [0, 1] or SCORES)
DECLARED = {
    "benchmark.num_id_classes": (2, 10**7),
    "benchmark.num_ood_classes": (1, 10**7),
    "model.num_parameters": (0, 10**15),
    "model.class_subset.outputs_used": (1, 10**7),
    "model.class_subset.model_outputs": (2, 10**7),
    "num_levels": (2, 1000),
    "levels[0].level": (0, 999),
    "levels[0].percentile": (0, 1),
    "levels[0].window_percentile": (0, 1),
    "levels[0].level_score": (-1e300, 1e300),
    "levels[0].num_id": (1, 10**10),
    "levels[0].num_ood": (1, 10**10),
    "id.num": (1, 10**10),
    "seed": (0, 2**63 - 1),
    "order_seed": (0, 2**63 - 1),
    "per_class.levels[0].level": (0, 999),
    "per_class.levels[0].n_classes": (1, 10**7),
    "per_class.levels[0].ood_auroc_quantiles[0]": (0, 1),
    "per_class.levels[0].hardest[0].ood_auroc": (0, 1),
    "per_class.levels[0].hardest[0].mean_confidence": (-1e300, 1e300),
    "intervals.confidence": (0, 1),
    "private.num_id": (2, 10**10),
    "private.num_ood": (2, 10**10),
    "private.mean_ood_auroc": (0, 1),
    "private.level_ood_auroc[0]": (0, 1),
    "private.difference": (-1, 1),
    "private.z": (-40, 40),
    "private.p_value": (0, 1),
    "private.alpha": (0, 1),
}
OPEN_NUMBERS = ("model.preprocessing.size", "timings.total_s", "kappa.params.temperature")  # in open objects
HUGE = (10**30, 2**70)


def full_record(run: Path) -> dict:
    """A valid harness record holding every part a record may have (a class subset, intervals, the drill-down, the
    private check, the order seed, the optional ID metrics), its drill-down's files under ``run``."""
    rec = with_intervals(drilldown_record(run))
    rec["model"]["class_subset"] = {"source": "imagenet-1k", "outputs_used": 36, "model_outputs": 1000}
    rec["kappa"]["params"] = {"temperature": 2.0}
    rec["order_seed"], rec["order_seed_drawn"] = 1850176731202701358, True
    for level in rec["levels"]:
        level["window_percentile"] = level["percentile"]
    rec["id"].update(aurc=0.05, e_aurc=0.01, sac_95=0.9, sac_99=0.5, ece=0.02, ece_mass=0.03, nll=0.4, brier=0.1)
    rec["private"] = {
        "manifest_sha256": "cd" * 32,
        "num_id": 252,
        "num_ood": 2772,
        "mean_ood_auroc": 0.84,
        "level_ood_auroc": [0.84] * 11,
        "difference": 0.01,
        "z": 1.2,
        "p_value": 0.11,
        "alpha": 0.01,
        "reproduced": True,
    }
    validate_record(rec)
    return rec


def number_paths(value: dict, cls: type = shape.Record, path: str = "") -> dict[str, shape.Field]:
    """Every number field ``value`` holds (the first item of a list), by its path as messages name it."""
    out = {}
    for f in shape.shape_fields(cls):
        if f.name not in value or f.meta["enum"]:
            continue
        where = f"{path}.{f.name}" if path else f.name
        if f.part:
            out.update(number_paths(value[f.name], f.kind, where))
        elif f.parts:
            out.update(number_paths(value[f.name][0], f.item, f"{where}[0]"))
        elif f.kind in (int, float):
            out[where] = f
        elif f.kind is list and f.item in (int, float):
            out[f"{where}[0]"] = dataclasses.replace(f, kind=f.item)
    return out


def put(rec: dict, path: str, value) -> dict:
    """A copy of ``rec`` with ``value`` at ``path`` (``levels[0].ood_auroc``)."""
    rec = copy.deepcopy(rec)
    keys = [int(k) if k.isdigit() else k for k in path.replace("[", ".").replace("]", "").split(".")]
    target = rec
    for key in keys[:-1]:
        target = target[key]
    target[keys[-1]] = value
    return rec


def hostile(path: str, kind: type, bounds: tuple) -> list[tuple[object, str]]:
    """The values that once broke or could break a board, for a field of ``kind`` in ``bounds``, each with the one
    line the validator answers: huge integers everywhere, one past each end and -1 (a negative size) for an
    integer; infinities, NaN, 1e308 and an integer too large for a float where a float is."""
    values = [*HUGE, -1, bounds[0] - 1, bounds[1] + 1] if kind is int else [*HUGE, 10**400, 1e308, -1e308]
    out = [(v, f"{path}: out of range {range_text(bounds)}: {shown(v)}") for v in dict.fromkeys(values)]
    out = [(v, line) for v, line in out if not bounds[0] <= v <= bounds[1]]
    if kind is float:
        out += [(v, f"{path}: must be a finite number, got {v}") for v in (math.inf, -math.inf, math.nan)]
    return out


def attacks(rec: dict) -> list[tuple[str, object, str]]:
    """(path, value, the refusal) for every number of ``rec``, nested ones and those of its open objects too."""
    cases = [
        (path, value, line)
        for path, f in number_paths(rec).items()
        for value, line in hostile(path, f.kind, f.meta["range"])
    ]
    cases += [(path, value, line) for path in OPEN_NUMBERS for value, line in hostile(path, float, INT64)]
    return cases


def test_every_number_field_has_its_declared_range(tmp_path):
    paths = number_paths(full_record(tmp_path))
    assert {p: f.meta["range"] for p, f in paths.items() if p in DECLARED} == DECLARED
    metrics = {p: f for p, f in paths.items() if p not in DECLARED}  # the registry's metrics and their intervals
    assert {"levels[0].ood_auroc", "levels[0].ood_avg_conf", "id.nll", "summary.mean_ood_auroc_high"} <= set(metrics)
    assert {p: f.meta["range"] for p, f in metrics.items() if f.meta["range"] != (0, 1)} == {
        "levels[0].ood_avg_conf": (-1e300, 1e300),  # kappa values
        "id.avg_conf": (-1e300, 1e300),
        "id.nll": (-1e300, 1e300),
    }
    schema = shape.json_schema()["properties"]["model"]["properties"]["num_parameters"]["anyOf"][0]
    assert schema == {"type": "integer", "minimum": 0, "maximum": 10**15}


def test_a_number_field_without_a_range_is_refused_where_it_is_declared(monkeypatch):
    loose = dataclasses.make_dataclass(
        "IdMetrics", [("spread", float, shape.spec())], bases=(shape.IdMetrics,), frozen=True, kw_only=True
    )
    monkeypatch.setitem(shape.PARTS, "IdMetrics", loose)
    with pytest.raises(TypeError, match=r"^IdMetrics\.spread: a number field needs a range \(or an enum\)$"):
        shape.shape_fields(loose)


def test_every_hostile_number_is_refused_in_one_line_naming_its_field_and_range(tmp_path):
    rec = full_record(tmp_path)
    cases = attacks(rec)
    assert len(cases) > 400 and {path for path, _, _ in cases} >= {*DECLARED, *OPEN_NUMBERS}
    for path, value, line in cases:
        with pytest.raises(LeaderboardError) as error:
            validate_record(put(rec, path, value))
        assert str(error.value) == line


def _snapshot(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


def _ok(*args) -> str:
    result = CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_no_hostile_record_changes_the_board_and_it_stays_readable(tmp_path):
    run = tmp_path / "run"
    rec = full_record(run)
    board = tmp_path / "board"
    add_records(board, [rec], create=True, folder=run)
    before = _snapshot(board)
    path = run / "records" / "hostile.json"  # beside its drill-down's files
    path.parent.mkdir()
    for field, value, line in attacks(rec):
        path.write_text(json.dumps(put(rec, field, value)))
        with pytest.raises(LeaderboardError) as error:
            add_files(board, [path])
        assert str(error.value) == f"{path}: {line}"
    assert _snapshot(board) == before
    assert _ok("show", "-d", board).splitlines()[0].endswith("table current (unreleased): 1 entry")
    assert _ok("site", tmp_path / "site", "-d", board).startswith("wrote 3 pages")
    honest = tmp_path / "honest.json"
    honest.write_text(json.dumps(record(kappa="entropy")))
    assert _ok("add", honest, "-d", board).startswith(f"added 1 entry to {board}")
    assert current_table(board)["kappa"].tolist() == ["softmax(temperature=2)", "entropy"]


def test_a_record_the_table_cannot_hold_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    board = tmp_path / "board"
    add_records(board, [record()], create=True)
    before, names = _snapshot(board), store.accepted_files(board)
    row = store.record_row

    def fragile(rec, *args):
        if rec["kappa"]["name"] == "energy":
            raise OverflowError("Python int too large to convert to C long")
        return row(rec, *args)

    monkeypatch.setattr(store, "record_row", fragile)
    with pytest.raises(OverflowError):
        add_records(board, [record(kappa="entropy"), record(kappa="energy")])
    assert _snapshot(board) == before and store.accepted_files(board) == names
    monkeypatch.undo()
    assert len(add_records(board, [record(kappa="entropy")])) == 1
    assert current_table(board)["kappa"].tolist() == ["softmax", "entropy"]


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from leaderboard.cli import main; main()", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("change", "line"),
    [
        (
            lambda rec: rec["model"].update(num_parameters=10**30),
            "model.num_parameters: out of range [0, 1e15]: 1000000000000000000000000000000",
        ),
        (lambda rec: rec.update(seed=2**70), "seed: out of range [0, 9223372036854775807]: 1180591620717411303424"),
    ],
    ids=["num_parameters=10**30", "seed=2**70"],
)
def test_each_attack_through_the_cli_ends_in_one_line_with_exit_2(tmp_path, change, line):
    board = tmp_path / "board"
    first = tmp_path / "first.json"
    first.write_text(json.dumps(record()))
    assert _cli("add", first, "--init", "-d", board).returncode == 0
    before = _snapshot(board)
    attack = record(kappa="entropy")
    change(attack)
    path = tmp_path / "attack.json"
    path.write_text(json.dumps(attack))
    result = _cli("add", path, "-d", board)
    assert (result.returncode, result.stdout, result.stderr) == (2, "", f"cood-leaderboard: error: {path}: {line}\n")
    assert _snapshot(board) == before
    shown_board = _cli("show", "-d", board)
    assert shown_board.returncode == 0 and shown_board.stdout.splitlines()[0].endswith(": 1 entry")
    assert _cli("site", tmp_path / "site", "-d", board).returncode == 0
    honest = tmp_path / "honest.json"
    honest.write_text(json.dumps(record(kappa="energy")))
    added = _cli("add", honest, "-d", board)
    assert added.returncode == 0 and added.stdout.startswith(f"added 1 entry to {board}")


def test_an_integer_of_more_digits_than_python_reads_is_malformed_json(tmp_path):
    board = tmp_path / "board"
    add_records(board, [record()], create=True)
    before = _snapshot(board)
    text = json.dumps(record(kappa="entropy")).replace('"seed": 0', '"seed": 1' + "0" * 5000)
    path = tmp_path / "digits.json"
    path.write_text(text)
    with pytest.raises(LeaderboardError) as error:
        add_files(board, [path])
    assert str(error.value).startswith(f"{path}: malformed JSON: Exceeds the limit (4300 digits)")
    assert "\n" not in str(error.value) and _snapshot(board) == before
    with pytest.raises(LeaderboardError, match=r"^record 1: not JSON: Exceeds the limit \(4300 digits\)"):
        add_records(board, [{**record(kappa="entropy"), "seed": 10**5000}])
    assert _snapshot(board) == before
