import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from lb_records import record
from leaderboard.cli import app
from leaderboard.store import current_table

runner = CliRunner()


def _run(*args):
    result = runner.invoke(app, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def _write(path, data):
    path.write_text(json.dumps(data))
    return path


def test_workflow(tmp_path):
    board = tmp_path / "board"
    first = _write(tmp_path / "a.json", record(kappa="softmax"))
    assert _run("init", "-d", board, "--record", first).startswith(
        f"created {board} for glyphs 1.0.0 (manifest {'ab' * 32}), 11 levels"
    )
    second = _write(tmp_path / "b.json", record(kappa="entropy", aurocs=[0.9] * 11))
    assert _run("add", first, second, "-d", board).startswith(f"added 2 entries to {board}: ")
    out = _run("show", "-d", board, "--sort", "10", "--kappa", "entropy")
    assert out.splitlines()[0] == f"glyphs 1.0.0 (manifest {'ab' * 6}), table current (unreleased): 1 entry"
    assert out.splitlines()[3].split() == ["1", "glyph_cnn", "entropy", "0.8100", "0.9000", "0.9000"]
    assert _run("release", "-d", board, "--note", "first") == "released v1: 2 entries, 2 new\n"
    third = _write(tmp_path / "c.json", record(model="other", weights="55" * 32))
    _run("add", third, "-d", board)
    assert (
        _run("show", "-d", board, "-v", "1").splitlines()[0]
        == f"glyphs 1.0.0 (manifest {'ab' * 6}), table v1: 2 entries"
    )
    assert _run("show", "-d", board, "--model", "OTH").splitlines()[0].endswith("table current (unreleased): 1 entry")
    report = _run("report", "-d", board)
    assert report.startswith(
        f"Leaderboard of glyphs 1.0.0 (manifest {'ab' * 6}), 11 severity levels: 3 entries, 2 models"
    )
    assert "Top 2 of 2 models" in report
    assert _run("site", tmp_path / "site", "-d", board, "-v", "1").startswith("wrote 3 pages")  # index, model, records
    assert (tmp_path / "site" / "index.html").read_text().count('{"k":"') == 2  # v1's two entries, one model
    assert len(list((tmp_path / "site" / "records").glob("*.json"))) == 2


def test_init_from_options(tmp_path):
    out = _run(
        "init",
        "-d",
        tmp_path / "b",
        "--benchmark-id",
        "glyphs",
        "--benchmark-version",
        "1.0.0",
        "--manifest-sha256",
        "ab" * 32,
        "--num-id-classes",
        "36",
        "--num-ood-classes",
        "432",
        "--num-levels",
        "6",
    )
    assert out.endswith("6 levels\n")
    _run("add", "-d", tmp_path / "b", _write(tmp_path / "r.json", record(num_levels=6)))
    assert len(current_table(tmp_path / "b")) == 1


def test_import_paper(tmp_path, paper_table):
    subset = paper_table[paper_table["model name"].isin(["efficientnet_b6", "resnet50"])]
    csv = tmp_path / "paper.csv"
    subset.to_csv(csv, index=False)
    out = _run("import-paper", csv, "-d", tmp_path / "p")
    assert out.splitlines() == [
        f"imported 6 entries (2 models) into {tmp_path / 'p'}",
        "flagged 2 entries of 1 model:",
        "  efficientnet_b6 / mc_dropout: id-acc near chance (0.0012, chance 0.0010)",
        "  efficientnet_b6 / softmax: id-acc near chance (0.0012, chance 0.0010)",
    ]
    one = paper_table[(paper_table["model name"] == "resnet50") & (paper_table["confidence function"] == "softmax")]
    one.to_csv(csv, index=False)  # its 11 levels: one entry
    out = _run("import-paper", csv, "-d", tmp_path / "one")
    assert out.splitlines() == [f"imported 1 entry (1 model) into {tmp_path / 'one'}", "flagged none"]
    assert _run("release", "-d", tmp_path / "one") == "released v1: 1 entry, 1 new\n"


def test_import_paper_uses_the_shipped_table(tmp_path):
    from leaderboard.paper import PAPER_TABLE

    assert (PAPER_TABLE.parent / "PAPER_RESULTS_LICENSE.txt").read_text().count("MIT") >= 1
    out = _run("import-paper", "-d", tmp_path / "p")
    assert out.splitlines()[0] == f"imported 1,821 entries (697 models) into {tmp_path / 'p'}"
    assert out.splitlines()[1] == "flagged 6 entries of 3 models:"
    assert len(current_table(tmp_path / "p")) == 1821
    merged = out.splitlines()[8:]  # after the six flagged entries
    assert merged[0] == "merged 9 model names the table lists beside another with the same rows (kept as aliases):"
    assert merged[1:3] == [
        "  resnet18: also listed as resnet18_torchvision",
        "  resnet50: also listed as new_timm_resnet50",
    ]
    assert len(merged) == 10 and merged[-1] == "  vit_large_patch32_384: also listed as vit_large_patch32_384_original"


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-c", "from leaderboard.cli import main; main()", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_bad_input_is_one_line_on_stderr_and_writes_nothing(tmp_path):
    board = tmp_path / "board"
    good = _write(tmp_path / "good.json", record())
    bad = _write(tmp_path / "bad.json", record(kappa="entropy", aurocs=[float("nan")] * 11))
    result = _cli("add", good, bad, "--init", "-d", board)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == f"cood-leaderboard: error: {bad}: levels[0].ood_auroc: must be a finite number, got nan\n"
    assert not (board / "leaderboard.json").exists() and not list(board.glob("records/*"))
    result = _cli("show", "-d", board, "--sort", "x")
    assert (result.returncode, result.stderr) == (
        2,
        f"cood-leaderboard: error: {board} is not a leaderboard (no leaderboard.json);"
        " create it with `cood-leaderboard init`\n",
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["init", "--benchmark-id", "glyphs"], "give --record or every benchmark option (missing --version)"),
        (["report"], "the table is empty: nothing to report"),
        (
            ["show", "--sort", "l99"],
            "unknown sort key 'l99': use mean, id_acc, a level 0..10 or fpr_at_95_tpr, fpr_at_99_tpr",
        ),
        (["show", "-v", "3"], "no release v3 in"),
        (["publish", "org/x"], "nothing released in"),
    ],
)
def test_errors(tmp_path, args, message):
    board = tmp_path / "b"
    if args[0] != "init":
        _run("init", "-d", board, "--record", _write(tmp_path / "r.json", record()))
    result = runner.invoke(app, [*args, "-d", str(board)])
    assert result.exit_code != 0
    assert str(result.exception).startswith(message)


def test_the_leaderboard_needs_no_torch_nor_the_other_packages():
    """Of the builder, only its floor (errors, faults, atomic writes, exports, console, zoo groups); of the harness, the
    metric registry and the metrics it declares with their intervals, the paired tests (numpy, no scipy): nothing
    heavy."""
    code = (
        "import sys, leaderboard.cli; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'scipy', 'harness', 'dataset_builder')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (
        result.stdout
        == "['dataset_builder', 'dataset_builder.console', 'dataset_builder.errors', 'dataset_builder.exports', "
        "'dataset_builder.faults', 'dataset_builder.files', 'dataset_builder.zoo_groups', 'harness', 'harness.errors', "
        "'harness.method', 'harness.method.intervals', 'harness.method.metrics', 'harness.method.paired', "
        "'harness.method.pairwise', 'harness.method.registry', 'harness.method.selective']\n"
    ), result.stderr
