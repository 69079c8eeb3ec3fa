import hashlib
import json

import pytest

from lb_records import record
from leaderboard.errors import LeaderboardError
from leaderboard.release import changelog, list_releases, release, release_info, release_table
from leaderboard.store import add_records


def _hashes(directory):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def test_versions_are_frozen_with_a_changelog(tmp_path):
    board = tmp_path / "b"
    with pytest.raises(LeaderboardError, match="is not a leaderboard"):
        release(board)
    add_records(board, [record(kappa="softmax"), record(kappa="entropy", aurocs=[0.9] * 11)], create=True)
    v1 = release(board, note="First results.")
    assert v1["version"] == 1 and v1["num_entries"] == 2 and len(v1["added"]) == 2
    frozen = _hashes(board / "releases" / "v1")
    assert sorted(frozen) == ["CHANGES.md", "release.json", "table.csv", "table.parquet"]
    assert all((p.stat().st_mode & 0o222) == 0 for p in (board / "releases" / "v1").iterdir())

    with pytest.raises(LeaderboardError, match="nothing to release: no entries since v1"):
        release(board)

    [new] = add_records(board, [record(model="bigger", weights="44" * 32, aurocs=[0.97] * 11, acc=0.02)])
    v2 = release(board)
    assert v2["version"] == 2 and v2["added"] == [new] and v2["num_entries"] == 3
    assert list_releases(board) == [1, 2]
    assert _hashes(board / "releases" / "v1") == frozen
    assert len(release_table(board, 1)) == 2 and len(release_table(board, 2)) == 3
    assert release_info(board, 1)["added"] == v1["added"]

    notes = (board / "releases" / "v2" / "CHANGES.md").read_text()
    assert notes.startswith("## v2 (")
    assert "3 entries, 1 new." in notes
    assert f"- bigger / softmax (harness): mean ood-auroc 0.9700 [{new}]" in notes
    assert "glyph_cnn" not in notes
    assert "Flagged:\n- bigger / softmax: id-acc near chance (0.0200, chance 0.0278)" in notes
    log = (board / "CHANGELOG.md").read_text()
    assert log == changelog(board)
    assert log.index("## v2") < log.index("## v1") and "First results." in log
    assert "## v2" not in changelog(board, up_to=1)


def test_missing_version(tmp_path):
    add_records(tmp_path / "b", [record()], create=True)
    release(tmp_path / "b")
    with pytest.raises(LeaderboardError, match=r"no release v7 in .* \(released: v1\)"):
        release_table(tmp_path / "b", 7)


def test_release_is_built_from_the_records(tmp_path):
    board = tmp_path / "b"
    add_records(board, [record()], create=True)
    (board / "table.parquet").unlink()  # a lost derived table does not lose entries
    assert release(board)["num_entries"] == 1
    assert json.loads((board / "releases" / "v1" / "release.json").read_text())["benchmark"]["id"] == "glyphs"
