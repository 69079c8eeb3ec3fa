import pytest

from leaderboard.errors import LeaderboardError
from leaderboard.paper import BENCHMARK, paper_records, read_paper_table
from leaderboard.schema import validate_record
from leaderboard.store import add_records, current_table, load_config


def test_import_yields_1848_entries_with_11_levels(paper_board):
    table = current_table(paper_board)
    assert len(table) == 1848
    assert table["entry_id"].is_unique
    assert table["model"].nunique() == 706
    assert (table["num_levels"] == 11).all()
    assert table[[f"ood_auroc_l{i}" for i in range(11)]].notna().all().all()
    assert (table["provenance"] == "paper").all()
    assert table["kappa_name"].value_counts().to_dict() == {
        "max_logit": 677,
        "softmax": 539,
        "entropy": 536,
        "odin": 65,
        "mc_dropout": 31,
    }
    assert set(table["kappa"]) == {"softmax", "entropy", "max_logit", "mc_dropout", "odin(epsilon=1e-05,temperature=2)"}
    assert load_config(paper_board) == {"format_version": 1, "benchmark": BENCHMARK, "num_levels": 11}


def test_broken_efficientnets_are_flagged(paper_board):
    table = current_table(paper_board)
    flagged = table[table["flag"] != ""]
    assert sorted(set(flagged["model"])) == ["efficientnet_b5", "efficientnet_b6", "efficientnet_b7"]
    assert sorted(zip(flagged["model"], flagged["kappa"])) == [
        (f"efficientnet_b{b}", k) for b in (5, 6, 7) for k in ("mc_dropout", "softmax")
    ]
    assert flagged["flag"].str.startswith("id-acc near chance (0.001").all()
    assert flagged["id_acc"].max() < 0.0012


def test_values_match_the_csv(paper_table, paper_board):
    table = current_table(paper_board).set_index(["model", "kappa_name"])
    rows = paper_table[
        (paper_table["model name"] == "vit_large_patch16_384_original")
        & (paper_table["confidence function"] == "max_logit")
    ].sort_values("severity level")
    entry = table.loc[("vit_large_patch16_384_original", "max_logit")]
    assert [entry[f"ood_auroc_l{i}"] for i in range(11)] == rows["ood-auroc"].tolist()
    assert entry["mean_ood_auroc"] == pytest.approx(rows["ood-auroc"].mean(), abs=1e-12)
    assert entry["mean_ood_auroc"] == pytest.approx(0.945769, abs=1e-6)
    assert entry["id_acc"] == rows["id-acc"].iloc[0] == pytest.approx(0.85162)
    assert entry["id_auroc"] == rows["id-auroc"].iloc[0]
    odin = paper_table[paper_table["confidence function"] == "odin_temperature-2_noise_mag-1e-05"]
    assert table.xs("odin", level="kappa_name")["kappa_params"].unique().tolist() == [
        '{"epsilon": 1e-05, "temperature": 2}'
    ]
    assert len(table.xs("odin", level="kappa_name")) == odin["model name"].nunique() == 65


def test_records_are_valid_and_keep_what_the_paper_did_not_report(paper_table):
    records = paper_records(paper_table)
    assert len(records) == 1848
    first = records[0]
    validate_record(first)
    assert first["levels"][0]["fpr_at_95_tpr"] is None and first["levels"][0]["level_score"] is None
    assert first["levels"][10]["percentile"] == 1.0 and first["levels"][0]["level"] == 0
    assert first["model"]["weights_sha256"] is None and first["benchmark"]["manifest_sha256"] is None


def test_importing_twice_adds_nothing(paper_table, tmp_path):
    records = paper_records(paper_table[paper_table["model name"] == "resnet50"])
    assert len(records) == 4
    ids = add_records(tmp_path / "b", records, create=True)
    lines = []
    assert add_records(tmp_path / "b", records, create=True, say=lines.append) == ids  # the same entries
    assert len(lines) == 4 and all(line.endswith("with the same results; skipped") for line in lines)
    assert len(current_table(tmp_path / "b")) == 4


def test_not_the_paper_table(tmp_path, paper_table):
    bad = tmp_path / "bad.csv"
    paper_table.drop(columns=["ood-auroc"]).head(20).to_csv(bad, index=False)
    with pytest.raises(LeaderboardError, match="not the paper's table, missing column 'ood-auroc'"):
        read_paper_table(bad)
    paper_table.head(11).assign(**{"confidence function": "gradnorm"}).to_csv(bad, index=False)
    with pytest.raises(LeaderboardError, match="unknown confidence function 'gradnorm'"):
        read_paper_table(bad)
    with pytest.raises(LeaderboardError, match="cannot read"):
        read_paper_table(tmp_path / "missing.csv")


def test_a_harness_board_rejects_paper_records(paper_table, tmp_path, make_record):
    add_records(tmp_path / "b", [make_record()], create=True)
    with pytest.raises(
        LeaderboardError, match="unknown benchmark 'imagenet-cood-paper2023'; this leaderboard holds 'glyphs'"
    ):
        add_records(tmp_path / "b", paper_records(paper_table.head(11)))
