"""The site in a real headless browser (Debian's chromium, driven by playwright): the kappa selector, the filters,
the rank after sorts and filters, the charts following the view, hover values, the permalink, the layout at 1280 px
and on a phone (on the README's board and the paper's: the first screen of a phone, a model page's tables at 1280 px);
screenshots at 1280x900 and 390x844 go to $COOD_SITE_SCREENSHOTS (or a site-screenshots folder
under pytest's tmp dir), their paths printed."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from harness.method.pairwise import rank_ranges
from lb_boards import SUBMISSION, readme_board, small_board, wide_board
from lb_pairs import models_board
from lb_records import interval_records, record
from leaderboard.pairs import board_pairs
from leaderboard.report import win_rates
from leaderboard.site import FEW_MODELS, build_site, page_name
from leaderboard.store import add_records, current_table

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="the browser tests need chromium (Debian: apt-get install chromium)"),
]
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# no "/": names never hold a path separator
EVIL = '<img src=x onerror="window.pwned=1"><svg onload="window.pwned=2"><b>&amp;'
ROWS = "#leaderboard tbody tr"


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def paper_site(paper_board, tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    build_site(current_table(paper_board), out, "v1", board=paper_board)
    return out


@pytest.fixture(scope="module")
def table(paper_board):
    return current_table(paper_board)


@pytest.fixture
def page(browser, paper_site):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto((paper_site / "index.html").as_uri())
    yield page
    page.close()
    assert errors == []


def settle(page) -> None:
    """Wait until every row of the view is in the table (the page draws the first rows at once, the rest next)."""
    page.wait_for_function("!document.getElementById('leaderboard').dataset.pending")


def count(page) -> int:
    settle(page)
    return page.locator(ROWS).count()


def shown(page, cls: str) -> list[str]:
    """The ``data-v`` of one cell class in every row of the table, top to bottom."""
    settle(page)
    return page.eval_on_selector_all(ROWS, f"rows => rows.map(r => r.querySelector('td.{cls}').dataset.v)")


def column(page, index: int) -> list[str]:
    settle(page)
    return page.eval_on_selector_all(ROWS, f"rows => rows.map(r => r.cells[{index}].dataset.v)")


def strip(page, level: int) -> list[float]:
    settle(page)
    return page.eval_on_selector_all(
        ROWS, f"rows => rows.map(r => parseFloat(r.querySelectorAll('.strip span')[{level}].dataset.v))"
    )


def test_one_row_per_model_and_the_kappa_selector(page, table):
    assert page.title() == "C-OOD leaderboard: imagenet-cood-paper2023 iclr2023"
    assert count(page) == 697 and page.locator("#count").inner_text() == "697"
    valid = table[table["flag"] == ""]
    best = valid.sort_values(["mean_ood_auroc", "model"], ascending=[False, True]).drop_duplicates("model")
    models, kappas = shown(page, "model"), shown(page, "kap")
    assert (
        models[:694] == best["model"].tolist()
    )  # each model by its best kappa, best first; then the 3 all-flagged ones
    assert kappas[:694] == best["kappa"].tolist()
    assert [float(v) for v in shown(page, "mean")[:694]] == pytest.approx(best["mean_ood_auroc"].tolist(), abs=1e-6)
    assert shown(page, "rank") == [str(i) for i in range(1, 698)]

    page.select_option("#kappa", "softmax")
    softmax = table[table["kappa"] == "softmax"].set_index("model")
    models = shown(page, "model")
    assert sorted(models) == sorted(softmax.index) and len(models) == 530
    assert set(shown(page, "kap")) == {"softmax"}
    means = dict(zip(models, map(float, shown(page, "mean"))))
    assert all(means[m] == pytest.approx(softmax.loc[m, "mean_ood_auroc"], abs=1e-6) for m in models)
    top = best.iloc[0]  # vit_large_patch16_384_original: max_logit is its best, softmax shows another value
    assert top["kappa"] == "max_logit" and means[top["model"]] < top["mean_ood_auroc"] - 0.01
    assert page.locator("#kappas input").first.is_disabled()

    page.select_option("#kappa", "best")
    page.uncheck("#kappas input[value=max_logit]")  # best of the other kappas
    others = (
        valid[valid["kappa"] != "max_logit"].sort_values("mean_ood_auroc", ascending=False).drop_duplicates("model")
    )
    assert sorted(shown(page, "model")) == sorted(
        set(others["model"]) | {"efficientnet_b5", "efficientnet_b6", "efficientnet_b7"}
    )
    first = others.iloc[0]
    assert (shown(page, "model")[0], shown(page, "kap")[0]) == (first["model"], first["kappa"])


def test_filters(page, table):
    page.select_option("#family", "CLIP")
    clip = shown(page, "model")
    assert len(clip) == 16 and all(m.startswith("CLIP_") for m in clip) and set(shown(page, "fam")) == {"CLIP"}
    assert page.locator("#count").inner_text() == "16"
    page.select_option("#family", "")
    page.select_option("#flagged", "hide")
    assert count(page) == 694 and page.locator(f"{ROWS}.flagged").count() == 0
    page.select_option("#flagged", "only")
    assert sorted(shown(page, "model")) == ["efficientnet_b5", "efficientnet_b6", "efficientnet_b7"]
    assert all(f.startswith("id-acc near chance") for f in shown(page, "flag"))
    page.select_option("#flagged", "show")
    page.select_option("#prov", "paper")
    assert count(page) == 697
    assert page.eval_on_selector_all("#status option", "os => os.map(o => o.value)") == [
        "",
        "paper",
    ]  # published numbers
    page.select_option("#status", "paper")
    assert count(page) == 697 and set(page.eval_on_selector_all(f"{ROWS} td.prov", "tds => tds.map(t => t.title)")) == {
        "paper: the published numbers"
    }
    page.fill("#search", "clip vit-l")
    expected = table[table["model"].str.lower().str.contains("clip") & table["model"].str.lower().str.contains("vit-l")]
    assert sorted(shown(page, "model")) == sorted(expected["model"].unique())
    assert page.locator("#count").inner_text() == str(expected["model"].nunique()) == "4"
    page.fill("#search", "vgg13_torchvision")  # a name the paper's table also gives vgg13
    assert shown(page, "model") == ["vgg13"]


def test_sorting_renumbers_the_rank(page, table):
    level10 = page.locator("#leaderboard th .strip span[data-sort=l10]")
    level10.click()
    values = strip(page, 10)[:694]
    assert values == sorted(values, reverse=True) and values[0] == pytest.approx(
        table["ood_auroc_l10"][table["flag"] == ""].max()
    )
    assert all(shown(page, "flag")[694:]) and not any(shown(page, "flag")[:694])  # broken runs last, whatever the sort
    assert shown(page, "rank") == [str(i) for i in range(1, 698)]
    assert page.locator("#leaderboard th.strip-head").get_attribute("aria-sort") == "descending"
    level10.click()
    assert strip(page, 10)[:694] == sorted(values)
    assert shown(page, "rank") == [str(i) for i in range(1, 698)]

    model = page.locator("#leaderboard th.model")
    model.click()
    assert model.get_attribute("aria-sort") == "ascending"
    names = shown(page, "model")[:694]
    assert (names[0], names[-1]) == ("adv_inception_v3", "xcit_tiny_24_p8_384_dist")
    assert page.evaluate("names => names.every((n, i) => i === 0 || names[i - 1].localeCompare(n) <= 0)", names)
    acc = page.locator("#leaderboard th[data-sort=acc]")
    acc.click()
    accs = [float(r) for r in column(page, 5)][:694]
    assert accs == sorted(accs, reverse=True) and acc.get_attribute("aria-sort") == "descending"

    page.fill("#search", "resnet50")
    ranks, accs = shown(page, "rank"), [float(r) for r in column(page, 5)]
    resnet50 = table[table["model"].str.contains("resnet50")]["model"].nunique()
    assert ranks == [str(i) for i in range(1, len(ranks) + 1)] and len(ranks) == resnet50 > 10
    assert accs == sorted(accs, reverse=True)
    page.select_option("#kappa", "entropy")
    assert shown(page, "rank") == [str(i) for i in range(1, count(page) + 1)]


def test_the_plot_follows_the_view_and_shows_values(page, table):
    def legend():
        return page.eval_on_selector_all("#legend li", "items => items.map(i => i.textContent)")

    assert page.locator("#curves polyline.curve").count() == 10
    top = [f"{m} / {k}" for m, k in zip(shown(page, "model")[:10], shown(page, "kap")[:10])]
    assert legend() == top and top[0] == "vit_large_patch16_384_original / max_logit"
    for box in page.locator("#legend li").all():  # legends are whole, inside the page
        assert (
            box.evaluate("li => li.scrollWidth <= li.clientWidth + 1")
            and box.bounding_box()["x"] + box.bounding_box()["width"] <= 1280
        )
    ticks = page.eval_on_selector_all("#curves text.ytick", "ts => ts.map(t => t.textContent)")
    assert ticks == ["0.5", "0.6", "0.7", "0.8", "0.9", "1.0"]
    assert page.locator("#curves line.chance").count() == 1
    assert page.locator("#scatter circle.dot").count() == 694 and page.locator("#scatter circle.dot.hl").count() == 10

    page.fill("#search", "resnet50")
    assert all("resnet50" in label for label in legend()) and len(legend()) == 10
    assert (
        page.locator("#scatter circle.dot").count() == table[table["model"].str.contains("resnet50")]["model"].nunique()
    )
    page.fill("#search", "CLIP_RN")
    assert len(legend()) == 5 == table[table["model"].str.startswith("CLIP_RN")]["model"].nunique()
    assert all(label.startswith("CLIP_") for label in legend())
    ticks = page.eval_on_selector_all("#curves text.ytick", "ts => ts.map(t => t.textContent)")
    assert ticks[0] == "0.4" and ticks[-1] == "1.0"  # CLIP's hardest level falls below chance

    page.locator(f"{ROWS} td.tick input").nth(1).check()
    page.locator(f"{ROWS} td.tick input").nth(3).check()
    models = shown(page, "model")
    assert legend() == [f"{models[1]} / {shown(page, 'kap')[1]}", f"{models[3]} / {shown(page, 'kap')[3]}"]
    assert page.locator("#plot-what").inner_text() == "2 ticked"
    assert page.locator("#scatter circle.dot.hl").count() == 2

    box = page.locator("#curves rect.overlay").bounding_box()
    page.mouse.move(box["x"] + box["width"] - 2, box["y"] + box["height"] / 2)  # level 10
    tip = page.locator("#tip")
    assert tip.is_visible()
    text = tip.inner_text()
    assert text.startswith("level 10")
    value = float(page.locator(ROWS).nth(1).locator(".strip span").nth(10).get_attribute("data-v"))
    assert f"{value:.4f} {models[1]} / {shown(page, 'kap')[1]}" in text.splitlines()
    page.mouse.move(5, 5)
    assert not tip.is_visible()
    dot = page.locator("#scatter circle.dot.hl").first
    dot.hover(force=True)
    assert "mean ood-auroc" in tip.inner_text()


def test_the_scatter_leaves_flagged_runs_out(page, table, browser):
    best = table.sort_values(["mean_ood_auroc", "model"], ascending=[False, True])
    valid = best[best["flag"] == ""].drop_duplicates("model")
    broken = best[~best["model"].isin(valid["model"])].drop_duplicates(
        "model"
    )  # the 3 models with only flagged entries
    with_flagged = pd.concat([valid, broken])
    assert (len(valid), len(broken)) == (694, 3)
    r = f"{valid['id_acc'].corr(valid['mean_ood_auroc']):.3f}"
    r_all = f"{with_flagged['id_acc'].corr(with_flagged['mean_ood_auroc']):.3f}"
    assert (r, r_all) == ("0.392", "0.568")
    settle(page)
    assert page.inner_text("#scatter-r") == r and page.inner_text("#scatter-n") == "694"
    assert (
        page.inner_text("#scatter-left") == "; 3 flagged runs left out"
        and page.locator("#scatter circle.dot").count() == 694
    )
    page.check("#scatter-flagged")
    assert page.inner_text("#scatter-r") == r_all and page.locator("#scatter circle.dot").count() == 697
    assert page.inner_text("#scatter-left") == "; flagged runs included" and page.url.endswith("#sf=1")
    assert count(page) == 697  # the table is the same either way
    other = browser.new_page(viewport={"width": 1280, "height": 900})
    other.goto(page.url)
    assert other.is_checked("#scatter-flagged") and other.inner_text("#scatter-r") == r_all
    other.close()


def test_the_permalink_restores_the_view(page, browser):
    page.select_option("#kappa", "softmax")
    page.select_option("#family", "ViT")
    page.fill("#search", "patch16")
    page.locator("#leaderboard th .strip span[data-sort=l3]").click()
    page.locator("#leaderboard th .strip span[data-sort=l3]").click()  # ascending
    page.locator(f"{ROWS} td.tick input").first.check()
    view = shown(page, "model")
    assert 0 < len(view) < 40
    url = page.locator("#permalink-url").get_attribute("href")
    assert url == page.url and "kappa=softmax" in url and "sort=l3" in url and "dir=asc" in url

    other = browser.new_page(viewport={"width": 1280, "height": 900})
    other.goto(url)
    assert shown(other, "model") == view and shown(other, "rank") == [str(i) for i in range(1, len(view) + 1)]
    assert other.input_value("#kappa") == "softmax" and other.input_value("#family") == "ViT"
    assert other.input_value("#search") == "patch16"
    assert other.locator("#leaderboard th.strip-head").get_attribute("aria-sort") == "ascending"
    assert other.locator("#legend li").count() == 1 and other.locator("#plot-what").inner_text() == "1 ticked"
    other.close()

    query = browser.new_page(viewport={"width": 1280, "height": 900})  # the same view from a query string
    query.goto(url.replace("#", "?"))
    assert shown(query, "model") == view
    query.close()


def test_layout_at_1280_and_on_a_phone(browser, paper_site):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto((paper_site / "index.html").as_uri())
    settle(page)
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    assert page.evaluate("document.getElementById('filters').open") and page.locator("#kappa").is_visible()
    assert (
        page.locator("#strip-legend").is_visible()
        and page.locator("#leaderboard th.metric, #leaderboard th.params").count() == 0
    )
    page.select_option("#kappa", "odin(epsilon=1e-05,temperature=2)")
    settle(page)
    kappa = page.locator(f"{ROWS} td.kap").first
    assert (
        kappa.inner_text() == "odin(epsilon=1e-05,temperature=2)"
        and kappa.get_attribute("title") == "odin(epsilon=1e-05,temperature=2)"
    )
    assert page.eval_on_selector_all(
        f"{ROWS} td.kap",
        """tds => tds.every(td => { const r = document.createRange();
        r.selectNodeContents(td); return r.getBoundingClientRect().width <= td.clientWidth - 10; })""",
    )  # never cut
    page.select_option("#kappa", "best")
    assert page.evaluate("(w => w.scrollWidth <= w.clientWidth)(document.getElementById('table-wrap'))")
    for header in page.locator("#leaderboard thead th").all():  # every column in view
        box = header.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= 1280
    mean = page.locator(f"{ROWS} td.mean").first
    assert mean.evaluate("td => td.scrollWidth <= td.clientWidth")  # values are not cut
    page.evaluate("window.scrollTo(0, 6000)")
    header = page.locator("#leaderboard th.model").bounding_box()
    assert header["y"] == pytest.approx(0, abs=1)  # the header row stays on top of the scrolled table
    page.close()

    phone = browser.new_page(viewport={"width": 390, "height": 844})
    phone.goto((paper_site / "index.html").as_uri())
    settle(phone)
    assert phone.evaluate("document.documentElement.scrollWidth") <= 390
    assert not phone.locator("#kappa").is_visible() and phone.locator("#filters summary").is_visible()  # filters folded
    rows = phone.locator(ROWS)
    assert (
        rows.nth(4).bounding_box()["y"] + rows.nth(4).bounding_box()["height"] <= 844
    )  # the first screen shows the table
    assert phone.locator(".figures").bounding_box()["y"] > rows.nth(4).bounding_box()["y"]  # the charts come after it
    wrap = phone.locator("#table-wrap")
    name, flag = phone.locator(f"{ROWS} td.model").first, phone.locator(f"{ROWS} td.flag").first
    before = (
        name.bounding_box()["x"],
        phone.locator(f"{ROWS} td.rank").first.bounding_box()["x"],
        flag.bounding_box()["x"],
    )
    wrap.evaluate("w => { w.scrollLeft = 400; }")
    assert wrap.evaluate("w => w.scrollLeft") == 400
    after = (
        name.bounding_box()["x"],
        phone.locator(f"{ROWS} td.rank").first.bounding_box()["x"],
        flag.bounding_box()["x"],
    )
    assert after[:2] == before[:2] and after[2] == pytest.approx(
        before[2] - 400, abs=1
    )  # rank and model stay, the rest scrolls
    phone.click("#filters summary")
    assert phone.locator("#kappa").is_visible() and phone.locator("#search").bounding_box()["x"] + 10 < 390
    phone.close()


def test_model_pages_and_the_per_class_section(browser, tmp_path):
    board = small_board(tmp_path)
    out = tmp_path / "site"
    build_site(current_table(board), out, "v2", board=board)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto((out / "index.html").as_uri())
    assert shown(page, "model") == ["glyph_cnn", "vit_tiny_patch16_224", "tf_efficientnet_b0"]
    assert page.locator(f"{ROWS} .verified").count() == 1
    page.select_option("#status", "verified")
    assert shown(page, "model") == ["glyph_cnn"]
    page.select_option("#status", "")
    page.get_by_role("link", name="glyph_cnn", exact=True).click()
    page.wait_for_load_state()
    assert page.url.endswith("/models/" + page_name("glyph_cnn")) and page.locator("h1").inner_text() == "glyph_cnn"
    assert page.locator("#curves polyline.curve").count() == 1
    visible = page.locator(".level-classes:not([hidden])")
    assert visible.get_attribute("data-level") == "0" and visible.locator("tbody tr").count() == 4
    assert visible.locator("tbody tr").first.locator("td.name").inner_text() == "class 0-0 <i>"
    page.select_option(".level-pick", "7")
    visible = page.locator(".level-classes:not([hidden])")
    assert visible.get_attribute("data-level") == "7" and page.locator(".level-classes:not([hidden])").count() == 1
    images = visible.locator("img")
    assert images.count() == 4 and all(img.evaluate("i => i.complete && i.naturalWidth === 8") for img in images.all())
    page.locator("a.record").first.click()
    page.wait_for_load_state()
    assert '"model"' in page.locator("body").inner_text()
    page.close()

    phone = browser.new_page(viewport={"width": 390, "height": 844})  # on a phone: the score and the examples in view
    phone.goto((out / "models" / page_name("glyph_cnn")).as_uri())
    first = phone.locator(".level-classes:not([hidden]) tbody tr").first
    first.scroll_into_view_if_needed()
    for cell in [first.locator("td.score"), first.locator("td.thumbs img").first, first.locator("td.name")]:
        box = cell.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= 390
    assert first.locator("td.score").inner_text() == "0.6600"  # level 0, the hardest class: 0.55 + 0.01 * 11
    phone.close()


def test_html_in_a_model_name_stays_text(browser, tmp_path):
    add_records(tmp_path / "b", [record(model=EVIL), record(model="plain", weights="66" * 32)], create=True)
    out = tmp_path / "site"
    build_site(current_table(tmp_path / "b"), out, "current", board=tmp_path / "b")
    for url in [(out / "index.html").as_uri(), (out / "models" / page_name(EVIL)).as_uri()]:
        page = browser.new_page()
        page.goto(url)
        assert page.evaluate("window.pwned") is None
        assert page.locator("img").count() == 0
        assert EVIL in page.locator("body").inner_text()
        assert EVIL in (
            page.locator("#legend").inner_text() if url.endswith("index.html") else page.locator("h1").inner_text()
        )
        page.close()


def test_an_empty_leaderboard(browser, tmp_path):
    from lb_records import GLYPHS
    from leaderboard.store import init_leaderboard

    init_leaderboard(tmp_path / "b", GLYPHS)
    build_site(current_table(tmp_path / "b"), tmp_path / "site", "current")
    page = browser.new_page()
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto((tmp_path / "site" / "index.html").as_uri())
    assert count(page) == 0 and page.locator("#count").inner_text() == "0" and errors == []
    assert page.locator("#curves svg").count() == 1 and page.locator("#scatter circle").count() == 0
    page.close()


def test_screenshots(browser, paper_site, tmp_path_factory):
    folder = Path(os.environ.get("COOD_SITE_SCREENSHOTS") or tmp_path_factory.mktemp("site-screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    drill = tmp_path_factory.mktemp("drilldown")
    build_site(current_table(small_board(drill)), drill / "site", "v2", board=drill / "board")
    pages = {
        "index": paper_site / "index.html",
        "model": paper_site / "models" / page_name("vit_large_patch16_384_original"),
        "per-class": drill / "site" / "models" / page_name("glyph_cnn"),
    }
    written = []
    for width, height in [(1280, 900), (390, 844)]:
        for name, path in pages.items():
            page = browser.new_page(viewport={"width": width, "height": height})
            page.goto(path.as_uri())
            if name == "index":
                settle(page)
            if name == "per-class":
                page.locator(".per-class").scroll_into_view_if_needed()
            target = folder / f"{name}-{width}x{height}.png"
            page.screenshot(path=target)
            page.close()
            assert target.read_bytes()[:4] == b"\x89PNG"
            written.append(target)
    print("\nsite screenshots:\n" + "\n".join(f"  {path}" for path in written))


def test_a_metric_column_from_the_registry_sorts_best_first(browser, tmp_path):
    """The means of the level metrics are columns the registry names; a lower-is-better one sorts ascending first."""
    records = []
    for i, (model, fpr) in enumerate([("a_model", 0.7), ("b_model", 0.2), ("c_model", 0.4)]):
        rec = record(model=model, weights=f"{i + 7}" * 64)
        for level in rec["levels"]:
            level["fpr_at_99_tpr"] = fpr
        records.append(rec)
    add_records(tmp_path / "b", records, create=True)
    build_site(current_table(tmp_path / "b"), tmp_path / "site", "current")
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto((tmp_path / "site" / "index.html").as_uri())
    header = page.locator("#leaderboard th[data-sort=fpr_at_99_tpr]")
    assert header.inner_text() == "mean fpr@99 (ID+)"  # a mean over the levels says so, and its positive class
    header.click()
    assert shown(page, "model") == ["b_model", "c_model", "a_model"]
    assert header.get_attribute("aria-sort") == "ascending"
    header.click()
    assert shown(page, "model") == ["a_model", "c_model", "b_model"]
    page.close()


@pytest.fixture(scope="module")
def wide_site(tmp_path_factory):
    """The site of :func:`lb_boards.wide_board`: 23 kappas, one of them a submission file's."""
    folder = tmp_path_factory.mktemp("wide")
    board = wide_board(folder)
    build_site(current_table(board), folder / "site", "current", board=board)
    return folder / "site"


def test_a_submission_kappa_goes_by_its_name_its_hash_on_hover(browser, wide_site):
    label, code = (
        "energy_sub(code_sha256=" + SUBMISSION["code_sha256"] + ",source=submission)",
        SUBMISSION["code_sha256"],
    )
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto((wide_site / "index.html").as_uri())
    settle(page)
    assert code not in page.locator("body").inner_text()  # nowhere in a label
    kappa = page.locator(f"{ROWS} td.kap").first  # each model's best entry is its energy_sub
    assert (kappa.inner_text(), kappa.get_attribute("title")) == ("energy_sub", label)
    assert page.locator("#legend li").first.inner_text() == "convnext_tiny / energy_sub"
    assert page.locator("#legend li").first.get_attribute("title") == f"convnext_tiny / {label}"
    assert page.locator("#curves polyline title").first.text_content() == f"convnext_tiny / {label}"
    for option in [
        f'#kappa option[value="{label}"]',
        f'#kappas label[title="{label}"]',
        f'#win-rates th[title="{label}"]',
    ]:
        assert page.locator(option).first.inner_text().strip() == "energy_sub", option
    page.goto((wide_site / "models" / page_name("resnet50")).as_uri())
    heading = page.locator("section.entry h2").first
    assert (heading.inner_text(), heading.get_attribute("title")) == ("energy_sub", label)
    assert page.locator("#legend li").first.inner_text() == "energy_sub"
    assert page.locator("#entries tbody td").first.inner_text() == "energy_sub"
    assert page.locator("section.entry .code-sha256").first.inner_text() == code  # the entry's details name the hash
    page.close()


def test_scatter_points_name_the_model_and_kappa(browser, wide_site):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto((wide_site / "index.html").as_uri())
    settle(page)
    titles = page.eval_on_selector_all("#scatter circle.dot title", "ts => ts.map(t => t.textContent)")
    rows = zip(shown(page, "model"), shown(page, "mean"), shown(page, "acc"))
    expected = [f"{m} / energy_sub: id-acc {float(acc):.4f}, mean ood-auroc {float(mean):.4f}" for m, mean, acc in rows]
    assert sorted(titles) == sorted(expected) and len(titles) == 3
    dot = page.locator("#scatter circle.dot").first
    dot.hover(force=True)
    tip = page.locator("#tip").inner_text().splitlines()
    assert tip[0] in {t.split(":")[0] for t in titles} and tip[1].startswith("id-acc ")
    page.close()


def test_wide_tables_scroll_in_their_panel_with_the_first_column_pinned(browser, wide_site):
    for width, height in [(1280, 900), (390, 844)]:
        page = browser.new_page(viewport={"width": width, "height": height})
        page.goto((wide_site / "index.html").as_uri())
        settle(page)
        assert page.evaluate("document.documentElement.scrollWidth") <= width  # the page itself never scrolls sideways
        wrap = page.locator("#win-rates").locator("xpath=..")
        assert wrap.evaluate("w => getComputedStyle(w).overflowX") == "auto"
        assert wrap.evaluate("w => w.scrollWidth > w.clientWidth + 200")  # 23 kappas: wider than the screen
        row = page.locator("#win-rates tbody tr").nth(2)
        first, other = row.locator("th"), row.locator("td").nth(3)
        before = (first.bounding_box()["x"], other.bounding_box()["x"])
        wrap.evaluate("w => { w.scrollLeft = 300; }")
        after = (first.bounding_box()["x"], other.bounding_box()["x"])
        assert after[0] == before[0] and after[1] == pytest.approx(before[1] - 300, abs=1)
        assert first.inner_text() == "doctor" and after[0] + first.bounding_box()["width"] <= width
        board = page.locator("#table-wrap").bounding_box()
        for cls in ["model", "kap", "mean"]:  # the key columns in view, the board unscrolled
            box = page.locator(f"{ROWS} td.{cls}").first.bounding_box()
            assert board["x"] <= box["x"] and box["x"] + box["width"] <= board["x"] + board["width"], (width, cls)
        for key, header in [("fpr_at_95_tpr", "mean fpr@95 (ID+)"), ("fpr_at_99_tpr", "mean fpr@99 (ID+)")]:
            assert page.locator(f"#leaderboard th[data-sort={key}]").inner_text() == header  # a mean says so
        page.close()
    phone = browser.new_page(viewport={"width": 390, "height": 844})  # a model page's per-level table too
    phone.goto((wide_site / "models" / page_name("resnet50")).as_uri())
    levels = phone.locator("table.levels").first
    wrap, cell = levels.locator("xpath=.."), levels.locator("tbody tr td").first
    x = cell.bounding_box()["x"]
    wrap.evaluate("w => { w.scrollLeft = 200; }")
    assert wrap.evaluate("w => w.scrollLeft") == 200 and cell.bounding_box()["x"] == x
    phone.close()


@pytest.mark.parametrize("width, height", [(1280, 900), (390, 844)])
def test_model_pages_show_error_bars_and_the_index_marks_ranks_not_separable(browser, tmp_path, width, height):
    halves = {"first": 0.02, "second": 0.02, "third": 0.005, "fourth": None}
    add_records(tmp_path / "b", interval_records(halves), create=True)
    out = tmp_path / "site"
    build_site(current_table(tmp_path / "b"), out, "current", board=tmp_path / "b")
    page = browser.new_page(viewport={"width": width, "height": height})
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto((out / "models" / page_name("first")).as_uri())
    bars = page.locator("#curves .errbars line.errbar")
    assert bars.count() == 11
    chart = page.locator("#curves svg").bounding_box()
    for bar in bars.all():
        box = bar.bounding_box()  # drawn, with a length (the interval is 0.04 wide), inside the chart
        assert box["height"] > 2 and chart["x"] <= box["x"] <= chart["x"] + chart["width"]
        assert chart["y"] <= box["y"] and box["y"] + box["height"] <= chart["y"] + chart["height"]
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    first = page.locator("#entries tbody tr").first
    assert "[0.7800, 0.8200]" in first.inner_text()  # the mean ood-auroc's interval beside it
    page.goto((out / "models" / page_name("fourth")).as_uri())
    assert page.locator("#curves polyline.curve").count() == 1 and page.locator("#curves .errbars").count() == 0
    assert "no interval" in page.locator("#entries").inner_text()
    page.goto((out / "index.html").as_uri())
    assert shown(page, "model") == ["first", "second", "third", "fourth"]
    assert page.locator("#curves .errbars").count() == 3  # the top curves' bars: all but the entry without intervals
    assert page.locator("#curves .errbars line.errbar").count() == 33
    near = page.eval_on_selector_all(ROWS, "rows => rows.map(r => r.dataset.near === '1')")
    assert near == [False] * 4  # 0.79 [0.77, 0.81] overlaps 0.80 [0.78, 0.82], but without per-image scores: no test
    assert page.locator(f"{ROWS} td.rank").nth(1).inner_text() == "2" and page.locator("th.ranks").count() == 0
    assert "no entry of this table keeps per-image scores" in page.locator("#near-legend").text_content()
    assert page.locator(f"{ROWS} td.mean").first.get_attribute("title") == "95% interval [0.7800, 0.8200]"
    assert page.locator(f"{ROWS} td.mean").nth(3).get_attribute("title") == "no interval"
    page.locator('th[data-sort="acc"]').click()  # id-acc: the same 0.81 with overlapping intervals, still no mark
    settle(page)
    assert page.eval_on_selector_all(ROWS, "rows => rows.filter(r => r.dataset.near === '1').length") == 0
    page.close()
    assert errors == []


@pytest.fixture(scope="module")
def readme(tmp_path_factory):
    """The site of :func:`lb_boards.readme_board` (the README's two models) and its table."""
    folder = tmp_path_factory.mktemp("readme")
    board = readme_board(folder)
    table = current_table(board)
    build_site(table, folder / "site", "current", board=board)
    return folder / "site", table


@pytest.fixture(scope="module")
def paper(paper_site, table):
    """The site of the paper's board and its table."""
    return paper_site, table


BOARD_MODELS = {"readme": "glyph_cnn", "paper": "vit_large_patch16_384_original"}  # the model page each test opens
FIRST_ROWS = 5  # the rows the first screen of a phone shows whole
# per row: the boxes (left, top, right, bottom) of its rank, model, kappa and mean cells and of the model name's text,
# and the name as rendered
FIRST_SCREEN = """(rows, n) => rows.slice(0, n).map(row => {
  const box = node => { const r = node.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const cells = Object.fromEntries(["rank", "model", "kap", "mean"].map(c => [c, box(row.querySelector("td." + c))]));
  const cell = row.querySelector("td.model"), name = cell.querySelector("a"), text = document.createRange();
  text.selectNodeContents(name);
  return {...cells, text: box(text), name: name.innerText, cut: cell.scrollWidth > cell.clientWidth};
})"""


def inside(inner, outer) -> bool:
    """Whether box ``inner`` (left, top, right, bottom) lies within ``outer``, to half a pixel."""
    return all(i >= o - 0.5 for i, o in zip(inner[:2], outer[:2])) and all(
        i <= o + 0.5 for i, o in zip(inner[2:], outer[2:])
    )


@pytest.mark.parametrize("board", ["readme", "paper"])
def test_a_phone_first_shows_rank_model_kappa_and_mean_and_grey_win_rates_of_few_models(browser, request, board):
    site, table = request.getfixturevalue(board)
    page = browser.new_page(viewport={"width": 390, "height": 844})
    page.goto((site / "index.html").as_uri())
    settle(page)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    assert page.locator("#about summary").is_visible() and not page.locator("#summary").is_visible()  # prose folded
    assert page.locator("#leaderboard").bounding_box()["y"] < 844 / 3
    frame = page.locator("#table-wrap").evaluate(
        "w => { const r = w.getBoundingClientRect(); return [r.left + w.clientLeft, r.top, r.left + w.clientLeft + "
        "w.clientWidth, 844]; }"
    )  # the board's visible part in the first screen: nothing cut at its right edge
    rows = page.eval_on_selector_all(ROWS, FIRST_SCREEN, FIRST_ROWS)
    assert len(rows) == min(FIRST_ROWS, table["model"].nunique())
    for row in rows:
        assert all(inside(row[cell], frame) for cell in ("rank", "model", "kap", "mean")), row
        assert inside(row["text"], row["model"]) and not row["cut"], row  # the whole name in its cell
    names = [row["name"] for row in rows]
    assert names == shown(page, "model")[: len(rows)] and len(set(names)) == len(names)  # whole, hence told apart
    if board == "paper":  # ranks 1-4 differ only in the middle or the end of their names
        assert names[:4] == [  # the paper's one model under two names (vit_large_patch32_384) is listed once
            "vit_large_patch16_384_original",
            "vit_large_patch32_384",
            "vit_large_patch16_224_original",
            "vit_base_patch16_384_original",
        ]
    rates, counts = win_rates(table)
    expected = sorted(int(counts.loc[a, b]) for a in rates.index for b in rates.columns if pd.notna(rates.loc[a, b]))
    cells = page.eval_on_selector_all(
        "#win-rates td[data-n]",
        "tds => tds.map(td => [+td.dataset.n, td.className, getComputedStyle(td).backgroundColor, td.innerText])",
    )
    assert sorted(n for n, _, _, _ in cells) == expected
    muted = "rgb(238, 240, 244)"
    for n, cls, background, text in cells:  # a cell of fewer models: grey with its count, not a rate's colour
        assert (cls == "few", background == muted) == (n < FEW_MODELS, n < FEW_MODELS) and text.endswith(f"({n})")
    few = sum(n < FEW_MODELS for n in expected)  # two models: every cell; the paper's kappas: none
    assert (few, len(expected)) == ((24, 24) if board == "readme" else (0, 20))
    page.close()


@pytest.mark.parametrize("board", ["readme", "paper"])
def test_no_table_of_a_model_page_scrolls_sideways_at_1280(browser, request, board):
    site, table = request.getfixturevalue(board)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto((site / "models" / page_name(BOARD_MODELS[board])).as_uri())
    page.evaluate("document.querySelectorAll('.level-classes').forEach(d => { d.hidden = false; })")  # every level's
    widths = page.eval_on_selector_all(
        ".table-wrap", "ws => ws.map(w => [w.firstElementChild.className, w.scrollWidth, w.clientWidth])"
    )
    assert widths and all(scroll <= client for _, scroll, client in widths), widths
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    entries = table[table["model"] == BOARD_MODELS[board]]
    assert page.locator("#entries tbody tr").count() == len(entries)
    if board == "readme":  # the widest metrics table: every metric of a harness record, each interval beside it
        headers = page.eval_on_selector_all("#entries thead th", "ths => ths.map(th => th.innerText)")
        assert len(headers) == 12 and {"mean fpr@95 (ID+)", "mean fpr@95 (OOD+)"} <= set(headers)
        headers = page.eval_on_selector_all("#entries-id thead th", "ths => ths.map(th => th.innerText)")
        assert len(headers) == 11 and {"aurc", "brier (correctness)", "brier (multi-class)"} <= set(headers)
        assert page.locator("#entries .ci:not(.none)").count() == 3 * len(entries)
    page.close()


def marks_and_ranks(page) -> list[tuple[str, bool, str, str]]:
    """Per row: its model, whether its rank is marked, the rank's title and the ranks column."""
    settle(page)
    return page.eval_on_selector_all(
        ROWS,
        "rows => rows.map(r => [r.dataset.model, r.dataset.near === '1', r.querySelector('td.rank').title,"
        " r.querySelector('td.ranks').innerText])",
    )


def expected_marks(found, at, names, key) -> tuple[list[bool], list[str]]:
    """Python's marks (the paired test of each row against the row above does not reject) and ranks on ``key`` for
    the rows ``names`` (top to bottom); ``at``: each name's index in ``found`` (-1 without per-image scores)."""
    index = [at[n] for n in names]
    marks = [
        k > 0 and i >= 0 and index[k - 1] >= 0 and not found.different(key, i, index[k - 1])
        for k, i in enumerate(index)
    ]
    having = [i for i in index if i >= 0]
    values = [found.values[key][i] for i in having]
    ranges = iter(rank_ranges(values, lambda a, b: found.different(key, having[a], having[b])))
    ranks = []
    for i in index:
        span = next(ranges) if i >= 0 else None
        ranks.append("-" if span is None else str(span[0]) if span[0] == span[1] else f"{span[0]}-{span[1]}")
    return marks, ranks


def test_paired_marks_ranks_and_the_compare_panel_are_pythons(browser, tmp_path):
    board = models_board(tmp_path)
    table = current_table(board)
    build_site(table, tmp_path / "site", "current", board=board)
    found, at = board_pairs(board, table["record_file"].tolist())
    at = dict(zip(table["model"], at))
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto((tmp_path / "site" / "index.html").as_uri())
    for sort, key in [(None, "mean"), ("l2", "l2"), ("idauroc", "id_auroc"), ("acc", "id_acc")]:
        if sort == "l2":
            page.locator('.strip span[data-sort="l2"]').click()
        elif sort:
            page.locator(f'th[data-sort="{sort}"]').click()
        rows = marks_and_ranks(page)
        names = [r[0] for r in rows]
        marks, ranks = expected_marks(found, at, names, key)
        assert [r[1] for r in rows] == marks and [r[3] for r in rows] == ranks, (key, rows)
        for k, (_, marked, title, _) in enumerate(rows):
            p_value = found.difference(key, at[names[k]], at[names[k - 1]]).p_value if marked else None
            assert title == ("" if not marked else f"not shown different from #{k}: paired test p = {p_value:.2f}")
        if key == "mean":  # the board's story: softmax and energy told apart, energy and max_logit not
            assert names[:3] == ["glyph_cnn.softmax", "glyph_cnn.energy", "glyph_cnn.max_logit"]
            assert marks[:3] == [False, False, True] and ranks[:3] == ["1", "2-3", "2-3"] and ranks[-1] == "-"
            assert rows[2][2] == "not shown different from #2: paired test p = 0.73"
    assert sum(r[1] for r in rows) == 3  # id-acc: glyph_cnn's kappas share their predictions, so their id-acc
    ticks = page.locator(f"{ROWS} input")
    assert page.locator("#compare").is_hidden()
    for name in ["glyph_cnn.softmax", "glyph_cnn.energy"]:
        page.locator(f'{ROWS}[data-model="{name}"] input').check()
    shown = page.eval_on_selector_all(
        "#compare-table tbody tr",
        "trs => trs.map(tr => [tr.dataset.key, +tr.dataset.d, +tr.dataset.low, +tr.dataset.high, +tr.dataset.p,"
        " [...tr.cells].map(c => c.innerText)])",
    )
    keys = {"l0": "l0", "l1": "l1", "l2": "l2", "mean": "mean", "acc": "id_acc", "idauroc": "id_auroc"}
    assert [row[0] for row in shown] == list(keys)
    a, b = at["glyph_cnn.softmax"], at["glyph_cnn.energy"]
    for site_key, d, low, high, p_value, cells in shown:
        diff = found.difference(keys[site_key], a, b)
        assert (d, low, high) == pytest.approx((diff.estimate, diff.low, diff.high), abs=1e-8)
        assert p_value == pytest.approx(diff.p_value, abs=1e-6)
        text = (
            f"{diff.p_value:.2f}"
            if diff.p_value >= 0.01
            else f"{diff.p_value:.3f}"
            if diff.p_value >= 0.001
            else "< 0.001"
        )
        assert cells[1:] == [
            f"{diff.a:.4f}",
            f"{diff.b:.4f}",
            f"{diff.estimate:+.4f}",
            f"[{diff.low:.4f}, {diff.high:.4f}]",
            text,
        ]
    assert shown[3][5][5] == "< 0.001"  # their mean ood-auroc: told apart, though their intervals overlap
    page.locator(f'{ROWS}[data-model="glyph_cnn.energy"] input').uncheck()
    page.locator(f'{ROWS}[data-model="glyph_mlp.max_logit"] input').check()
    what = page.locator("#compare-what").inner_text()
    assert "No paired interval: glyph_mlp.max_logit / max_logit keeps no per-image scores" in what
    assert page.locator("#compare-table").is_hidden() and ticks.count() == 6
    page.close()
    assert errors == []
