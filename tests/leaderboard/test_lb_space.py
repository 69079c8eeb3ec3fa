"""Publishing a release's site as a static Hub Space beside its dataset repo, against the local Hub server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from huggingface_hub import HfApi, SpaceCard, hf_hub_download
from typer.testing import CliRunner

from lb_records import record
from leaderboard.cli import app
from leaderboard.errors import LeaderboardError
from leaderboard.publish import publish
from leaderboard.release import release, release_table
from leaderboard.site import build_site
from leaderboard.store import add_records


@pytest.fixture
def board(tmp_path) -> Path:
    """A leaderboard with two entries and release v1."""
    directory = tmp_path / "board"
    add_records(directory, [record(kappa="softmax"), record(kappa="entropy", aurocs=[0.9] * 11)], create=True)
    release(directory, note="first")
    return directory


def _tags(api: HfApi, repo: str, repo_type: str) -> dict[str, str]:
    return {ref.name: ref.target_commit for ref in api.list_repo_refs(repo, repo_type=repo_type).tags}


def _site_files(board: Path, version: int, out: Path) -> dict[str, bytes]:
    """The site of release ``version`` built locally: path -> bytes."""
    build_site(release_table(board, version), out, f"v{version}", board=board)
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def _download(repo: str, name: str, revision: str, repo_type: str, cache: Path) -> bytes:
    return Path(hf_hub_download(repo, name, repo_type=repo_type, revision=revision, cache_dir=cache)).read_bytes()


class CommitSpy:
    """Every commit's repo type and paths; ``fail`` makes the next commit to a Space fail: "before" it reaches
    the Hub (a dropped connection) or "after" it landed (the reply lost)."""

    def __init__(self, monkeypatch, fail: str | None = None):
        self.calls: list[tuple[str, list[str]]] = []
        self.fail = fail
        real, spy = HfApi.create_commit, self

        def create_commit(api, repo_id, operations, **kwargs):
            failing = kwargs.get("repo_type") == "space" and spy.fail
            if failing == "before":
                spy.fail = None
                raise ConnectionError("connection lost mid-upload (simulated)")
            spy.calls.append((kwargs.get("repo_type"), sorted(op.path_in_repo for op in operations)))
            info = real(api, repo_id, operations, **kwargs)
            if failing == "after":
                spy.fail = None
                raise ConnectionResetError(104, "Connection reset by peer")
            return info

        monkeypatch.setattr(HfApi, "create_commit", create_commit)


def test_space_holds_the_site_under_the_datasets_tag(board, hub_server, tmp_path, monkeypatch):
    repo, space = "cood/space-lb", "cood/space-lb-site"
    result = publish(board, repo, endpoint=hub_server, space_id=space)
    api = HfApi(endpoint=hub_server)
    dataset_tags, space_tags = _tags(api, repo, "dataset"), _tags(api, space, "space")
    assert set(dataset_tags) == set(space_tags) == {"v1"}
    assert result == {
        "repo_id": repo,
        "tag": "v1",
        "commit": dataset_tags["v1"],
        "uploaded": True,
        "space": {"repo_id": space, "tag": "v1", "commit": space_tags["v1"], "uploaded": True},
    }

    card = SpaceCard.load(space, repo_type="space")  # read back from the server, parsed by the Hub client
    assert (card.data.sdk, card.data.app_file, card.data.title, card.data.datasets) == (
        "static",
        "index.html",
        "C-OOD leaderboard",
        [repo],
    )
    assert f"[{repo}]({hub_server}/datasets/{repo}) (tag `v1`)" in card.text
    assert api.space_info(space).sdk == "static"

    site = _site_files(board, 1, tmp_path / "site")
    assert {"index.html", "static/site.js", "downloads/leaderboard.parquet", "records/index.html"} <= set(site)
    assert sum(name.startswith("models/") for name in site) == 1 and sum(name.endswith(".json") for name in site) == 2
    assert sorted(api.list_repo_files(space, repo_type="space", revision="v1")) == sorted(
        {*site, ".gitattributes", "README.md"}
    )
    cache = tmp_path / "cache"
    for name in ("index.html", "downloads/leaderboard.parquet", next(n for n in site if n.startswith("models/"))):
        assert _download(space, name, "v1", "space", cache) == site[name]
    parquet = Path(
        hf_hub_download(space, "downloads/leaderboard.parquet", repo_type="space", revision="v1", cache_dir=cache)
    )
    assert pd.read_parquet(parquet)["entry_id"].tolist() == release_table(board, 1)["entry_id"].tolist()

    dataset_card = _download(repo, "README.md", "v1", "dataset", cache).decode()
    assert f"the Hub Space [{space}]({hub_server}/spaces/{space})" in dataset_card

    spy = CommitSpy(monkeypatch)  # a rerun with nothing to do: the same files under both tags, no commit, no new tag
    again = publish(board, repo, endpoint=hub_server, space_id=space)
    assert spy.calls == []
    assert again == {**result, "uploaded": False, "space": {**result["space"], "uploaded": False}}
    assert (_tags(api, repo, "dataset"), _tags(api, space, "space")) == (dataset_tags, space_tags)


def test_a_new_version_replaces_the_sites_files_and_keeps_the_old_tag(board, hub_server, tmp_path):
    repo = space = "cood/space-versions"  # a Space and a dataset may share a name
    publish(board, repo, endpoint=hub_server, space_id=space)
    add_records(board, [record(model="other", weights="77" * 32, aurocs=[0.88] * 11)])
    release(board)
    result = publish(board, repo, endpoint=hub_server, space_id=space)
    api = HfApi(endpoint=hub_server)
    assert set(_tags(api, repo, "dataset")) == set(_tags(api, space, "space")) == {"v1", "v2"}
    assert result["space"]["tag"] == "v2" and result["space"]["uploaded"]
    v1, v2 = _site_files(board, 1, tmp_path / "v1"), _site_files(board, 2, tmp_path / "v2")
    assert sorted(api.list_repo_files(space, repo_type="space", revision="v2")) == sorted(
        {*v2, ".gitattributes", "README.md"}
    )
    assert sorted(api.list_repo_files(space, repo_type="space", revision="v1")) == sorted(
        {*v1, ".gitattributes", "README.md"}
    )
    cache = tmp_path / "cache"
    assert _download(space, "index.html", "v1", "space", cache) == v1["index.html"] != v2["index.html"]
    assert "**v2**" in _download(space, "README.md", "v2", "space", cache).decode()


@pytest.mark.parametrize("fail", ["before", "after"])
def test_rerun_after_a_network_failure_mid_upload(board, hub_server, monkeypatch, fail):
    repo, space = f"cood/space-net-{fail}", f"cood/space-net-{fail}-site"
    spy = CommitSpy(monkeypatch, fail=fail)
    error = (
        "ConnectionError: connection lost mid-upload" if fail == "before" else r"ConnectionResetError: \[Errno 104\]"
    )
    with pytest.raises(LeaderboardError, match=rf"^publishing to {space} failed: {error}"):
        publish(board, repo, endpoint=hub_server, space_id=space)
    api = HfApi(endpoint=hub_server)
    assert set(_tags(api, repo, "dataset")) == {"v1"} and _tags(api, space, "space") == {}
    landed = len(api.list_repo_commits(space, repo_type="space"))
    assert landed == (1 if fail == "before" else 2)  # the initial commit, and the site's if it landed

    result = publish(board, repo, endpoint=hub_server, space_id=space)
    assert not result["uploaded"] and result["space"]["uploaded"]
    assert set(_tags(api, repo, "dataset")) == set(_tags(api, space, "space")) == {"v1"}
    assert _tags(api, space, "space")["v1"] == result["space"]["commit"]
    assert len(api.list_repo_commits(space, repo_type="space")) == 2  # the site committed once, either way
    # a dropped call never reached the Hub; after a lost reply the rerun's call finds every file there and commits
    # nothing
    assert [kind for kind, _ in spy.calls] == ["dataset", "space"] + (["space"] if fail == "after" else [])


def test_a_space_with_other_files_under_the_tag_stops_before_anything_is_written(board, hub_server, tmp_path):
    space = "cood/space-taken"
    publish(board, "cood/space-taken-a", endpoint=hub_server, space_id=space)
    other = tmp_path / "other"
    add_records(other, [record(kappa="energy")], create=True)
    release(other)
    with pytest.raises(
        LeaderboardError,
        match=rf"^{space} already has v1 with other content \(\S+ differs\); "
        "a published version is never overwritten$",
    ):
        publish(other, "cood/space-taken-b", endpoint=hub_server, space_id=space)
    api = HfApi(endpoint=hub_server)
    assert _tags(api, "cood/space-taken-b", "dataset") == {}
    assert len(api.list_repo_commits("cood/space-taken-b", repo_type="dataset")) == 1  # only the initial commit


def test_dataset_only_card_has_no_space_link(board, hub_server, tmp_path):
    publish(board, "cood/space-none", endpoint=hub_server)
    card = _download("cood/space-none", "README.md", "v1", "dataset", tmp_path / "cache").decode()
    assert "/spaces/" not in card and "Space" not in card
    assert not HfApi(endpoint=hub_server).repo_exists("cood/space-none", repo_type="space")


# ---------------------------------------------------------------- the command line, killed mid-way and rerun


def _cli(*args, fault: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from leaderboard.cli import main; main()", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COOD_FAULT": fault},
    )


@pytest.mark.parametrize("point", ["publish:after-tag", "publish:after-space-upload", "publish:after-space-tag"])
def test_killed_publish_reruns_to_both_repos_tagged(board, hub_server, point):
    repo = f"cood/space-kill-{point.split(':')[1]}"  # the Space defaults to the dataset's repo id
    killed = _cli("publish", repo, "-d", board, fault=point)
    assert (killed.returncode, killed.stdout, killed.stderr) == (137, "", "")
    api = HfApi(endpoint=hub_server)
    assert set(_tags(api, repo, "dataset")) == {"v1"}
    assert set(_tags(api, repo, "space")) == ({"v1"} if point == "publish:after-space-tag" else set())

    rerun = _cli("publish", repo, "-d", board)
    assert rerun.returncode == 0, rerun.stderr
    dataset, space = _tags(api, repo, "dataset"), _tags(api, repo, "space")
    assert set(dataset) == set(space) == {"v1"}
    space_line = (
        f"v1 was already published to Space {repo} (commit {space['v1']}); nothing to upload"
        if point == "publish:after-space-tag"
        else f"published v1 to Space {repo} (commit {space['v1']})"
    )
    assert rerun.stdout.splitlines() == [
        f"v1 was already published to {repo} (commit {dataset['v1']}); nothing to upload",
        space_line,
    ]


def test_cli_space_options(board, hub_server):
    runner = CliRunner()
    help_text = runner.invoke(app, ["publish", "--help"]).output
    assert "--space" in help_text and "--no-space" in help_text and "the dataset's repo id" in help_text
    done = runner.invoke(app, ["publish", "cood/space-cli", "-d", str(board), "--space", "cood/space-cli-web"])
    assert done.exit_code == 0, done.output
    assert [line.split(" (")[0] for line in done.output.splitlines()] == [
        "published v1 to cood/space-cli",
        "published v1 to Space cood/space-cli-web",
    ]
    only = runner.invoke(app, ["publish", "cood/space-cli-only", "-d", str(board), "--no-space"])
    assert only.exit_code == 0 and len(only.output.splitlines()) == 1
    assert not HfApi(endpoint=hub_server).repo_exists("cood/space-cli-only", repo_type="space")
    both = runner.invoke(app, ["publish", "cood/x", "-d", str(board), "--space", "a/b", "--no-space"])
    assert both.exit_code != 0 and str(both.exception) == "give --space or --no-space, not both"
