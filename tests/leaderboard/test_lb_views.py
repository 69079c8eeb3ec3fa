import pytest

from dataset_builder.console import plural
from lb_boards import SUBMISSION
from lb_records import GLYPHS, record
from leaderboard.errors import LeaderboardError
from leaderboard.store import add_records, current_table
from leaderboard.views import benchmark_phrase, format_rows, heading, kappa_names, select, sort_column


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
