"""Publishing releases to the local Hub server (tests/hub_server.py) with the real clients."""

import json

import datasets
import pandas as pd
import pytest
from huggingface_hub import HfApi, hf_hub_download

from lb_records import record
from leaderboard.errors import LeaderboardError
from leaderboard.publish import publish
from leaderboard.release import release
from leaderboard.store import add_records


def test_publish_versions_in_order(hub_server, tmp_path):
    board = tmp_path / "board"
    repo = "cood/leaderboard-test"
    first = add_records(board, [record(kappa="softmax"), record(kappa="entropy")], create=True)
    release(board, note="first")
    assert publish(board, repo, endpoint=hub_server)["tag"] == "v1"
    [third] = add_records(board, [record(model="other", weights="77" * 32, aurocs=[0.9] * 11)])
    release(board)
    result = publish(board, repo, endpoint=hub_server)
    assert result["tag"] == "v2" and len(result["commit"]) == 40

    api = HfApi(endpoint=hub_server)
    assert {ref.name for ref in api.list_repo_refs(repo, repo_type="dataset").tags} == {"v1", "v2"}
    assert sorted(api.list_repo_files(repo, repo_type="dataset", revision="v2")) == [
        ".gitattributes",
        "CHANGELOG.md",
        "README.md",
        "records/records.jsonl",
        "release.json",
        "results/table.csv",
        "results/table.parquet",
    ]

    def fetch(name, revision):
        return hf_hub_download(
            repo, name, repo_type="dataset", revision=revision, endpoint=hub_server, cache_dir=tmp_path / "cache"
        )

    assert pd.read_parquet(fetch("results/table.parquet", "v1"))["entry_id"].tolist() == first
    lines = open(fetch("records/records.jsonl", "v2")).read().splitlines()
    assert [json.loads(line)["model"]["name"] for line in lines] == ["glyph_cnn", "glyph_cnn", "other"]
    assert json.loads(open(fetch("release.json", "v2")).read())["added"] == [third]
    card = open(fetch("README.md", "v2")).read()
    assert "config_name: results" in card and 'revision="v2"' in card
    changelog = open(fetch("CHANGELOG.md", "v1")).read()
    assert "## v1" in changelog and "## v2" not in changelog

    loaded = datasets.load_dataset(repo, "results", revision="v1", split="train", cache_dir=str(tmp_path / "ds"))
    assert loaded.num_rows == 2 and loaded["entry_id"] == first

    tags = {ref.name: ref.target_commit for ref in api.list_repo_refs(repo, repo_type="dataset").tags}
    for version in (1, 2):  # a rerun finds the same files under the tag and changes nothing
        assert publish(board, repo, version=version, endpoint=hub_server) == {
            "repo_id": repo,
            "tag": f"v{version}",
            "commit": tags[f"v{version}"],
            "uploaded": False,
        }
    assert {ref.name: ref.target_commit for ref in api.list_repo_refs(repo, repo_type="dataset").tags} == tags

    other = tmp_path / "other"
    add_records(other, [record(kappa="energy")], create=True)
    release(other)
    with pytest.raises(
        LeaderboardError, match=r"cood/leaderboard-test already has v1 with other content \(\S+ differs\)"
    ):
        publish(other, repo, endpoint=hub_server)
    add_records(other, [record(kappa="entropy")])
    release(other)
    assert publish(other, "cood/leaderboard-test-2", endpoint=hub_server)["tag"] == "v2"
    with pytest.raises(
        LeaderboardError, match="cood/leaderboard-test-2 already has v2; versions are published once and in order"
    ):
        publish(other, "cood/leaderboard-test-2", version=1, endpoint=hub_server)


def test_publish_needs_a_release_and_a_reachable_hub(tmp_path):
    add_records(tmp_path / "b", [record()], create=True)
    with pytest.raises(LeaderboardError, match="nothing released in"):
        publish(tmp_path / "b", "cood/x", endpoint="http://127.0.0.1:9")
    release(tmp_path / "b")
    with pytest.raises(LeaderboardError, match=r"publishing to cood/x failed: \w+"):
        publish(tmp_path / "b", "cood/x", endpoint="http://127.0.0.1:9")
