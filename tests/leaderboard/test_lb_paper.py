import pytest

from leaderboard import paper
from leaderboard.errors import LeaderboardError
from leaderboard.paper import BENCHMARK, alias_pairs, paper_records, read_paper_table
from leaderboard.schema import validate_record
from leaderboard.store import add_records, current_table, load_config
from leaderboard.table import read_table
from leaderboard.views import format_rows, select


def test_import_yields_1821_entries_with_11_levels(paper_board):
    table = current_table(paper_board)
    assert len(table) == 1821
    assert table["entry_id"].is_unique
    assert table["model"].nunique() == 697
    assert (table["num_levels"] == 11).all()
    assert table[[f"ood_auroc_l{i}" for i in range(11)]].notna().all().all()
    assert (table["provenance"] == "paper").all()
    assert table["kappa_name"].value_counts().to_dict() == {
        "max_logit": 671,
        "softmax": 530,
        "entropy": 527,
        "odin": 62,
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
    assert len(table.xs("odin", level="kappa_name")) == odin["model name"].nunique() - 3 == 62  # 3 listed twice


def test_records_are_valid_and_keep_what_the_paper_did_not_report(paper_table):
    records = paper_records(paper_table)
    assert len(records) == 1821
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


LISTED_TWICE = [  # the same model under two names: its rows agree on every kappa and level both names have
    ("new_timm_resnet50", "resnet50"),
    ("resnet18", "resnet18_torchvision"),
    ("vgg11", "vgg11_torchvision"),
    ("vgg13", "vgg13_torchvision"),
    ("vgg16", "vgg16_torchvision"),
    ("vgg19", "vgg19_torchvision"),
    ("vit_base_patch16_224_sam", "vit_base_patch16_sam_224"),
    ("vit_base_patch32_224_sam", "vit_base_patch32_sam_224"),
    ("vit_large_patch32_384", "vit_large_patch32_384_original"),
]


def test_the_models_listed_twice_are_found_by_identical_rows(paper_table, monkeypatch):
    pairs = alias_pairs(paper_table)
    assert pairs == LISTED_TWICE
    records = paper_records(paper_table)
    assert len({r["model"]["name"] for r in records}) == paper_table["model name"].nunique() - len(pairs) == 697
    monkeypatch.setattr(paper, "ALIAS_TOLERANCE", 1e-3)  # 10x looser finds no other pair: the next differs by 1.2e-3
    assert alias_pairs(paper_table) == pairs
    monkeypatch.setattr(paper, "ALIAS_TOLERANCE", 2e-5)  # 10x tighter finds one: the rest are re-evaluations
    assert alias_pairs(paper_table) == [("vit_base_patch16_224_sam", "vit_base_patch16_sam_224")]


def test_a_merged_model_keeps_its_other_name_and_every_kappa(paper_table, paper_board):
    table = current_table(paper_board)
    aliases = {name for cell in table["aliases"] for name in cell.split(", ") if name}
    assert aliases == {name for pair in LISTED_TWICE for name in pair} - set(table["model"]) and len(aliases) == 9
    named = table[table["aliases"] != ""].drop_duplicates("model").set_index("model")["aliases"].to_dict()
    assert named["vgg13"] == "vgg13_torchvision" and named["resnet50"] == "new_timm_resnet50" and len(named) == 9
    merged = table[table["model"] == "vit_large_patch32_384"].set_index("kappa_name")
    assert sorted(merged.index) == ["entropy", "max_logit", "mc_dropout", "odin", "softmax"]  # mc_dropout: the alias's
    rows = paper_table[paper_table["model name"] == "vit_large_patch32_384_original"]
    dropout = rows[rows["confidence function"] == "mcd_entropy"].sort_values("severity level")
    assert [merged.loc["mc_dropout", f"ood_auroc_l{i}"] for i in range(11)] == dropout["ood-auroc"].tolist()
    own = paper_table[
        (paper_table["model name"] == "vit_large_patch32_384") & (paper_table["confidence function"] == "softmax")
    ]
    assert merged.loc["softmax", "id_acc"] == own["id-acc"].iloc[0] == 0.81506  # the alias's 0.81508 is not mixed in


def test_the_paper_top_10_has_no_model_twice(paper_board):
    rows = select(current_table(paper_board), include_flagged=False).drop_duplicates("model").head(10)
    names = {*rows["model"], *(a for cell in rows["aliases"] for a in cell.split(", ") if a)}
    assert len(names) == 10 + 1 and rows["model"].iloc[1] == "vit_large_patch32_384"  # its alias: once, as ITS alias
    assert "vit_large_patch32_384_original" not in set(rows["model"])


def test_the_import_is_the_same_for_any_row_order(paper_table):
    shuffled = paper_table.sample(frac=1, random_state=7)
    assert paper_records(shuffled) == paper_records(paper_table)


def test_show_finds_a_model_by_its_other_name(paper_board):
    rows = select(current_table(paper_board), model="VGG13_torch")
    assert set(rows["model"]) == {"vgg13"} and len(rows) == 3
    assert format_rows(rows).splitlines()[-1] == "vgg13: also listed as vgg13_torchvision"


def test_a_board_imported_before_aliases_still_shows(paper_table, tmp_path):
    add_records(tmp_path / "b", paper_records(paper_table[paper_table["model name"] == "vgg13"]), create=True)
    old = tmp_path / "old.parquet"
    current_table(tmp_path / "b").drop(columns="aliases").to_parquet(old, index=False)
    table = read_table(old)
    assert table["aliases"].tolist() == ["", "", ""] and list(table.columns) == list(current_table(tmp_path / "b"))
    assert format_rows(select(table)).splitlines()[2].split()[:2] == ["1", "vgg13"]
