"""What a leaderboard trusts: an entry's identity is the code the harness hashed (never what a model's code reports),
a record that claims another's identity never displaces it (both are kept, shown as a conflict until a verified
run settles it), every CSV opens in a spreadsheet as data, and a record's
attachments are only the drill-down's own files."""

from __future__ import annotations

import copy
import csv
import hashlib
import io
import json
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lb_boards import drilldown_record, png
from lb_records import record
from leaderboard import drilldown, store
from leaderboard.conflicts import CONFLICT_FLAG
from leaderboard.csvsafe import csv_bytes, safe_cell
from leaderboard.errors import LeaderboardError
from leaderboard.release import release, release_table
from leaderboard.schema import entry_id, model_identity, validate_record
from leaderboard.site import build_site
from leaderboard.store import add_files, add_records, current_table
from leaderboard.table import CSV

HONEST, CHEAT, WEIGHTS = "a1" * 32, "c4" * 32, "77" * 32


def _snapshot(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


def _bundle(bundle: str, aurocs: list[float] | None = None, **kwargs) -> dict:
    """A submission file's record: its bundle (the harness's hash of its folder) and the weights it handed over."""
    return record(weights=WEIGHTS, bundle=bundle, aurocs=aurocs, **kwargs)


def _old(rec: dict) -> dict:
    """The same record as the harness wrote it before the bundle hash was a field of the model."""
    rec = copy.deepcopy(rec)
    del rec["model"]["bundle_sha256"]
    return rec


# identity


@pytest.mark.parametrize("first", ["honest", "cheat"])
def test_other_code_with_the_same_weights_is_another_entry_in_either_order(tmp_path, first):
    honest = _bundle(HONEST)
    cheat = _bundle(CHEAT, aurocs=[0.99] * 11)  # the honest weights behind other code: other results
    assert honest["model"]["weights_sha256"] == cheat["model"]["weights_sha256"]
    board = tmp_path / "b"
    order = [honest, cheat] if first == "honest" else [cheat, honest]
    ids = [add_records(board, [rec], create=True)[0] for rec in order]
    assert len(set(ids)) == 2
    table = current_table(board)
    assert sorted(table["bundle_sha256"]) == sorted([HONEST, CHEAT])
    assert table.set_index("bundle_sha256").loc[HONEST, "mean_ood_auroc"] == pytest.approx(0.85)


def test_the_same_bundle_twice_is_one_entry(tmp_path):
    board = tmp_path / "b"
    [key] = add_records(board, [_bundle(HONEST)], create=True)
    before = _snapshot(board)
    again = {**_bundle(HONEST), "created": "2026-12-09T08:00:00+00:00", "timings": {"total_s": 12.5}}
    lines = []
    assert add_records(board, [again], say=lines.append) == [key]
    assert lines == [
        f"record 1: entry {key} (model 'glyph_cnn', kappa softmax) is already in 000001-{key}.json with the same "
        "results; skipped"
    ]
    assert _snapshot(board) == before and len(current_table(board)) == 1


def test_the_cli_says_which_records_were_already_there(tmp_path):
    from typer.testing import CliRunner

    from leaderboard.cli import app

    board, paths = tmp_path / "b", []
    for name, rec in (("a", _bundle(HONEST)), ("b", _bundle(HONEST, kappa="entropy"))):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(rec))
    runner = CliRunner()
    assert runner.invoke(app, ["add", str(paths[0]), "--init", "-d", str(board)]).exit_code == 0
    result = runner.invoke(app, ["add", *map(str, paths), "-d", str(board)])
    assert result.exit_code == 0, result.output
    first, second = entry_id(_bundle(HONEST)), entry_id(_bundle(HONEST, kappa="entropy"))
    assert result.output == (
        f"{paths[0]}: entry {first} (model 'glyph_cnn', kappa softmax) is already in 000001-{first}.json with the "
        "same results; skipped\n"
        f"added 1 entry to {board} (1 already there): {first}, {second}\n"
    )


@pytest.mark.parametrize(
    ("forged", "where"),
    [
        (lambda: _bundle(HONEST, aurocs=[0.99] * 11), "levels[0].ood_auroc"),  # other results under its identity
        (lambda: _bundle(HONEST, model="glyph_cnn_v2"), "model.name"),
        (lambda: _bundle(HONEST, acc=0.99), "id.acc"),
    ],
)
def test_a_record_claiming_an_entrys_identity_is_kept_beside_it_as_a_conflict(tmp_path, forged, where):
    board = tmp_path / "b"
    [key] = add_records(board, [_bundle(HONEST)], create=True)
    path = tmp_path / "forged.json"
    path.write_text(json.dumps(forged()))
    warned = []
    assert add_files(board, [path], say=pytest.fail, warn=warned.append) == [key]
    assert warned == [
        f"{path}: entry {key} (model {forged()['model']['name']!r}, kappa softmax) differs from 000001-{key}.json "
        f"(model 'glyph_cnn') in {where}; both kept and shown as a conflict until a verified run settles it"
    ]
    table = current_table(board)
    assert table["entry_id"].tolist() == [key, key] and table["conflict"].tolist() == ["conflict", "conflict"]
    assert table["flag"].tolist() == [CONFLICT_FLAG, CONFLICT_FLAG]
    assert table["record_file"].tolist() == [f"records/000001-{key}.json", f"records/000002-{key}.json"]
    assert (board / "records" / f"000002-{key}.json").read_bytes() == path.read_bytes()


SQUAT = [round(0.5 * (0.95 - 0.02 * i), 6) for i in range(11)]  # half the honest run's ood-auroc
VERIFIED = {"request": "00000000000a", "requests_repo": "org/requests", "worker": "gpu-1"}


def _squatted(tmp_path) -> tuple[Path, str]:
    """A board where a hand-made record with the honest run's bundle hash and half its ood-auroc came first, then the
    honest run's own record."""
    board = tmp_path / "b"
    [key] = add_records(board, [_bundle(HONEST, aurocs=SQUAT)], create=True)
    assert add_records(board, [_bundle(HONEST)], say=pytest.fail, warn=lambda line: None) == [key]
    return board, key


def test_the_first_comer_never_takes_an_honest_entrys_place(tmp_path):
    board, key = _squatted(tmp_path)
    table = current_table(board)
    assert table["mean_ood_auroc"].tolist() == pytest.approx([0.425, 0.85])  # both shown, the squat's numbers kept
    assert table["conflict"].tolist() == ["conflict", "conflict"] and set(table["entry_id"]) == {key}
    assert table["verification"].tolist() == ["self-reported", "self-reported"]
    lines = []
    assert add_records(board, [_bundle(HONEST, aurocs=SQUAT)], say=lines.append, warn=pytest.fail) == [key]
    assert lines == [  # a true duplicate is still skipped
        f"record 1: entry {key} (model 'glyph_cnn', kappa softmax) is already in 000001-{key}.json with the same "
        "results; skipped"
    ]
    assert len(store.accepted_files(board)) == 2


def test_a_verified_run_settles_a_conflict_and_the_history_keeps_the_rest(tmp_path):
    board, key = _squatted(tmp_path)
    squat, honest = ((board / "records" / f"00000{i}-{key}.json").read_bytes() for i in (1, 2))
    assert add_records(board, [_bundle(HONEST)], verified=VERIFIED, say=pytest.fail, warn=pytest.fail) == [key]
    table = current_table(board)
    assert table["record_file"].tolist() == [f"records/000003-{key}.json"]
    assert table["verification"].tolist() == ["verified"] and table["conflict"].tolist() == ["settled"]
    assert table["flag"].tolist() == [""] and table["mean_ood_auroc"].tolist() == pytest.approx([0.85])
    history = pd.read_parquet(board / "table.parquet")  # every accepted record, each with its standing
    assert history["conflict"].tolist() == ["replaced", "replaced", "settled"]
    assert [(board / "records" / f"00000{i}-{key}.json").read_bytes() for i in (1, 2)] == [squat, honest]
    lines = []  # the same verified numbers again: that entry; a squat after it: in the history, off the board
    assert add_records(board, [_bundle(HONEST)], verified={**VERIFIED, "request": "00000000000b"}, say=lines.append)
    assert lines == [
        f"record 1: entry {key} (model 'glyph_cnn', kappa softmax) is already in 000003-{key}.json with the same "
        "results; skipped"
    ]
    warned = []
    add_records(board, [_bundle(HONEST, aurocs=[0.99] * 11)], warn=warned.append)
    assert warned == [
        f"record 1: entry {key} (model 'glyph_cnn', kappa softmax) differs from 000003-{key}.json (model 'glyph_cnn') "
        "in levels[0].ood_auroc; kept in the board's history, the verified record stands"
    ]
    assert current_table(board)["record_file"].tolist() == [f"records/000003-{key}.json"]
    assert len(store.accepted_files(board)) == 4


def test_a_conflict_shows_in_show_the_site_and_releases(tmp_path):
    from typer.testing import CliRunner

    from leaderboard.cli import app

    board, key = _squatted(tmp_path)
    runner = CliRunner()
    shown = runner.invoke(app, ["show", "-d", str(board)])
    assert shown.exit_code == 0, shown.output
    rows = [line for line in shown.output.splitlines() if line.endswith(CONFLICT_FLAG)]
    assert [row.split()[:4] for row in rows] == [[rank, "glyph_cnn", "softmax", "0.8100"] for rank in "12"]
    assert [row.split()[4] for row in rows] == ["0.8500", "0.4250"]
    build_site(current_table(board), tmp_path / "site", "current", board=board)
    page = next((tmp_path / "site" / "models").glob("glyph_cnn-*.html")).read_text()
    assert page.count("In conflict: another record of this entry holds other results") == 2
    assert (tmp_path / "site" / "index.html").read_text().count(f'"flag":"{CONFLICT_FLAG}"') == 2
    assert release(board)["added"] == [key, key]
    add_records(board, [_bundle(HONEST)], verified=VERIFIED)
    info = release(board)
    assert (info["added"], info["num_entries"]) == ([key], 1)
    assert release_table(board, 2)["conflict"].tolist() == ["settled"]
    build_site(release_table(board, 2), tmp_path / "site2", "v2", board=board)
    page = next((tmp_path / "site2" / "models").glob("glyph_cnn-*.html")).read_text()
    assert "Settled by this verified run" in page and "In conflict" not in page


def test_old_records_keep_their_identity_and_old_boards_still_load(tmp_path):
    old = _old(record())
    validate_record(old)  # a record states what it has
    identity = {"model": "11" * 32, "kappa": ["softmax", {}], "benchmark": "ab" * 32}  # the rule before the bundle
    assert entry_id(old) == hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
    assert entry_id(old) == "23d3616564391c8d"
    board = tmp_path / "b"
    [key] = add_records(board, [old], create=True)
    table = current_table(board)
    assert table["record_file"].tolist() == [f"records/000001-{key}.json"] and table["entry_id"].tolist() == [key]
    assert table["bundle_sha256"].isna().all()
    # a table written before the field: still read, and a site built from it
    pd.read_parquet(board / "table.parquet").drop(columns=["bundle_sha256"]).to_parquet(board / "table.parquet")
    build_site(current_table(board), tmp_path / "site", "current", board=board)
    # a new record of the same model (its bundle now known) is its own entry; the old one is the same entry again
    lines = []
    assert add_records(board, [_old(record()), record(bundle=HONEST)], say=lines.append)[0] == key
    assert len(current_table(board)) == 2 and len(lines) == 1


def test_the_identity_of_each_kind_of_model():
    def model(**fields):
        base = {"name": "m", "source": "timm:resnet18", "file_sha256": "f0" * 32, "weights_sha256": "e0" * 32}
        return {**base, "bundle_sha256": None, **fields}

    assert model_identity(model(source="cnn.py", bundle_sha256=HONEST)) == ["bundle", HONEST, "cnn.py"]
    assert model_identity(model(source="mlp.py", bundle_sha256=HONEST)) != model_identity(
        model(source="cnn.py", bundle_sha256=HONEST)
    )  # two files of one folder: two models
    assert model_identity(model()) == ["timm:resnet18", "f0" * 32, "e0" * 32]  # the target and its weights file
    assert model_identity(model(file_sha256=None, weights_sha256=None)) == "name:m"  # published results
    old = model()
    del old["bundle_sha256"]
    assert model_identity(old) == "e0" * 32  # as it was added
    zoo = record(weights="e0" * 32)
    zoo["model"].update(source="timm:resnet18", file_sha256="f0" * 32)
    other_target = copy.deepcopy(zoo)
    other_target["model"]["source"] = "timm:resnet34"
    other_file = copy.deepcopy(zoo)
    other_file["model"]["file_sha256"] = "f1" * 32
    assert len({entry_id(zoo), entry_id(other_target), entry_id(other_file)}) == 3
    cheat = copy.deepcopy(zoo)
    cheat["model"].update(source="examples/cheat.py", bundle_sha256=CHEAT)
    assert entry_id(cheat) != entry_id(zoo)


# names


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (".", "model.name: '.' is not a name"),
        ("..", "model.name: '..' is not a name"),
        ("a/b", "model.name: contains a path separator"),
        ("a\\b", "model.name: contains a path separator"),
        ("a\nb", "model.name: contains a control character"),
        ("a\x7fb", "model.name: contains a control character"),
    ],
)
def test_names_that_are_paths_are_refused(name, message):
    with pytest.raises(LeaderboardError, match="^" + re.escape(message)):
        validate_record(record(model=name))
    validate_record(record(model="...dots"))  # a name that only starts with dots is a name


# CSV


FORMULAS = ['=HYPERLINK(CONCAT("http:",CHAR(47),CHAR(47),"evil.example"),"x")', "@SUM(1+1)", "+1+1", "-2+3"]


def _cells(data: bytes) -> list[list[str]]:
    return list(csv.reader(io.StringIO(data.decode())))


def _no_formula(rows: list[list[str]]) -> None:
    for row in rows:
        for cell in row:
            if cell[:1] in ("=", "+", "-", "@", "\t", "\r"):
                float(cell)  # only a number may start so


def test_safe_cells_keep_numbers():
    assert [safe_cell(v) for v in ["=1", "@a", "+a", "-a", "\ta", "\ra", "a=1", "", -1.5, -2, None]] == [
        "'=1",
        "'@a",
        "'+a",
        "'-a",
        "'\ta",
        "'\ra",
        "a=1",
        "",
        -1.5,
        -2,
        None,
    ]
    frame = pd.DataFrame({"name": ["=cmd", "ok"], "score": [-0.5, 2.0], "n": pd.array([-3, None], dtype="Int64")})
    back = pd.read_csv(io.BytesIO(csv_bytes(frame)))
    assert back["name"].tolist() == ["'=cmd", "ok"] and back["score"].tolist() == [-0.5, 2.0]
    assert back["n"].tolist()[0] == -3


def test_the_table_and_the_sites_download_hold_no_formula(tmp_path):
    board = tmp_path / "b"
    records = [record(model=name, weights=f"{i:02d}" * 32) for i, name in enumerate(FORMULAS)]
    records[0]["id"]["avg_conf"] = -3.5  # a negative number stays a number
    add_records(board, records, create=True)
    build_site(current_table(board), tmp_path / "site", "current", board=board)
    for path in (board / CSV, tmp_path / "site" / "downloads" / "leaderboard.csv"):
        rows = _cells(path.read_bytes())
        _no_formula(rows)
        table = pd.read_csv(path)
        assert table["model"].tolist() == [f"'{name}" for name in FORMULAS]
        assert table["id_avg_conf"].tolist()[0] == -3.5


def test_the_harness_per_level_csv_holds_no_formula(tmp_path):
    outputs = pytest.importorskip("harness.outputs")
    from harness.method.evaluation import KappaResult
    from harness.method.severity import SeverityLevels

    base = record()
    levels = SeverityLevels(
        classes=np.array([[0, 1]] * 11),
        level_scores=np.linspace(-1.0, 0.0, 11),
        percentiles=np.linspace(0.0, 1.0, 11),
        starts=np.zeros(11, dtype=np.int64),
        class_scores=np.array([-1.0, -0.5]),
    )
    results = [KappaResult(kappa, levels, base["levels"], base["id"]) for kappa in ("@SUM(1+1)", "softmax")]
    paths = outputs.write_outputs(
        tmp_path / "run", "=HYPERLINK(1)", results, [base, base], ["n0", "n1"], base["benchmark"]
    )
    rows = _cells(paths["csv"].read_bytes())
    _no_formula(rows)
    table = pd.read_csv(paths["csv"])
    assert set(table["model name"]) == {"'=HYPERLINK(1)"}
    assert set(table["confidence function"]) == {"'@SUM(1+1)", "softmax"}
    assert table["level score"].tolist()[0] == -1.0  # numbers stay numbers


# attachments


def _run(tmp_path: Path) -> tuple[Path, dict]:
    run = tmp_path / "run"
    return run, drilldown_record(run)


def _thumbnail(rec: dict, name: str) -> dict:
    rec["per_class"]["levels"][0]["hardest"][0]["thumbnails"].append(name)
    return rec


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _extra(name: str, data: bytes | None = None):
    """A change that lists one more thumbnail, ``name`` (written into the run with ``data``)."""

    def change(run: Path, rec: dict) -> None:
        if data is not None:
            _write(run / name, data)
        _thumbnail(rec, name)

    return change


def _sidecar(name: str):
    return lambda run, rec: rec["per_class"].update(file=name)


def _not_parquet(run: Path, rec: dict) -> None:
    _write(run / "per_class" / "per_class.parquet", b"<html></html>")


def _link_to_hidden(run: Path, rec: dict) -> None:
    _write(run / ".secret" / "x.png", png((1, 2, 3)))
    os.symlink(run / ".secret" / "x.png", run / "link.png")
    _thumbnail(rec, "link.png")


HTML = b"<script>alert(1)</script>"
THUMB = "per_class.levels[0].hardest[0].thumbnails[2]"
REFUSED = {
    "git": (_extra(".git/config", b"[core]"), f"{THUMB}: names a hidden file or folder ('.git')"),
    "token": (_extra(".cache/huggingface/token", b"hf_x"), f"{THUMB}: names a hidden file or folder ('.cache')"),
    "hidden-file": (_extra("per_class/.t.png", png((0, 0, 0))), f"{THUMB}: names a hidden file or folder ('.t.png')"),
    "hidden-sidecar": (_sidecar(".per_class.parquet"), "per_class.file: names a hidden file or folder"),
    "absolute": (_extra("/etc/passwd"), f"{THUMB}: not a relative path"),
    "up": (_extra("../x.png"), f"{THUMB}: not a relative path"),
    "html": (_extra("x.html", HTML), "per_class names 'x.html', which is not a .png or .jpg or .jpeg file"),
    "html-as-png": (_extra("x.png", HTML), "per_class names x.png, which is not a PNG or JPEG image (by its first"),
    "not-parquet": (_not_parquet, "per_class names per_class/per_class.parquet, which is not a parquet file (no PAR1)"),
    "png-as-sidecar": (
        _sidecar("per_class/thumbnails/0-0.png"),
        "per_class names 'per_class/thumbnails/0-0.png', which is not a .parquet file",
    ),
    "link-to-hidden": (_link_to_hidden, "per_class names link.png, which leads to a hidden file"),
}


@pytest.mark.parametrize(("change", "message"), REFUSED.values(), ids=REFUSED.keys())
def test_add_takes_only_the_drill_downs_own_files(tmp_path, change, message):
    run, rec = _run(tmp_path)
    board = tmp_path / "b"
    add_records(board, [record(kappa="entropy")], create=True)
    before = _snapshot(board)
    change(run, rec)
    path = run / "records" / "softmax.json"
    _write(path, json.dumps(rec).encode())
    with pytest.raises(LeaderboardError) as error:
        add_files(board, [path])
    assert str(error.value).startswith(f"{path}: {message}"), error.value
    assert "\n" not in str(error.value)
    assert _snapshot(board) == before


def test_attachments_have_a_size_cap_per_file_and_per_record(tmp_path, monkeypatch):
    run, rec = _run(tmp_path)
    sizes = [p.stat().st_size for p in (run / "per_class").rglob("*") if p.is_file()]
    monkeypatch.setattr(drilldown, "MAX_FILE_BYTES", max(sizes) - 1)
    limit = f"{max(sizes) - 1:,}"
    with pytest.raises(
        LeaderboardError, match=rf"^record 1: per_class/per_class.parquet is over the size limit of {limit}"
    ):
        add_records(tmp_path / "b", [rec], create=True, folder=run)
    monkeypatch.setattr(drilldown, "MAX_FILE_BYTES", max(sizes))
    monkeypatch.setattr(drilldown, "MAX_RECORD_BYTES", sum(sizes) - 1)
    with pytest.raises(LeaderboardError, match="^record 1: the files per_class names are over the size limit of .*"):
        add_records(tmp_path / "b", [rec], create=True, folder=run)
    assert not (tmp_path / "b").exists()
    monkeypatch.setattr(drilldown, "MAX_RECORD_BYTES", sum(sizes))
    add_records(tmp_path / "b", [rec], create=True, folder=run)
    assert len(list((tmp_path / "b" / "attachments").rglob("*.png"))) == len(sizes) - 1


def test_the_site_never_publishes_a_hidden_file_or_another_type(tmp_path):
    run, rec = _run(tmp_path)
    board = tmp_path / "b"
    [key] = add_records(board, [rec], create=True, folder=run)
    # a board holding what an add took before these checks: a hidden file, an HTML page, a PNG that is not one
    stored = board / "records" / f"000001-{key}.json"
    old = json.loads(stored.read_text())
    hardest = old["per_class"]["levels"][0]["hardest"][0]["thumbnails"]
    hardest += [".git/config", "per_class/.token.png", "x.html", "fake.png"]
    stored.write_text(json.dumps(old))
    folder = drilldown.stored_folder(board, stored.name)
    _write(folder / ".git" / "config", b"[core]")
    _write(folder / "per_class" / ".token.png", png((0, 0, 0)))
    _write(folder / "x.html", b"<script>alert(1)</script>")
    _write(folder / "fake.png", b"<script>alert(1)</script>")
    out = tmp_path / "site"
    build_site(current_table(board), out, "current", board=board)
    published = [p.relative_to(out) for p in out.rglob("*") if p.is_file()]
    assert not [p for p in published if any(part.startswith(".") for part in p.parts)]
    assert not [p for p in published if p.name in ("x.html", "fake.png")]
    assert len([p for p in published if p.suffix == ".png"]) == 44  # the drill-down's own thumbnails
