import pytest

from dataset_builder.console import plural
from harness.method.paired import compare_entries
from lb_boards import SUBMISSION
from lb_pairs import paired_board
from lb_records import GLYPHS, record
from leaderboard.errors import LeaderboardError
from leaderboard.pairs import board_pairs, per_image_path, read_scores
from leaderboard.store import add_records, current_table
from leaderboard.views import (
    benchmark_phrase,
    format_rows,
    heading,
    kappa_names,
    paired_marks,
    rank_spans,
    select,
    sort_column,
)


@pytest.fixture
def table(tmp_path):
    records = [
        record(model="alpha", weights="01" * 32, aurocs=[0.99, 0.9, 0.8, 0.7, 0.6, 0.5], num_levels=6),
        record(model="Beta-net", weights="02" * 32, aurocs=[0.9, 0.9, 0.9, 0.9, 0.85, 0.8], num_levels=6),
        record(
            model="gamma",
            weights="03" * 32,
            kappa="entropy",
            aurocs=[0.95, 0.9, 0.88, 0.85, 0.8, 0.6],
            acc=0.01,
            num_levels=6,
        ),
    ]
    add_records(tmp_path / "b", records, create=True)
    return current_table(tmp_path / "b")


def test_sort_keys(table):
    assert sort_column(table, "mean") == "mean_ood_auroc"
    assert sort_column(table, "0") == sort_column(table, "l0") == "ood_auroc_l0"
    assert sort_column(table, "id_acc") == "id_acc"
    assert sort_column(table, "fpr_at_99_tpr") == "mean_fpr_at_99_tpr"  # a level metric the table averages
    with pytest.raises(LeaderboardError, match="unknown sort key '6': use mean, id_acc, a level 0..5 or fpr_at_95_tpr"):
        sort_column(table, "6")


def test_a_metric_where_lower_is_better_sorts_lowest_first(tmp_path):
    records = []
    for i, fpr in enumerate([0.6, 0.2, 0.4]):
        rec = record(model=f"m{i}", weights=f"0{i + 4}" * 32, num_levels=6)
        for level in rec["levels"]:
            level["fpr_at_99_tpr"] = fpr
        records.append(rec)
    add_records(tmp_path / "b", records, create=True)
    table = current_table(tmp_path / "b")
    assert select(table, sort="fpr_at_99_tpr")["model"].tolist() == ["m1", "m2", "m0"]
    lines = format_rows(select(table, sort="fpr_at_99_tpr"), sort="fpr_at_99_tpr").splitlines()
    assert lines[0].split()[-4:] == ["mean", "fpr@99", "(ID+)", "flag"] and lines[2].split()[-1] == "0.2000"


def test_select_sorts_and_filters(table):
    assert select(table)["model"].tolist() == ["Beta-net", "gamma", "alpha"]
    assert select(table, sort="0")["model"].tolist() == ["alpha", "gamma", "Beta-net"]
    assert select(table, sort="l5")["rank"].tolist() == [1, 2, 3]
    assert select(table, kappas=["entropy"])["model"].tolist() == ["gamma"]
    assert select(table, model="BETA")["model"].tolist() == ["Beta-net"]
    assert select(table, include_flagged=False)["model"].tolist() == ["Beta-net", "alpha"]


def test_format_rows(table):
    text = format_rows(select(table, sort="3"), sort="3", limit=2)
    lines = text.splitlines()
    assert lines[0].split() == ["rank", "model", "kappa", "id-acc", "mean-ood-auroc", "ood-auroc-l3", "flag"]
    assert lines[2].split() == ["1", "Beta-net", "softmax", "0.8100", "0.8750", "0.9000"]
    assert lines[3].split()[:6] == ["2", "gamma", "entropy", "0.0100", "0.8300", "0.8500"]
    assert "id-acc near chance" in lines[3]
    assert lines[4] == "... 1 more (use --limit 0 for all)"


def test_counts_and_the_benchmark_in_words():
    assert [plural(n, "model") for n in (0, 1, 2)] == ["0 models", "1 model", "2 models"]
    assert plural(1, "entry", "entries") == "1 entry" and plural(3, "entry", "entries") == "3 entries"
    assert benchmark_phrase(GLYPHS) == "glyphs 1.0.0 (manifest abababababab)"
    paper = {"id": "imagenet-cood-paper2023", "version": "iclr2023", "manifest_sha256": None}
    assert benchmark_phrase(paper) == "imagenet-cood-paper2023 iclr2023 (no manifest: published numbers)"
    assert heading(GLYPHS, "v2", 1) == "glyphs 1.0.0 (manifest abababababab), table v2: 1 entry"


def test_a_submission_kappa_goes_by_its_name(tmp_path):
    other = {**SUBMISSION, "code_sha256": "beef" * 16}
    records = [
        record(kappa="energy_sub", params=SUBMISSION),
        record(model="b", weights="02" * 32, kappa="odin", params={"temperature": 2}),
        record(model="c", weights="03" * 32, kappa="own", params=SUBMISSION),
        record(model="c", weights="03" * 32, kappa="own", params=other, aurocs=[0.5] * 11),
        record(model="d", weights="04" * 32, kappa="hashy", params={"code_sha256": "not hex"}),
    ]
    add_records(tmp_path / "b", records, create=True)
    table = current_table(tmp_path / "b")
    assert kappa_names(table) == {
        f"energy_sub(code_sha256={'c0de' * 16},source=submission)": "energy_sub",
        "odin(temperature=2)": "odin(temperature=2)",
        f"own(code_sha256={'c0de' * 16},source=submission)": "own #c0dec0de",  # two kappas named "own"
        f"own(code_sha256={'beef' * 16},source=submission)": "own #beefbeef",
        "hashy(code_sha256=not hex)": "hashy(code_sha256=not hex)",  # not a submission file's code hash
    }
    text = format_rows(select(table))
    assert "  glyph_cnn  energy_sub  " in text and "c0dec0de" not in text.replace("own #c0dec0de", "")
    assert "  c          own #c0dec0de  " in text and "  c          own #beefbeef  " in text


@pytest.fixture(scope="module")
def paired(tmp_path_factory):
    """The paired test board, its rows as ``show`` ranks them and their paired statistics."""
    board = paired_board(tmp_path_factory.mktemp("paired"))
    rows = select(current_table(board))
    return board, rows, board_pairs(board, rows["record_file"].tolist())


def _p_value(board, a: str, b: str, key: str) -> float:
    """The p-value of ``compare_entries`` on two records' per-image files, for ``mean_ood_auroc`` or ``id_acc``."""
    tables = [read_scores(per_image_path(board, name)) for name in (a, b)]
    return getattr(compare_entries(*tables), key).p_value


def test_a_row_is_marked_where_the_paired_test_against_the_row_above_does_not_reject(paired):
    board, rows, pairs = paired
    files = rows["record_file"].tolist()
    assert [f"{m}/{k}" for m, k in zip(rows["model"], rows["kappa"])] == [
        "glyph_cnn/softmax",
        "glyph_cnn/energy",
        "glyph_cnn/max_logit",
        "glyph_cnn/entropy",
        "glyph_mlp/softmax",
        "glyph_mlp/max_logit",  # no per-image file
    ]
    expected = [False] + [_p_value(board, files[i], files[i - 1], "mean_ood_auroc") >= 0.05 for i in range(1, 5)]
    assert (
        paired_marks(rows, "mean_ood_auroc", pairs) == [*expected, False] == [False, False, True, False, False, False]
    )
    energy, softmax = rows.iloc[1], rows.iloc[0]  # their 95% intervals overlap: the old rule marked energy
    assert energy["mean_ood_auroc_high"] >= softmax["mean_ood_auroc_low"]
    assert paired_marks(rows, "mean_fpr_at_95_tpr", pairs) == [False] * 6  # no paired test
    lines = format_rows(rows, pairs=pairs).splitlines()
    assert [line.split()[:3] for line in lines[:1] + lines[2:8]] == [
        ["rank", "ranks", "model"],
        ["1", "1", "glyph_cnn"],
        ["2", "2-3", "glyph_cnn"],
        ["3\u2248", "2-3", "glyph_cnn"],
        ["4", "4", "glyph_cnn"],
        ["5", "5", "glyph_mlp"],
        ["6", "-", "glyph_mlp"],
    ]
    assert lines[8:] == [
        "\u2248: the paired test of mean-ood-auroc against the row above (DeLong's, on the images both entries saw)"
        " does not reject a difference at 5%",
        "ranks: the ranks an entry's paired tests of mean-ood-auroc allow",
    ]


def test_rank_ranges_count_the_entries_the_paired_tests_show_better_and_worse(paired):
    board, rows, pairs = paired
    files, values = rows["record_file"].tolist()[:5], rows["mean_ood_auroc"].tolist()[:5]
    expected = []
    for i in range(5):
        shown = [j for j in range(5) if j != i and _p_value(board, files[i], files[j], "mean_ood_auroc") < 0.05]
        better, worse = sum(values[j] > values[i] for j in shown), sum(values[j] < values[i] for j in shown)
        low, high = 1 + better, 5 - worse
        expected.append(str(low) if low == high else f"{low}-{high}")
    assert rank_spans(rows, "mean_ood_auroc", pairs) == [*expected, "-"] == ["1", "2-3", "2-3", "4", "5", "-"]
    by_acc = select(current_table(board), sort="id_acc")
    text = format_rows(by_acc, "id_acc", pairs=board_pairs(board, by_acc["record_file"].tolist()))
    assert [line.split()[:2] for line in text.splitlines()[2:8]] == [
        ["1", "1-4"],  # glyph_cnn's four kappas: one classifier, the same predictions
        ["2\u2248", "1-4"],
        ["3\u2248", "1-4"],
        ["4\u2248", "1-4"],
        ["5", "-"],  # glyph_mlp/max_logit, 0.81, without a file
        ["6", "5"],
    ]
    assert "(McNemar's, in Wald form, on the images both entries saw)" in text


def test_a_column_without_a_paired_test_or_a_board_without_files_says_so_in_one_line(paired, table, tmp_path):
    board, _, _ = paired
    by_fpr = select(current_table(board), sort="fpr_at_95_tpr")
    text = format_rows(by_fpr, "fpr_at_95_tpr", pairs=board_pairs(board, by_fpr["record_file"].tolist()))
    assert "\u2248" not in "".join(text.splitlines()[2:8]) and text.splitlines()[0].split()[:2] == ["rank", "model"]
    assert text.splitlines()[-1] == "no \u2248 marks or rank ranges: mean fpr@95 (ID+) has no paired test"
    rows = select(table)
    assert format_rows(rows, pairs=board_pairs(tmp_path / "b", rows["record_file"].tolist())).splitlines()[-1] == (
        "no \u2248 marks or rank ranges: no entry shown has per-image scores (the paired test needs them)"
    )
