"""The leaderboard site on the paper's 1,821 entries: build time, page sizes, rows shown, and the index's load time
in headless Chromium (navigation to the load event, and to the first rows drawn).

    python benchmarks/site_build.py                 # needs Debian's chromium and playwright for the load time
    python benchmarks/site_build.py --out site/     # keep the site
    python benchmarks/site_build.py --paired 100 500  # also: the paired data a board of N such entries embeds
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from harness.method.pairwise import SUMMARY_KEYS, Pairwise
from leaderboard.paper import paper_records, read_paper_table
from leaderboard.site import build_site, encode_pairs
from leaderboard.store import add_records, current_table


def load_times(index: Path, runs: int) -> list[dict]:
    """Per run, in ms from navigation: the first rows drawn, the first paint, every row drawn, DOMContentLoaded and
    the load event; and the rows shown and the page's width."""
    from playwright.sync_api import sync_playwright

    out = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=shutil.which("chromium"), args=["--no-sandbox", "--disable-gpu"]
        )
        for _ in range(runs):
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(index.as_uri())
            page.wait_for_function("!document.getElementById('leaderboard').dataset.pending")
            timing = page.evaluate(
                "(() => { const n = performance.getEntriesByType('navigation')[0];"
                " const mark = name => performance.getEntriesByName(name)[0].startTime;"
                " const paint = performance.getEntriesByName('first-contentful-paint')[0];"
                " return {dom: n.domContentLoadedEventEnd, load: n.loadEventEnd, first: mark('rows-first'),"
                " all: mark('rows-all'), paint: paint ? paint.startTime : NaN}; })()"
            )
            timing["rows"] = page.locator("#leaderboard tbody tr").count()
            timing["scroll_width"] = page.evaluate("document.documentElement.scrollWidth")
            out.append(timing)
            page.close()
        browser.close()
    return out


def paired_bytes(entries: int, levels: int, seed: int = 0) -> int:
    """The bytes of the index's paired data (as the site encodes it) for ``entries`` entries with per-image scores on
    ``levels`` levels: values like AUROCs, standard errors like a glyph board's (random, as their digits are)."""
    rng = np.random.default_rng(seed)
    keys = [*SUMMARY_KEYS, *(f"l{level}" for level in range(levels))]
    se = {}
    for key in keys:
        half = np.triu(rng.uniform(0.001, 0.02, (entries, entries)), 1)
        se[key] = half + half.T
    found = Pairwise({k: rng.uniform(0.5, 1.0, entries) for k in keys}, se)
    return len(json.dumps(encode_pairs(found), separators=(",", ":")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="Write the site here (default: a temporary folder).")
    parser.add_argument("--runs", type=int, default=5, help="Page loads to time.")
    parser.add_argument("--paired", type=int, nargs="*", default=[], help="Entries with per-image scores to size.")
    args = parser.parse_args()
    for entries in args.paired:
        print(f"paired data of {entries} entries, 11 levels: {paired_bytes(entries, 11) / 1e3:.0f} kB")
    with tempfile.TemporaryDirectory() as tmp:
        board = Path(tmp) / "board"
        add_records(board, paper_records(read_paper_table()), create=True)
        table = current_table(board)
        out = args.out or Path(tmp) / "site"
        start = time.perf_counter()
        pages = build_site(table, out, "v1", board=board)
        seconds = time.perf_counter() - start
        files = [p for p in out.rglob("*") if p.is_file()]
        print(
            f"entries {len(table)}, models {table['model'].nunique()} "
            f"({table[table['flag'] == '']['model'].nunique()} valid)"
        )
        print(
            f"build {seconds:.2f} s: {len(pages)} pages, {len(files)} files, "
            f"{sum(p.stat().st_size for p in files) / 1e6:.1f} MB"
        )
        print(
            f"index.html {(out / 'index.html').stat().st_size / 1e3:.0f} kB, "
            f"site.js {(out / 'static' / 'site.js').stat().st_size / 1e3:.0f} kB, "
            f"site.css {(out / 'static' / 'site.css').stat().st_size / 1e3:.0f} kB"
        )
        if shutil.which("chromium"):
            runs = load_times(out / "index.html", args.runs)

            def median(key: str) -> float:
                return sorted(r[key] for r in runs)[len(runs) // 2]

            print(
                f"index load (1280x900, medians of {len(runs)} runs): first {median('first'):.0f} ms, first paint "
                f"{median('paint'):.0f} ms, all rows {median('all'):.0f} ms, DOMContentLoaded {median('dom'):.0f} ms, "
                f"load event {median('load'):.0f} ms; rows shown {runs[0]['rows']}, "
                f"page width {runs[0]['scroll_width']} px"
            )


if __name__ == "__main__":
    main()
