"""The static site in a real headless browser (Debian's chromium driven by playwright)."""

from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

from leaderboard.site import build_site, page_name
from leaderboard.store import add_records, current_table

from lb_records import record

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
EVIL = '<img src=x onerror="window.pwned=1"><svg onload="window.pwned=2"><b>&amp;'  # no "/": names never hold a path separator


@pytest.fixture(scope="module")
def browser():
    assert CHROMIUM.is_file(), "the site tests need Debian's chromium (apt-get install chromium)"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def paper_site(paper_board, tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    build_site(current_table(paper_board), out, "v1")
    return out


def _column(page, index):
    return page.eval_on_selector_all(
        "#leaderboard tbody tr:not([hidden])", f"rows => rows.map(r => r.cells[{index}].dataset.v)")


def test_sorting_search_and_plot(browser, paper_site, paper_board):
    table = current_table(paper_board)
    page = browser.new_page()
    page.goto((paper_site / "index.html").as_uri())
    assert page.title() == "C-OOD leaderboard: imagenet-cood-paper2023 iclr2023"
    assert page.locator("#leaderboard tbody tr").count() == 1848
    assert page.locator("svg.severity polyline.curve").count() == 10
    assert page.locator("svg.severity").first.bounding_box()["width"] > 300

    models = page.eval_on_selector_all("#leaderboard tbody tr", "rows => rows.map(r => r.cells[1].dataset.v)")
    assert models[0] == "vit_large_patch16_384_original"  # ranked by mean ood-auroc

    level10 = page.locator("#leaderboard th", has_text="l10")
    level10.click()
    assert level10.get_attribute("aria-sort") == "descending"
    values = [float(v) for v in _column(page, 15)]
    assert values == sorted(values, reverse=True) and values[0] == table["ood_auroc_l10"].max()
    level10.click()
    assert level10.get_attribute("aria-sort") == "ascending"
    assert [float(v) for v in _column(page, 15)] == sorted(values)

    model = page.locator("#leaderboard th", has_text="model")
    model.click()
    assert model.get_attribute("aria-sort") == "ascending"
    names = _column(page, 1)
    assert (names[0], names[-1]) == ("adv_inception_v3", "xcit_tiny_24_p8_384_dist")

    page.fill("#search", "clip vit-l")
    shown = page.eval_on_selector_all("#leaderboard tbody tr:not([hidden])", "rows => rows.map(r => r.cells[1].dataset.v)")
    expected = table[table["model"].str.lower().str.contains("clip") & table["model"].str.lower().str.contains("vit-l")]
    assert sorted(shown) == sorted(expected["model"]) and len(shown) == 13
    assert page.locator("#count").inner_text() == "13"
    page.fill("#search", "")
    assert page.locator("#count").inner_text() == "1848"

    page.get_by_role("link", name="resnet50", exact=True).first.click()
    page.wait_for_load_state()
    assert page.url.endswith("/models/" + page_name("resnet50"))
    assert page.locator("h1").inner_text() == "resnet50"
    assert page.locator("#entries tbody tr").count() == 4
    assert page.locator("svg.severity polyline.curve").count() == 4
    page.close()


def test_html_in_a_model_name_stays_text(browser, tmp_path):
    add_records(tmp_path / "b", [record(model=EVIL), record(model="plain", weights="66" * 32)], create=True)
    out = tmp_path / "site"
    build_site(current_table(tmp_path / "b"), out, "current")
    for url in [(out / "index.html").as_uri(), (out / "models" / page_name(EVIL)).as_uri()]:
        page = browser.new_page()
        page.goto(url)
        assert page.evaluate("window.pwned") is None
        assert page.locator("img").count() == 0
        assert page.locator("body script").count() == 1  # only the site's own script
        assert EVIL in page.locator("body").inner_text()
        assert EVIL in page.locator("svg.severity").first.inner_html().replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&").replace("&quot;", '"')
        page.close()
    assert page_name(EVIL).endswith(".html") and "<" not in page_name(EVIL)
