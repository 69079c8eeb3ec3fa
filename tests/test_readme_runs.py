"""The docs' runnable blocks run: each block of ``README.md`` and ``docs/*.md`` whose fence follows a
``<!-- runnable -->`` line is run as a user would.

A block runs in a scratch folder that looks like the repository root (its top-level entries linked there), so it
can read ``examples/`` and writes only to the scratch folder: a ``python`` block is saved as a file beside that folder
(the folder is the working directory, not an import root, as for a user's own script) and run with this interpreter,
a ``bash`` block with ``bash -e``; the commands of this environment come first on the PATH. The embedded benchmark
``glyphs`` resolves to the session's tiny glyph benchmark (a fresh ``COOD_BENCH_CACHE`` whose ``glyphs`` is that one),
so a block that evaluates a model runs in seconds.
"""

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dataset_builder.embedded import embedded_settings

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = "<!-- runnable -->"


def runnable_blocks(text: str) -> list[tuple[int, str, str]]:
    """(line number of the fence, language, code) of every block whose fence follows the marker line."""
    lines = text.splitlines()
    blocks = []
    for i, line in enumerate(lines):
        if line.strip() != MARKER:
            continue
        fence = re.fullmatch(r"```(bash|python)", lines[i + 1].strip()) if i + 1 < len(lines) else None
        assert fence, f"line {i + 1}: {MARKER} must be followed by a ```bash or ```python fence"
        end = next(j for j in range(i + 2, len(lines)) if lines[j].strip() == "```")
        blocks.append((i + 2, fence.group(1), "\n".join(lines[i + 2 : end]) + "\n"))
    return blocks


# (document, line of the fence, language, code) of every runnable block of the docs
BLOCKS = [
    (doc.relative_to(ROOT).as_posix(), line, language, code)
    for doc in DOCS
    for line, language, code in runnable_blocks(doc.read_text())
]


def test_the_marked_blocks_are_the_ones_the_docs_promise():
    assert len(BLOCKS) == 4, [(doc, line) for doc, line, _, _ in BLOCKS]
    where = {code.splitlines()[0]: (doc, language) for doc, _, language, code in BLOCKS}
    assert where == {
        "cood-harness submit examples/glyph_cnn.py -k softmax -k energy -k ash --leaderboard my-board": (
            "README.md",
            "bash",
        ),
        "cood-leaderboard import-paper -d paper-board     # the shipped table; or: import-paper "
        "path/to/all_paper_results.csv -d paper-board": ("docs/leaderboard.md", "bash"),
        "import runpy": ("docs/submitting.md", "python"),
        "from pathlib import Path": ("docs/submitting.md", "python"),
    }


def test_a_marker_without_a_fence_is_refused():
    assert runnable_blocks("a\n<!-- runnable -->\n```python\nprint(1)\n```\n") == [(3, "python", "print(1)\n")]
    with pytest.raises(AssertionError, match="^line 1: <!-- runnable --> must be followed by"):
        runnable_blocks("<!-- runnable -->\n```\nls\n```\n")


def test_the_complete_example_is_glyph_mlp_without_its_docstring():
    source = (ROOT / "examples" / "glyph_mlp.py").read_text()
    docstring_end = ast.parse(source).body[0].end_lineno
    example = [code for _, _, _, code in BLOCKS if code.startswith("from pathlib import Path")]
    assert example == ["\n".join(source.splitlines()[docstring_end:]).strip() + "\n"]


def test_import_paper_help_says_the_table_is_optional_and_shipped():
    done = subprocess.run(
        [sys.executable, "-c", "from leaderboard.cli import main; main()", "import-paper", "--help"],
        capture_output=True,
        text=True,
        env=os.environ | {"COLUMNS": "200"},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "Usage: cood-leaderboard import-paper [OPTIONS] [csv]" in done.stdout
    assert "[default: (the copy shipped with cood-bench)]" in " ".join(done.stdout.split())


@pytest.fixture
def scratch(tmp_path, tiny_glyphs) -> tuple[Path, dict]:
    """A folder that looks like the repository root, and the environment a block runs in."""
    folder = tmp_path / "scratch"
    folder.mkdir()
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for name in sorted({path.split("/")[0] for path in tracked}):
        (folder / name).symlink_to(ROOT / name)
    cache = tmp_path / "cache"
    glyphs = cache / f"glyphs-{embedded_settings('glyphs').BENCHMARK_VERSION}" / "default"
    glyphs.parent.mkdir(parents=True)
    glyphs.symlink_to(tiny_glyphs, target_is_directory=True)
    env = {k: v for k, v in os.environ.items() if k != "COOD_LEADERBOARD"}
    env |= {"COOD_BENCH_CACHE": str(cache), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"}
    return folder, env


@pytest.mark.slow
@pytest.mark.parametrize(
    "doc, line, language, code", BLOCKS, ids=[f"{doc}-line-{line}-{language}" for doc, line, language, _ in BLOCKS]
)
def test_runnable_block_runs(scratch, doc, line, language, code):
    folder, env = scratch
    if language == "python":
        script = folder.parent / f"doc_block_{line}.py"  # saved elsewhere, run from the root: no import root
        script.write_text(code)
        command = [sys.executable, str(script)]
    else:
        command = ["bash", "-e", "-c", code]
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{doc} block at line {line} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    if "import-paper" in code:  # the commands did their work, in the scratch folder
        assert done.stdout.splitlines()[0] == "imported 1,821 entries (697 models) into paper-board"
        assert "Best models per kappa" in done.stdout and (folder / "paper-board" / "table.csv").is_file()
    if "evaluate(" in code:  # the printed per-level table: 11 levels of each of the two kappas
        assert done.stdout.count("softmax") == 11 and done.stdout.count("energy") == 11, done.stdout
    if "--leaderboard my-board" in code:  # the README's three commands: two models on a board, and its site
        assert (folder / "cood-results" / "glyph_cnn" / "records" / "ash.json").is_file()
        assert (folder / "my-board" / "table.csv").is_file() and (folder / "my-site" / "index.html").is_file()
        check_the_boards_paired_tests(folder / "my-board")


def _leaderboard(*args) -> list[str]:
    from leaderboard.cli import app

    done = CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    return done.output.splitlines()


def check_the_boards_paired_tests(board: Path) -> None:
    """``show`` marks a row exactly where :func:`compare_entries` on its and the row above's per-image files gives
    p >= 0.05 for the mean ood-auroc; ``compare`` prints that test for two kappas of one model and across models."""
    from harness.method.paired import compare_entries
    from leaderboard.pairs import per_image_path, read_scores
    from leaderboard.store import current_table
    from leaderboard.views import select

    rows = select(current_table(board))
    tables = {f: read_scores(per_image_path(board, f)) for f in rows["record_file"]}  # every entry keeps its file
    files = rows["record_file"].tolist()
    shown = _leaderboard("show", "-d", board, "--limit", "0")[3 : 3 + len(rows)]
    assert [line.split()[2] for line in shown] == rows["model"].tolist()
    expected = [False] + [
        compare_entries(tables[files[i]], tables[files[i - 1]]).mean_ood_auroc.p_value >= 0.05
        for i in range(1, len(files))
    ]
    assert [line.split()[0].endswith("\u2248") for line in shown] == expected
    by_name = {f"{r.model}/{r.kappa_name}": r.record_file for r in rows.itertuples()}
    for a, b in (("glyph_cnn/softmax", "glyph_cnn/energy"), ("glyph_cnn/softmax", "glyph_mlp/softmax")):
        out = _leaderboard("compare", a, b, "-d", board)
        mean = compare_entries(tables[by_name[a]], tables[by_name[b]]).mean_ood_auroc
        line = next(line.split() for line in out if line.startswith("mean ood-auroc"))
        assert line[2:7] == [
            f"{mean.estimate:+.4f}",
            f"[{mean.low:+.4f},",
            f"{mean.high:+.4f}]",
            f"{mean.p_value:.3g}",
            f"{mean.se:.4f}",
        ]
        assert out[-1].startswith("different at 5% (paired): ")
