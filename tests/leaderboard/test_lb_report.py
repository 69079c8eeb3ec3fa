"""The report reproduces the paper's headline claims from its published table."""

import math

import numpy as np
import pytest

from lb_boards import SUBMISSION
from lb_records import record
from leaderboard.errors import LeaderboardError
from leaderboard.report import (
    Skipped,
    best_per_kappa,
    best_per_model,
    correlations,
    distillation_lines,
    distillation_pairs,
    family,
    focus_rank,
    kendall_tau,
    model_rankings,
    ranking_correlations,
    ranking_lines,
    report,
    win_rates,
)
from leaderboard.store import add_records, current_table


@pytest.fixture(scope="module")
def table(paper_board):
    return current_table(paper_board)


def test_top_models_are_vits(table):
    models = best_per_model(table)
    assert len(models) == 694  # 697 models less the three broken runs
    top = models.head(10)
    assert top["model"].iloc[0] == "vit_large_patch16_384_original"
    assert top["mean_ood_auroc"].iloc[0] == pytest.approx(0.945769, abs=1e-6)
    assert top["model"].is_unique and top["model"].iloc[1] == "vit_large_patch32_384"  # once, not also as _original
    assert top["model"].map(family).value_counts().to_dict() == {"vit": 8, "beit": 2}
    for kappa, rows in best_per_kappa(table).items():
        assert rows["model"].iloc[0].startswith("vit_large"), kappa


def test_best_zero_shot_clip_against_the_others_like_with_like(table):
    rank = focus_rank(table)
    assert (rank.model, rank.kappa) == ("CLIP_RN50x64", "max_logit")
    assert rank.mean_ood_auroc == pytest.approx(0.853274, abs=1e-6)
    assert (rank.rank, rank.num_models) == (54, 694)
    assert rank.beats_models == pytest.approx(640 / 693)  # its best against each other model's best
    softmax = table[(table["kappa"] == "softmax") & (table["flag"] == "") & (table["model"] != rank.model)]
    unlike = (softmax["mean_ood_auroc"] < rank.mean_ood_auroc).mean()  # the paper's "outperforms 96% of models"
    assert unlike == pytest.approx(506 / 526) and round(unlike, 2) == 0.96  # its best against the others' softmax
    assert (rank.baseline_model, rank.num_baseline) == ("CLIP_ViT-L~14@336px", 526)  # softmax against softmax
    assert rank.baseline_auroc == pytest.approx(0.801646, abs=1e-6)
    assert rank.beats_baseline == pytest.approx(266 / 526)
    assert focus_rank(table, "^no-such-model") is None
    with pytest.raises(LeaderboardError, match="bad focus pattern"):
        focus_rank(table, "(")


def test_distillation_improves_detection(table):  # the paper's observation (1)
    pairs, alone = distillation_pairs(table)  # softmax, as the paper compares models
    assert len(pairs) == 26 and (pairs["gain"] > 0).all()
    assert pairs["gain"].mean() == pytest.approx(0.021457, abs=1e-6) and pairs["gain"].min() == pytest.approx(
        0.004667, abs=1e-6
    )
    assert pairs["family"].value_counts().to_dict() == {"xcit": 14, "pit": 4, "resmlp": 4, "deit": 3, "resnetv2": 1}
    by_name = pairs.set_index("distilled")
    assert by_name.loc["deit_base_distilled_patch16_224", "base"] == "deit_base_patch16_224"
    assert by_name.loc["deit_base_distilled_patch16_224", "gain"] == pytest.approx(0.829076 - 0.790095, abs=1e-5)
    assert by_name.loc["xcit_tiny_12_p8_224_dist", "base"] == "xcit_tiny_12_p8_224"
    assert by_name.loc["resnetv2_50x1_bit_distilled", "base"] == "resnetv2_50x1_bitm"
    assert len(alone) == 16 and alone[0] == "deit_tiny_distilled_patch16_224"  # only a max_logit entry in the table
    assert sum(name.endswith("_384_dist") for name in alone) == 14  # no undistilled XCiT at 384 px
    max_logit, _ = distillation_pairs(table, "max_logit")
    assert (len(max_logit), int((max_logit["gain"] > 0).sum())) == (27, 20)


def test_distillation_when_the_table_cannot_show_it(table):
    skipped = distillation_lines(table[~table["model"].str.contains("dist")])
    assert skipped == Skipped(
        "knowledge distillation", "no distilled model and its undistilled counterpart both with a valid softmax entry"
    )


def test_id_accuracy_correlates_with_detection(table):
    corr = correlations(table).set_index("kappa")
    assert corr.loc["all entries", "n"] == 1815
    assert corr.loc["all entries", "pearson"] == pytest.approx(0.373, abs=1e-3)
    assert corr.loc["softmax", "pearson"] == pytest.approx(0.726, abs=1e-3)
    assert (corr["pearson"] > 0).all() and (corr["spearman"] > 0).all()


def test_kappa_win_rates(table):
    rates, counts = win_rates(table)
    assert counts.loc["entropy", "softmax"] == 527
    assert rates.loc["entropy", "softmax"] == pytest.approx(1 - rates.loc["softmax", "entropy"])
    assert rates.loc["entropy", "softmax"] == pytest.approx(0.72, abs=0.005)
    assert rates.loc["softmax", "max_logit"] == pytest.approx(0.69, abs=0.005)


def test_report_text(table):
    text = report(table)
    assert text.startswith(
        "Leaderboard of imagenet-cood-paper2023 iclr2023 (no manifest: published numbers), 11 severity levels: "
        "1,821 entries, 697 models, 5 kappas."
    )
    assert "Flagged and left out below (6 entries, 3 models):" in text
    assert "    1. vit_large_patch16_384_original           max_logit    0.9458  (id-acc 0.8516)" in text
    assert "  families: vit 8, beit 2" in text
    assert "  CLIP_RN50x64 / max_logit: mean ood-auroc 0.8533" in text
    assert (
        "  rank 54 of 694 models (each by its best kappa): its max_logit entry beats 92.4% of the other 693 models' "
        "best entries" in text
    )
    assert (
        "  by softmax alone: CLIP_ViT-L~14@336px / softmax (mean ood-auroc 0.8016) beats 50.6% of the other 526 "
        "models' softmax entries" in text
    )
    assert "  distilled better in 26 of 26 pairs, mean gain +0.0215 (median +0.0181)" in text
    assert "  xcit: 14 of 14, mean gain +0.0177" in text and "not better" not in text
    assert "  softmax" in text and "Pearson r=+0.726" in text
    assert "  [1] entropy" in text and "72% (527)" in text
    assert "Skipped" not in text  # every section applies to the paper's board
    headings = [
        "Best models per kappa (mean ood-auroc over levels):",
        "Best model matching '^CLIP_(?!finetuned)':",
        "Knowledge distillation (distilled models vs. the same architecture without it, softmax mean ood-auroc):",
        "ID accuracy vs. mean ood-auroc:",
        "C-OOD ranking (mean ood-auroc) vs. ID ranking (id-auroc and aurc) of the models, per kappa (rank 1 = best):",
        "Kappa win rates (row beats column, over models with both; n in brackets):",
    ]
    lines = text.splitlines()
    assert [lines.index(h) for h in headings] == sorted(lines.index(h) for h in headings)


def test_a_board_of_one_model_in_words(tmp_path):
    add_records(tmp_path / "b", [record(kappa="energy_sub", params=SUBMISSION)], create=True)
    text = report(current_table(tmp_path / "b"), focus="glyph")
    lines = text.splitlines()
    assert lines[0] == (
        "Leaderboard of glyphs 1.0.0 (manifest abababababab), 11 severity levels: 1 entry, 1 model, 1 kappa."
    )
    assert "  energy_sub (1 model): glyph_cnn 0.8500" in lines and "Top 1 of 1 model, each by its best kappa:" in lines
    assert "  rank 1 of 1 model (each by its best kappa): no other model to compare" in lines
    assert "  by softmax alone: no model matching 'glyph' has a softmax entry to compare" in lines
    assert lines[1] == (
        "Skipped, as the board lacks the models they need: knowledge distillation (no distilled model and its "
        "undistilled counterpart both with a valid softmax entry); ID accuracy vs. mean ood-auroc (1 model, a "
        "correlation needs 3); C-OOD vs. ID ranking (1 model, a correlation needs 3); kappa win rates (1 kappa with "
        "valid entries, nothing to compare)."
    )
    assert "ID accuracy vs. mean ood-auroc:" not in lines and not any(line.startswith("Kappa win") for line in lines)
    assert "nan" not in text.lower() and "(1 models)" not in text
    code = SUBMISSION["code_sha256"]
    assert code not in "\n".join(lines[:-1])  # the kappa goes by its name; its hash is in the last section only
    assert lines[-2:] == ["Submission files' kappas, by the sha256 of their code:", f"  energy_sub: {code}"]


def test_a_two_model_board_skips_the_sections_it_lacks_the_models_for_in_one_line(tmp_path):
    records = [
        record(model="glyph_cnn", weights="1" * 64),
        record(model="glyph_cnn", weights="1" * 64, kappa="entropy", aurocs=[0.8] * 11),
        record(model="timm_x", weights="2" * 64, aurocs=[0.7] * 11),
    ]
    add_records(tmp_path / "b", records, create=True)
    lines = report(current_table(tmp_path / "b")).splitlines()
    assert lines[1] == (
        "Skipped, as the board lacks the models they need: the focus group's rank (no model matches "
        "'^CLIP_(?!finetuned)'); knowledge distillation (no distilled model and its undistilled counterpart both "
        "with a valid softmax entry); ID accuracy vs. mean ood-auroc (2 models, a correlation needs 3); C-OOD vs. ID "
        "ranking (2 models, a correlation needs 3)."
    )
    assert [line for line in lines if line and not line.startswith(" ")] == [
        lines[0],
        lines[1],
        "Best models per kappa (mean ood-auroc over levels):",
        "Top 2 of 2 models, each by its best kappa:",
        "Kappa win rates (row beats column, over models with both; n in brackets):",
    ]  # the sections that apply, and only those
    assert "  [2] softmax    100% (1)          -" in lines
    assert sum("Skipped" in line for line in lines) == 1
    add_records(tmp_path / "b", [record(model="m3", weights="3" * 64)])  # a third model: the correlations apply
    three = report(current_table(tmp_path / "b"))
    assert "ID accuracy vs. mean ood-auroc (" not in three and "ID accuracy vs. mean ood-auroc:" in three
    assert "C-OOD vs. ID ranking (" not in three and "  softmax (3 models):" in three


def test_correlations_that_cannot_be_computed_are_said_in_words(tmp_path):
    records = [record(model=f"m{i}", weights=f"{i + 1}" * 64, aurocs=[0.9 - 0.01 * i] * 11) for i in range(3)]
    records.append(record(model="m0", weights="1" * 64, kappa="entropy", acc=0.6))
    add_records(tmp_path / "b", records, create=True)
    table = current_table(tmp_path / "b")
    corr = correlations(table).set_index("kappa")
    assert corr["n"].to_dict() == {"all entries": 4, "entropy": 1, "softmax": 3}
    assert corr["pearson"].isna().to_dict() == {"all entries": False, "entropy": True, "softmax": True}
    lines = report(table).splitlines()
    assert "  entropy      not enough models to correlate (1 model)" in lines
    assert "  softmax      no correlation: id-acc or mean ood-auroc is the same for all 3 models" in lines


def test_two_submission_kappas_of_one_name_keep_apart(tmp_path):
    other = {**SUBMISSION, "code_sha256": "beef" * 16}
    add_records(
        tmp_path / "b",
        [record(kappa="energy_sub", params=SUBMISSION), record(kappa="energy_sub", params=other, aurocs=[0.9] * 11)],
        create=True,
    )
    text = report(current_table(tmp_path / "b"))
    assert "    1. glyph_cnn                                energy_sub #beefbeef 0.9000  (id-acc 0.8100)" in text
    assert "  [2] energy_sub #c0dec0de      0% (1)          -" in text and "(code_sha256" not in text


def _ranked_board(tmp_path):
    """Six glyph-like models in softmax (the sixth written before aurc existed: no id.aurc) and one in entropy."""
    values = [  # mean ood-auroc, id-auroc, aurc
        (0.90, 0.80, 0.05),
        (0.88, 0.85, 0.06),
        (0.86, 0.78, 0.07),
        (0.84, 0.70, 0.09),
        (0.82, 0.75, 0.08),
        (0.80, 0.72, None),
    ]
    records = []
    for i, (ood, id_auroc, aurc) in enumerate(values):
        rec = record(model=f"m{i}", weights=f"{i + 1}" * 64, aurocs=[ood] * 11)
        rec["id"]["auroc"] = id_auroc
        if aurc is not None:
            rec["id"]["aurc"] = aurc
        records.append(rec)
    records.append(record(model="m0", weights="1" * 64, kappa="entropy"))
    add_records(tmp_path / "b", records, create=True)
    return current_table(tmp_path / "b"), values


def test_kendall_tau_is_scipys_tau_b():
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(3)
    for n in (3, 10, 40):
        x, y = rng.integers(0, 5, n).astype(float), rng.normal(size=n)  # ties in x
        assert kendall_tau(x, y) == pytest.approx(scipy_stats.kendalltau(x, y).statistic, abs=1e-12)
    assert math.isnan(kendall_tau([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]))


def test_the_c_ood_ranking_beside_the_id_rankings_on_glyph_like_records(tmp_path):
    scipy_stats = pytest.importorskip("scipy.stats")
    table, values = _ranked_board(tmp_path)
    ranks = model_rankings(table)
    softmax = ranks["softmax"].set_index("model")
    assert softmax["ood"].tolist() == [1, 2, 3, 4, 5, 6]
    assert softmax["id_auroc"].tolist() == [2, 1, 3, 6, 4, 5]  # higher id-auroc ranks better
    assert softmax["id_aurc"].tolist()[:5] == [1, 2, 3, 5, 4] and math.isnan(softmax.loc["m5", "id_aurc"])

    corr = ranking_correlations(table).set_index(["kappa", "id"])
    ood = [v[0] for v in values]
    expected = {
        "id_auroc": (ood, [v[1] for v in values]),
        "id_aurc": (ood[:5], [-v[2] for v in values[:5]]),  # lower aurc is better
    }
    for column, (x, y) in expected.items():
        r = corr.loc[("softmax", column)]
        assert r["n"] == len(x)
        assert r["spearman"] == pytest.approx(scipy_stats.spearmanr(x, y).statistic, abs=1e-12)
        assert r["kendall"] == pytest.approx(scipy_stats.kendalltau(x, y).statistic, abs=1e-12)
    assert corr.loc[("softmax", "id_aurc"), "spearman"] == pytest.approx(0.9)  # one swapped pair of five
    assert (
        corr.loc[("entropy", "id_auroc"), "n"] == 1
        and corr.loc[("entropy", "id_auroc"), ["spearman", "kendall"]].isna().all()
    )

    lines = report(table).splitlines()
    start = lines.index(
        "C-OOD ranking (mean ood-auroc) vs. ID ranking (id-auroc and aurc) of the models, per kappa (rank 1 = best):"
    )
    section = lines[start : lines.index("", start)]
    rho, tau = corr.loc[("softmax", "id_auroc"), ["spearman", "kendall"]]
    assert section[1:4] == [
        "  entropy (1 model):",
        "    id-auroc  not enough models to correlate (1 model with both)",
        "    aurc      not enough models to correlate (0 models with both)",
    ]
    assert "  softmax (6 models):" in section
    assert f"    id-auroc  n=6     Spearman rho={rho:+.3f}  Kendall tau={tau:+.3f}" in section
    assert "    aurc      n=5     Spearman rho=+0.900  Kendall tau=+0.800" in section
    assert "         c-ood  id-auroc      aurc  model" in section
    assert "             4         6         5  m3" in section and "             6         5         -  m5" in section
    assert "nan" not in "\n".join(section).lower()


def test_a_constant_id_ranking_and_a_short_listing_are_said_in_words(tmp_path):
    records = [record(model=f"m{i}", weights=f"{i + 1}" * 64, aurocs=[0.9 - 0.01 * i] * 11) for i in range(4)]
    add_records(tmp_path / "b", records, create=True)  # every id-auroc 0.86, no aurc
    lines = ranking_lines(current_table(tmp_path / "b"), top=2)
    assert lines[1] == "  the board lacks aurc (id_aurc): no valid entry holds it; not ranked by it"
    assert "    id-auroc  no correlation: one of the rankings is the same for all 4 models" in lines
    assert lines[-1] == "    ... 2 more models" and lines[-2].endswith("  m1")


def test_the_papers_board_ranks_by_id_auroc_and_says_it_lacks_aurc(table):
    scipy_stats = pytest.importorskip("scipy.stats")
    corr = ranking_correlations(table).set_index(["kappa", "id"])
    assert set(corr.index.get_level_values("id")) == {"id_auroc"}  # the paper publishes no AURC
    for kappa in ("softmax", "entropy"):
        entries = table[(table["flag"] == "") & (table["kappa"] == kappa)]
        entries = entries.sort_values("mean_ood_auroc", ascending=False).drop_duplicates("model")
        both = entries[["mean_ood_auroc", "id_auroc"]].dropna()
        r = corr.loc[(kappa, "id_auroc")]
        assert r["n"] == len(both) > 500
        assert r["spearman"] == pytest.approx(scipy_stats.spearmanr(both).statistic, abs=1e-9)
        assert r["kendall"] == pytest.approx(scipy_stats.kendalltau(*both.T.values).statistic, abs=1e-9)
    text = report(table)
    assert "  the board lacks aurc (id_aurc): no valid entry holds it; not ranked by it" in text
    assert f"    id-auroc  n={int(corr.loc[('softmax', 'id_auroc'), 'n']):<5} Spearman rho=" in text


def test_a_board_without_any_id_ranking_says_so_and_stops(tmp_path):
    records = [record(model=f"m{i}", weights=f"{i + 1}" * 64) for i in range(3)]
    for rec in records:
        rec["id"]["auroc"] = None  # every prediction right: undefined
    add_records(tmp_path / "b", records, create=True)
    assert ranking_lines(current_table(tmp_path / "b")) == [
        "C-OOD ranking (mean ood-auroc) vs. ID ranking (id-auroc and aurc) of the models, per kappa (rank 1 = best):",
        "  the board lacks id-auroc (id_auroc), aurc (id_aurc): no valid entry holds them; not ranked by them",
    ]
