"""One spelling of a kappa: the site, ``show``, the CSV and the record print the same string for every registered kappa
with parameters, and ``-k`` takes that string (and the short names) back to the same parameters."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from glyph_fixtures import CNN, tiny_glyphs  # noqa: F401
from harness.kappa_names import check_requested
from harness.kappas import registry, resolve_kappas
from lb_records import record
from leaderboard.cli import app as leaderboard_app
from leaderboard.schema import kappa_label
from leaderboard.site import build_site
from leaderboard.store import add_records, current_table

OPTION = re.compile(r'<option value="([^"]*)" title="\1">([^<]*)</option>')  # the kappa filter's options


def harness_kappas() -> dict[str, dict]:
    """Each registered kappa with parameters -> the parameters a run's record holds for it (as JSON reads them)."""
    names = [name for name, defaults in registry().parameters().items() if defaults]
    return {spec.name: json.loads(json.dumps(spec.params)) for spec in resolve_kappas(names)}


def site_labels(out: Path) -> dict[str, str]:
    """The kappa filter's entries of a built site: the table's label -> what the site shows (options and cells)."""
    data = json.loads(re.search(r'id="board-data">(.*?)</script>', (out / "index.html").read_text(), re.S).group(1))
    shown = {html.unescape(k): html.unescape(v) for k, v in OPTION.findall((out / "index.html").read_text())}
    assert all(data["short"].get(k, k) == v for k, v in shown.items())  # the table's cells name them alike
    return shown


def show_labels(board: Path) -> dict[str, str]:
    """``cood-leaderboard show``'s kappa by model (a model per kappa here)."""
    done = CliRunner().invoke(leaderboard_app, ["show", "--dir", str(board), "--limit", "0"])
    assert done.exit_code == 0, done.output
    rows = [cells for cells in map(str.split, done.output.splitlines()[3:]) if cells[0][0].isdigit()]  # no notes
    return {row[1]: row[2] for row in rows}


def test_every_kappa_with_parameters_is_written_one_way(tmp_path):
    kappas = harness_kappas()
    records = [
        record(model=f"model_{name}", weights=f"{i:02x}" * 32, kappa=name, params=params)
        for i, (name, params) in enumerate(kappas.items())
    ]
    board, out = tmp_path / "board", tmp_path / "site"
    add_records(board, records, create=True)
    build_site(current_table(board), out, "current", board=board)
    site, show = site_labels(out), show_labels(board)
    csv = dict(pd.read_csv(out / "downloads" / "leaderboard.csv")[["model", "kappa"]].itertuples(index=False))
    labels = {name: kappa_label(name, params) for name, params in kappas.items()}
    assert labels["energy"] == "energy(temperature=1)"
    assert labels["odin"] == "odin(epsilon=1e-05,preset=paper,temperature=2)"
    assert labels["gen"] == "gen(M=None,gamma=0.1)"
    assert sorted(site) == sorted(labels.values()) and all(site[label] == label for label in site)
    assert {f"model_{name}": label for name, label in labels.items()} == show == csv
    check_requested(list(labels.values()), registry().parameters(), ())
    assert {spec.name: spec.params for spec in resolve_kappas(labels.values())} == kappas  # -k takes it back


@pytest.mark.slow
def test_the_printed_spelling_runs_as_the_default_kappa(tiny_glyphs, tmp_path):  # noqa: F811
    from harness.cli import app as harness_app

    def run(out: Path, *kappas: str) -> dict:
        args = ["submit", CNN, "--benchmark", tiny_glyphs, "--trust-submission", "--no-progress", "-q"]
        done = CliRunner().invoke(
            harness_app, [*map(str, args), "--cache-dir", str(tmp_path / "cache"), "--out", str(out), *kappas]
        )
        assert done.exit_code == 0, done.output
        return json.loads((out / "records" / "energy.json").read_text())

    default = run(tmp_path / "default", "-k", "energy")
    written = run(tmp_path / "written", "-k", "energy(temperature=1)", "-k", "energy:T=1")
    assert (
        written["kappa"] == default["kappa"] == {"name": "energy", "params": {"temperature": 1.0}, "probability": False}
    )
    assert written["levels"] == default["levels"] and written["id"] == default["id"]
    board = tmp_path / "board"
    add_records(board, [written], create=True, folder=tmp_path / "written")
    assert current_table(board)["kappa"].tolist() == ["energy(temperature=1)"]
