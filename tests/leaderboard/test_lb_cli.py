import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from harness.method.paired import compare_entries
from lb_pairs import M_ID, PER_CLASS, paired_board
from lb_records import record
from leaderboard.cli import app
from leaderboard.pairs import per_image_path, read_scores
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
    metric registry and the metrics it declares with their intervals, the paired tests (numpy, no scipy), the severity
    rules' names: nothing heavy."""
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
        "'harness.method.pairwise', 'harness.method.registry', 'harness.method.selective', "
        "'harness.method.severity_names']\n"
    ), result.stderr


@pytest.fixture(scope="module")
def paired(tmp_path_factory):
    """The paired test board and its table."""
    board = paired_board(tmp_path_factory.mktemp("paired"))
    return board, current_table(board)


def _comparison(board, table, a: str, b: str):
    """``compare_entries`` on the per-image files of the entries ``MODEL/KAPPA`` ``a`` and ``b``."""
    files = [table[(table["model"] + "/" + table["kappa"]) == name]["record_file"].item() for name in (a, b)]
    return compare_entries(*(read_scores(per_image_path(board, f)) for f in files)), files


def test_compare_prints_each_paired_difference_of_two_kappas_of_one_model(paired):
    board, table = paired
    out = _run("compare", "glyph_cnn/softmax", "glyph_cnn/energy", "-d", board).splitlines()
    found, files = _comparison(board, table, "glyph_cnn/softmax", "glyph_cnn/energy")
    assert out[0] == (
        f"A: glyph_cnn/softmax ({files[0]}): mean-ood-auroc {found.mean_ood_auroc.a:.4f}, id-acc "
        f"{found.id_acc.a:.4f}, id-auroc {found.id_auroc.a:.4f}, 3 levels"
    )
    assert out[1].startswith(f"B: glyph_cnn/energy ({files[1]}): mean-ood-auroc {found.mean_ood_auroc.b:.4f}")
    assert out[2].split() == [
        "A",
        "-",
        "B",
        "estimate",
        "95%",
        "interval",
        "p",
        "paired",
        "se",
        "unpaired",
        "se",
        "ratio",
    ]
    named = [*(f"level {i}" for i in range(3)), "mean ood-auroc", "id-acc", "id-auroc"]
    differences = [*found.levels, found.mean_ood_auroc, found.id_acc, found.id_auroc]
    for line, name, d in zip(out[4:10], named, differences):
        ratio = f"{d.unpaired_se / d.se:.1f}x" if d.se > 0 else "-"  # one classifier: id-acc's sides are identical
        cells = [f"{d.estimate:+.4f}", f"[{d.low:+.4f},", f"{d.high:+.4f}]", f"{d.p_value:.3g}", f"{d.se:.4f}"]
        assert line.split() == [*name.split(), *cells, f"{d.unpaired_se:.4f}", ratio]
    assert found.mean_ood_auroc.unpaired_se / found.mean_ood_auroc.se > 3  # the paired interval is far narrower
    assert out[10] == "different at 5% (paired): level 0, level 1, level 2, mean ood-auroc, id-auroc"
    assert len(out) == 11


def test_compare_takes_entries_of_two_models_and_record_files_and_prints_json(paired):
    board, table = paired
    found, files = _comparison(board, table, "glyph_cnn/entropy", "glyph_mlp/softmax")
    printed = json.loads(_run("compare", files[0], "glyph_mlp/softmax", "-d", board, "--json"))
    assert printed == {"a": files[0], "b": files[1], "comparison": found.as_dict(), "no_paired_interval": None}
    assert [d["shared"] for d in printed["comparison"]["levels"]] == [d.shared for d in found.levels]
    # each entry's own levels (its kappa's class order): a level's OOD classes are not all the other's
    assert min(d.shared for d in found.levels) < M_ID + 4 * PER_CLASS < found.mean_ood_auroc.shared
    out = _run("compare", "glyph_cnn/energy", "glyph_cnn/max_logit", "-d", board).splitlines()
    assert out[-1] == "different at 5% (paired): none"  # p = 0.73 on the mean


def test_compare_with_an_entry_without_per_image_scores_prints_one_line(paired):
    board, _ = paired
    out = _run("compare", "glyph_cnn/softmax", "glyph_mlp/max_logit", "-d", board).splitlines()
    assert out[1].startswith("B: glyph_mlp/max_logit (records/") and out[1].endswith(
        ": mean-ood-auroc 0.5800, id-acc 0.8100, id-auroc 0.8600, 3 levels"
    )
    assert out[2:] == [
        "no paired interval: glyph_mlp/max_logit has no per-image scores (a record made before per-image files)"
    ]


@pytest.mark.parametrize(
    ("a", "message"),
    [
        ("glyph_cnn/softmx", "glyph_cnn has no kappa 'softmx'; did you mean 'softmax'? (its kappas: energy, entropy,"),
        ("glyph_cn/softmax", "no model 'glyph_cn' on the board; did you mean 'glyph_cnn' or 'glyph_mlp'?"),
        ("glyph_cnn", "'glyph_cnn': name an entry as MODEL/KAPPA or by its record file"),
    ],
)
def test_compare_names_a_near_miss(paired, a, message):
    result = runner.invoke(app, ["compare", a, "glyph_cnn/energy", "-d", str(paired[0])])
    assert result.exit_code != 0 and str(result.exception).startswith(message)


def test_a_bad_entry_name_is_one_line_and_status_2(paired):
    result = _cli("compare", "glyph_mlp/sofmax", "glyph_cnn/energy", "-d", paired[0])
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "cood-leaderboard: error: glyph_mlp has no kappa 'sofmax'; did you mean 'softmax'? "
        "(its kappas: max_logit, softmax)\n"
    )
