"""The docs hold together: every relative link of ``README.md`` and ``docs/*.md`` points at a file that exists (and at a
heading that exists, where it names one), and the README stays a front page."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def without_fences(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def prose(text: str) -> str:
    """The text without code blocks and inline code, where brackets are not links."""
    return re.sub(r"`[^`\n]*`", "", without_fences(text))


def anchors(text: str) -> set[str]:
    """The anchors of a file's headings, as GitHub makes them (a repeated heading gets -1, -2, ...)."""
    found, seen = set(), {}
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", without_fences(text), flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.replace("`", "").strip().lower()).replace(" ", "-")
        found.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return found


def relative_links(doc: Path) -> list[str]:
    return [
        target for target in LINK.findall(prose(doc.read_text())) if not re.match(r"[a-z][a-z0-9+.-]*:", target)
    ]  # http:, https:, mailto: ... are not checked


def test_the_helpers():
    text = "# A `code` title\n## The paper's results\n## Twice\n## Twice\n```\n# not a heading [x](nowhere.md)\n```\n"
    assert anchors(text) == {"a-code-title", "the-papers-results", "twice", "twice-1"}
    assert LINK.findall(prose(text + "see [a](b.md#c), ![img](i.png), `[x](y.md)` and [w](https://x.org)")) == [
        "b.md#c",
        "https://x.org",
    ]


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: doc.relative_to(ROOT).as_posix())
def test_every_relative_link_points_at_an_existing_file_and_heading(doc):
    links = relative_links(doc)
    wrong = []
    for link in links:
        path, _, anchor = link.partition("#")
        target = (doc.parent / path).resolve() if path else doc
        if not target.exists():
            wrong.append(f"{link}: no file {target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target.read_text()):
            wrong.append(f"{link}: no heading #{anchor} in {target.relative_to(ROOT)}")
    assert not wrong, wrong


def test_the_readme_links_every_document_and_stays_short():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    linked = {link.partition("#")[0] for link in relative_links(ROOT / "README.md")}
    assert {doc.relative_to(ROOT).as_posix() for doc in DOCS[1:]} <= linked
