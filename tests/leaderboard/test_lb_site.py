"""The static site's files: one row per model in the embedded JSON, the downloads, the model pages, the raw records,
the per-class drill-down. The browser's behaviour is tested in test_lb_site_browser.py."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lb_boards import NUM_LEVELS, SUBMISSION, small_board, wide_board
from lb_pairs import paired_board
from lb_records import record
from leaderboard.pairs import board_pairs
from leaderboard.report import win_rates
from leaderboard.site import DIGITS, PAIRED_KEYS, build_site, page_name
from leaderboard.store import add_records, current_table
from leaderboard.views import family


def embedded(page: Path, element: str = "board-data") -> dict:
    match = re.search(rf'<script type="application/json" id="{element}">(.*?)</script>', page.read_text(), re.S)
    return json.loads(match.group(1))


@pytest.fixture(scope="module")
def paper_site(paper_board, tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    pages = build_site(current_table(paper_board), out, "v1", board=paper_board)
    return out, pages


def test_one_row_per_model_of_the_paper(paper_site, paper_board):
    out, pages = paper_site
    table = current_table(paper_board)
    data = embedded(out / "index.html")
    assert len(data["models"]) == 697 == table["model"].nunique()
    assert sum(any(not e.get("flag") for e in m["e"]) for m in data["models"]) == 694
    assert "697 models (694 valid) from 1821 entries" in unescape(
        re.sub(r"<[^>]+>", "", (out / "index.html").read_text())
    )
    assert sum(len(m["e"]) for m in data["models"]) == 1821
    assert data["levels"] == NUM_LEVELS and data["kappas"] == sorted(table["kappa"].unique())
    by_name = {m["m"]: m for m in data["models"]}
    best = table[table["flag"] == ""].sort_values("mean_ood_auroc", ascending=False).drop_duplicates("model")
    for row in best.head(50).itertuples():
        first = by_name[row.model]["e"][0]  # each model's first entry is its best valid one
        assert first["k"] == row.kappa and "flag" not in first
        assert first["mean"] == pytest.approx(row.mean_ood_auroc, abs=1e-6)
        assert first["l"] == pytest.approx([getattr(row, f"ood_auroc_l{i}") for i in range(NUM_LEVELS)], abs=1e-6)
    invalid = sorted(m["m"] for m in data["models"] if all(e.get("flag") for e in m["e"]))
    assert invalid == ["efficientnet_b5", "efficientnet_b6", "efficientnet_b7"]
    for m in data["models"]:  # valid entries first, best first
        valid = [e["mean"] for e in m["e"] if not e.get("flag")]
        assert [not e.get("flag") for e in m["e"]] == sorted((not e.get("flag") for e in m["e"]), reverse=True)
        assert valid == sorted(valid, reverse=True)
    assert by_name["tf_efficientnet_b0_ns"]["f"] == "EfficientNet" and by_name["CLIP_ViT-L~14"]["f"] == "CLIP"
    assert len(pages) == 1 + 697 + 1  # index, a page per model, the records' list
    assert by_name["vgg13"]["a"] == "vgg13_torchvision" and "a" not in by_name["vgg16_bn_torchvision"]
    assert sum("a" in m for m in data["models"]) == 9  # the models the paper's table lists under two names
    page = page_text(out / "models" / page_name("vit_large_patch32_384"))
    assert "also listed as vit_large_patch32_384_original (the published table also lists this model under" in page
    assert "also listed as" not in page_text(out / "models" / page_name("vgg16_bn_torchvision"))


def test_downloads_load_with_pandas(paper_site, paper_board):
    out, _ = paper_site
    table = current_table(paper_board)
    pd.testing.assert_frame_equal(pd.read_parquet(out / "downloads" / "leaderboard.parquet"), table)
    csv = pd.read_csv(out / "downloads" / "leaderboard.csv")
    assert len(csv) == 1821 and list(csv.columns) == list(table.columns)
    assert csv["mean_ood_auroc"].tolist() == pytest.approx(table["mean_ood_auroc"].tolist())
    index = (out / "index.html").read_text()
    for link in [
        'href="downloads/leaderboard.csv"',
        'href="downloads/leaderboard.parquet"',
        'href="records/index.html"',
        'href="https://arxiv.org/abs/2302.11893"',
        'src="static/site.js"',
        'href="static/site.css"',
    ]:
        assert link in index
    assert "http" not in re.sub(r'href="https://arxiv\.org[^"]*"', "", index).replace("http://www.w3.org", "")  # no CDN
    assert (out / "static" / "site.js").stat().st_size > 1000 and (out / "static" / "site.css").is_file()


def test_raw_records_are_copied_byte_for_byte(paper_site, paper_board):
    out, _ = paper_site
    names = sorted(p.name for p in (paper_board / "records").glob("*.json"))
    assert sorted(p.name for p in (out / "records").glob("*.json")) == names and len(names) == 1821
    assert (out / "records" / names[0]).read_bytes() == (paper_board / "records" / names[0]).read_bytes()
    assert (out / "records" / "index.html").read_text().count('<li><a href="') == 1821


def test_win_rates_match_the_report(paper_site, paper_board):
    out, _ = paper_site
    rates, counts = win_rates(current_table(paper_board))
    html = (out / "index.html").read_text()
    cells = re.findall(r'<td data-v="([^"]+)" data-n="(\d+)"', html)
    expected = [
        (rates.loc[a, b], counts.loc[a, b]) for a in rates.index for b in rates.columns if not pd.isna(rates.loc[a, b])
    ]
    assert len(cells) == len(expected) == 20
    for (rate, n), (want_rate, want_n) in zip(cells, expected):
        assert float(rate) == pytest.approx(want_rate) and int(n) == want_n
    assert min(n for _, n in expected) == 8 and 'class="few"' not in html  # every cell coloured: 8+ models


def test_a_win_rate_of_fewer_than_3_models_is_grey_with_its_count(tmp_path):
    table = current_table(small_board(tmp_path))  # softmax and entropy both: vit_tiny_patch16_224 alone
    build_site(table, tmp_path / "site", "current")
    html = (tmp_path / "site" / "index.html").read_text()
    rates, counts = win_rates(table)
    assert (rates.loc["softmax", "entropy"], counts.loc["softmax", "entropy"]) == (1.0, 1)
    cells = re.findall(
        r'<td class="few" data-v="([^"]+)" data-n="(\d+)" title="([^"]+)">([^<]+)<small>([^<]+)</small>', html
    )
    assert cells == [  # rows: entropy, softmax
        ("0.0", "1", "1 model: too few for a rate", "0% ", "(1)"),
        ("1.0", "1", "1 model: too few for a rate", "100% ", "(1)"),
    ]
    assert "--rate" not in html and "A cell of fewer than\n3 models is drawn grey" in html


def test_a_paper_model_page(paper_site):
    out, _ = paper_site
    text = (out / "models" / page_name("resnet50")).read_text()
    assert "<h1>resnet50</h1>" in text and text.count('<section class="entry"') == 4
    assert '<dd id="params">unknown</dd>' in text and "ResNet" in text
    assert text.count('class="record" href="../records/') == 4
    assert (
        '<span class="badge paper">softmax: paper</span>' in text and "self-reported" not in text
    )  # published numbers
    assert "per-class" not in text.lower()
    plot = embedded(out / "models" / page_name("resnet50"), "model-data")
    assert len(plot["curves"]) == 4 and all(len(c["values"]) == NUM_LEVELS for c in plot["curves"])


def page_text(path: Path) -> str:
    """A page's text without its tags and embedded data, whitespace collapsed."""
    html = re.sub(r"<script.*?</script>", "", path.read_text(), flags=re.S)
    return " ".join(unescape(re.sub(r"<[^>]+>", "", html)).split())


def test_the_paper_site_says_what_it_shows(paper_site):
    out, _ = paper_site
    html, text = (out / "index.html").read_text(), page_text(out / "index.html")
    data = embedded(out / "index.html")
    assert "697 models (694 valid) from 1821 entries, 11 severity levels" in text
    assert "manifest" not in text and "none" not in text  # the paper's benchmark has no manifest: nothing printed
    assert (
        "Columns 0\u201310: the severity levels (0 the easiest to detect, 10 the hardest); each cell is the entry's "
        "ood-auroc at that level \u00d7 100" in text
    )  # the heatmap strip's legend
    assert (
        not {"fpr", "n"} & set(data["cols"]) and 'data-sort="fpr"' not in html and 'data-sort="n"' not in html
    )  # columns the paper's records leave empty are not shown
    odin = "odin(epsilon=1e-05,temperature=2)"
    assert data["short"] == {}  # every kappa as show and the CSV write it
    assert f'<th title="{odin}">{odin}</th>' in html and f'<label title="{odin}">' in html
    assert {e.get("ver") for m in data["models"] for e in m["e"]} == {"paper"}
    assert re.findall(r'<option value="(paper|verified|self-reported)">', html) == ["paper"]
    assert '<details id="filters"' in html and '<input type="checkbox" id="scatter-flagged">' in html
    page = page_text(out / "models" / page_name("resnet50"))
    assert "mean fpr@95" not in page and "weights" not in page and "none" not in page
    assert "Entry" in page and ", paper; source Galil" in page


def test_a_one_model_site_and_the_harness_columns(tmp_path):
    add_records(tmp_path / "b", [record(model="solo")], create=True)
    out = tmp_path / "site"
    build_site(current_table(tmp_path / "b"), out, "current", board=tmp_path / "b")
    text, html = page_text(out / "index.html"), (out / "index.html").read_text()
    manifest = current_table(tmp_path / "b")["manifest_sha256"].iloc[0]
    assert "1 model (1 valid) from 1 entry, 11 severity levels" in text and f"benchmark manifest {manifest}" in text
    data = embedded(out / "index.html")
    assert {"fpr_at_95_tpr", "fpr_at_99_tpr", "n"} <= set(data["cols"])  # the harness's records fill them
    assert {"fpr_at_95_tpr", "fpr_at_99_tpr"} <= set(data["lower"]) and "n" not in data[
        "lower"
    ]  # best first: ascending
    assert 'data-sort="fpr_at_95_tpr"' in html and 'data-sort="fpr_at_99_tpr"' in html and 'data-sort="n"' in html
    assert "1 record, byte for byte" in page_text(out / "records" / "index.html")
    page = page_text(out / "models" / page_name("solo"))
    assert "mean fpr@95 (ID+)" in page and "mean fpr@99 (ID+)" in page and "harness, self-reported" in page


def test_model_page_metrics_verification_and_per_class(tmp_path):
    board = small_board(tmp_path)
    out = tmp_path / "site"
    build_site(current_table(board), out, "v2", board=board)
    page = (out / "models" / page_name("glyph_cnn")).read_text()
    for label in ["ood-auroc", "fpr@95 (ID+)", "aupr-in", "aupr-out", "ood avg conf", "fpr@99 (ID+)"]:
        assert f"<th>{label}</th>" in page
    assert "<td>0.3500</td>" in page  # level 5's fpr@95 (0.3 + 0.01 * 5)
    assert "<td>0.5500</td>" in page  # level 5's fpr@99 (0.5 + 0.01 * 5)
    assert '<dd id="params">123,456</dd>' in page
    assert '<span class="badge verified">softmax: verified</span>' in page and "worker: gpu-1" in page
    assert page.count('class="level-classes"') == NUM_LEVELS
    header = re.search(r'<table class="classes"><thead><tr>(.*?)</tr>', page).group(1)
    assert re.findall(r"<th[^>]*>([^<]+)</th>", header)[:3] == [
        "ood-auroc",
        "examples",
        "class",
    ]  # score and thumbnails first
    assert "class 3-0 &lt;i&gt;" in page and "<i>" not in page  # names escaped
    thumbs = re.findall(r'<img src="([^"]+)"', page)
    assert len(thumbs) == NUM_LEVELS * 2 * 2
    for thumb in thumbs:
        assert (out / "models" / thumb).resolve().read_bytes()[:4] == b"\x89PNG"
    assert 'href="../attachments/' in page and "per_class.parquet" in page
    sidecar = next(out.glob("attachments/*/per_class/per_class.parquet"))
    assert len(pd.read_parquet(sidecar)) == NUM_LEVELS * 4
    data = embedded(out / "index.html")
    by_name = {m["m"]: m for m in data["models"]}
    assert by_name["glyph_cnn"]["e"][0]["ver"] == "verified" and "ver" not in by_name["vit_tiny_patch16_224"]["e"][0]
    assert [e["k"] for e in by_name["vit_tiny_patch16_224"]["e"]] == ["softmax", "entropy"]
    assert by_name["tf_efficientnet_b0"]["e"][0]["flag"].startswith("id-acc near chance")
    other = (out / "models" / page_name("vit_tiny_patch16_224")).read_text()
    assert "<h3>" not in other and other.count("self-reported") >= 2


def test_the_site_without_the_records(tmp_path):
    board = small_board(tmp_path)
    out = tmp_path / "site"
    pages = build_site(current_table(board), out, "current")
    assert [p.name for p in pages][0] == "index.html" and len(pages) == 4
    assert not (out / "records").exists() and "raw records" not in (out / "index.html").read_text()
    page = (out / "models" / page_name("glyph_cnn")).read_text()
    assert "<th>ood-auroc</th>" in page and "<th>fpr@95 (ID+)</th>" not in page
    data = embedded(out / "index.html")  # no board: no paired tests, no ranks column
    assert "pairs" not in data and not any("pi" in e for m in data["models"] for e in m["e"])
    assert 'class="ranks"' not in (out / "index.html").read_text()


def test_the_index_carries_the_paired_tests_of_the_entries_with_per_image_scores(tmp_path):
    board = paired_board(tmp_path)
    table = current_table(board)
    out = tmp_path / "site"
    build_site(table, out, "current", board=board)
    data = embedded(out / "index.html")
    found, at = board_pairs(board, table["record_file"].tolist())
    where = {(r.model, r.kappa): at[i] for i, r in enumerate(table.itertuples())}
    entries = [(where[(m["m"], e["k"])], e) for m in data["models"] for e in m["e"]]
    assert sorted(e.get("pi", -1) >= 0 for _, e in entries) == [False] + [True] * 5  # glyph_mlp max_logit: no file
    assert all(("pi" in e) == (i >= 0) for i, e in entries)
    ours = sorted((e["pi"], i) for i, e in entries if i >= 0)  # the site's index -> board_pairs's
    keys = {**PAIRED_KEYS, **{f"l{level}": f"l{level}" for level in range(3)}}
    assert sorted(data["pairs"]) == sorted(keys) and len(found.values) == len(keys)
    order = [i for _, i in ours]
    upper = np.triu_indices(len(order), 1)
    for site, key in keys.items():
        values = found.values[key][order]
        se = found.se[key][np.ix_(order, order)][upper]
        assert data["pairs"][site]["v"] == pytest.approx(values.tolist(), rel=10.0 ** (1 - DIGITS), abs=0)
        assert data["pairs"][site]["se"] == pytest.approx(se.tolist(), rel=10.0 ** (1 - DIGITS), abs=0)
    numbers = [x for p in data["pairs"].values() for part in p.values() for x in part if x]
    assert numbers and all(float(f"{x:.{DIGITS}g}") == x for x in numbers)  # compact: 9 significant digits
    legend = page_text(out / "index.html")
    assert (
        "\u2248 beside a rank: the paired test of this row against the row above (on the images both entries saw, "
        "for the sorted metric: DeLong's for the mean, id-auroc or a level, McNemar's for id-acc)" in legend
    )
    assert "does not reject a difference at 5%; ranks: the ranks the paired tests allow" in legend


def test_families():
    assert family("tf_efficientnet_b7_ns") == family("efficientnetv2_rw_s") == "EfficientNet"
    assert family("CLIP_finetuned_ViT-L~14@336px") == "CLIP"
    assert family("gluon_seresnext101_32x4d") == "ResNeXt" and family("ssl_resnet50") == "ResNet"
    assert family("mobilevitv2_200") == "MobileViT" and family("vit_base_r50_s16_384") == "ViT"
    assert family("mynet_small") == "mynet" == family("MyNet-L")


def test_an_empty_leaderboard(tmp_path):
    from lb_records import GLYPHS
    from leaderboard.store import init_leaderboard

    init_leaderboard(tmp_path / "b", GLYPHS)
    out = tmp_path / "site"
    pages = build_site(current_table(tmp_path / "b"), out, "current", board=tmp_path / "b")
    assert [p.name for p in pages] == ["index.html"]
    assert (
        embedded(out / "index.html")["models"] == []
        and len(pd.read_parquet(out / "downloads" / "leaderboard.parquet")) == 0
    )


def test_a_submission_kappa_goes_by_its_name(tmp_path):
    board = wide_board(tmp_path)
    out = tmp_path / "site"
    build_site(current_table(board), out, "current", board=board)
    code = SUBMISSION["code_sha256"]
    label = f"energy_sub(code_sha256={code},source=submission)"
    data = embedded(out / "index.html")
    assert data["short"] == {label: "energy_sub"}
    html = (out / "index.html").read_text()
    assert f'<option value="{label}" title="{label}">energy_sub</option>' in html
    assert f'<th title="{label}">energy_sub</th>' in html and code not in page_text(out / "index.html")
    page = out / "models" / page_name("resnet50")
    assert embedded(page, "model-data")["curves"][0] == {
        "label": "energy_sub",
        "title": label,
        "values": pytest.approx([0.91 - 0.02 * level for level in range(NUM_LEVELS)]),
    }
    assert page_text(page).count(code) == 1  # in the entry's details: "a submission file's kappa (code sha256 ...)"
    assert f"a submission file's kappa (code sha256 {code})" in page_text(page)
