"""The local Hub against the real huggingface_hub and datasets clients."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import tarfile
import urllib.error
import urllib.request
from pathlib import Path

import pandas as pd
import pytest
from huggingface_hub import HfApi, HfFileSystem, constants, hf_hub_download
from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError


def write(path, data: bytes):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_default_endpoint_is_the_local_hub(hub_server):
    assert constants.ENDPOINT == hub_server
    assert HfApi().endpoint == hub_server
    assert constants.HF_HUB_DISABLE_XET and not constants.HF_HUB_OFFLINE


def test_round_trip_with_hf_api(hub_server, tmp_path):
    api = HfApi(endpoint=hub_server)
    repo = "cood/round-trip"
    url = api.create_repo(repo, repo_type="dataset")
    assert url == f"{hub_server}/datasets/{repo}" and url.repo_id == repo
    api.create_repo(repo, repo_type="dataset", exist_ok=True)
    with pytest.raises(HfHubHTTPError) as exc:
        api.create_repo(repo, repo_type="dataset")
    assert exc.value.response.status_code == 409

    binary = bytes(range(256)) * 40
    first = tmp_path / "v1"
    write(first / "a.txt", b"first a\n")
    write(first / "sub" / "deep" / "b.bin", binary)
    info1 = api.upload_folder(folder_path=first, repo_id=repo, repo_type="dataset", commit_message="one")
    api.create_tag(repo, tag="v1", repo_type="dataset", revision=info1.oid)
    second = tmp_path / "v2"
    write(second / "a.txt", b"second a\n")
    write(second / "c.txt", b"c\n")
    info2 = api.upload_folder(folder_path=second, repo_id=repo, repo_type="dataset", commit_message="two")

    assert (
        re.fullmatch(r"[0-9a-f]{40}", info1.oid) and re.fullmatch(r"[0-9a-f]{40}", info2.oid) and info1.oid != info2.oid
    )

    def download(path: str, revision: str) -> bytes:
        return Path(hf_hub_download(repo, path, repo_type="dataset", revision=revision)).read_bytes()

    assert download("a.txt", "v1") == b"first a\n"
    assert download("a.txt", "main") == b"second a\n"
    assert download("a.txt", info1.oid) == b"first a\n"
    assert download("sub/deep/b.bin", "v1") == binary
    assert api.list_repo_files(repo, repo_type="dataset", revision="v1") == [
        ".gitattributes",
        "a.txt",
        "sub/deep/b.bin",
    ]
    assert api.list_repo_files(repo, repo_type="dataset") == [".gitattributes", "a.txt", "c.txt", "sub/deep/b.bin"]
    with pytest.raises(EntryNotFoundError):
        hf_hub_download(repo, "c.txt", repo_type="dataset", revision="v1")
    with pytest.raises(RevisionNotFoundError):
        api.dataset_info(repo, revision="v9")
    with pytest.raises(RepositoryNotFoundError):
        api.dataset_info("cood/nothing-here")

    refs = api.list_repo_refs(repo, repo_type="dataset")
    assert [(b.name, b.target_commit) for b in refs.branches] == [("main", info2.oid)]
    assert [(t.name, t.ref, t.target_commit) for t in refs.tags] == [("v1", "refs/tags/v1", info1.oid)]
    assert api.dataset_info(repo, revision="v1").sha == info1.oid
    assert api.dataset_info(repo).sha == info2.oid
    commits = api.list_repo_commits(repo, repo_type="dataset")
    assert [c.title for c in commits] == ["two", "one", "initial commit"]
    assert commits[0].commit_id == info2.oid

    tree = {e.path: e for e in api.list_repo_tree(repo, repo_type="dataset", revision="v1", recursive=True)}
    assert sorted(tree) == [".gitattributes", "a.txt", "sub", "sub/deep", "sub/deep/b.bin"]
    assert tree["sub/deep/b.bin"].size == len(binary)
    top = [e.path for e in api.list_repo_tree(repo, repo_type="dataset", revision="v1")]
    assert top == [".gitattributes", "a.txt", "sub"]
    expanded = {e.path: e for e in api.list_repo_tree(repo, "sub/deep", repo_type="dataset", expand=True)}
    assert expanded["sub/deep/b.bin"].last_commit.oid == info1.oid  # unchanged by the second commit
    info = api.get_paths_info(repo, ["a.txt", "sub", "nope"], repo_type="dataset", revision="v1")
    assert [(type(e).__name__, e.path) for e in info] == [("RepoFile", "a.txt"), ("RepoFolder", "sub")]

    with HfFileSystem().open(f"datasets/{repo}@v1/sub/deep/b.bin", "rb", block_size=100) as f:
        f.seek(300)
        assert f.read(10) == binary[300:310]


def test_unchanged_upload_makes_no_commit_and_deletes_work(hub_server, tmp_path):
    api = HfApi(endpoint=hub_server)
    repo = "cood/no-op"
    api.create_repo(repo, repo_type="dataset")
    write(tmp_path / "x" / "a.txt", b"a")
    first = api.upload_folder(folder_path=tmp_path / "x", repo_id=repo, repo_type="dataset")
    again = api.upload_folder(folder_path=tmp_path / "x", repo_id=repo, repo_type="dataset")
    assert again.oid == first.oid
    api.delete_file("a.txt", repo_id=repo, repo_type="dataset")
    assert api.list_repo_files(repo, repo_type="dataset") == [".gitattributes"]
    assert api.list_repo_files(repo, repo_type="dataset", revision=first.oid) == [".gitattributes", "a.txt"]


def test_load_parquet_dataset_at_a_tag(hub_server, tmp_path):
    import datasets

    api = HfApi(endpoint=hub_server)
    repo = "cood/parquet"
    api.create_repo(repo, repo_type="dataset")
    pd.DataFrame({"x": [1, 2, 3]}).to_parquet(write(tmp_path / "v1" / "data" / "train.parquet", b""))
    api.upload_folder(folder_path=tmp_path / "v1", repo_id=repo, repo_type="dataset")
    api.create_tag(repo, tag="v1", repo_type="dataset")
    pd.DataFrame({"x": [4, 5, 6, 7, 8]}).to_parquet(write(tmp_path / "v2" / "data" / "train.parquet", b""))
    api.upload_folder(folder_path=tmp_path / "v2", repo_id=repo, repo_type="dataset")

    assert datasets.load_dataset(repo, revision="v1", split="train")["x"] == [1, 2, 3]
    assert datasets.load_dataset(repo, split="train")["x"] == [4, 5, 6, 7, 8]


def shard(samples: dict[str, dict]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for key, fields in samples.items():
            for ext, data in fields.items():
                member = tarfile.TarInfo(f"{key}.{ext}")
                member.size = len(data)
                tar.addfile(member, io.BytesIO(data))
    return buffer.getvalue()


def test_load_webdataset_shards_by_hf_path_at_a_tag(hub_server, tmp_path):
    import datasets

    api = HfApi(endpoint=hub_server)
    repo = "cood/webdataset"
    api.create_repo(repo, repo_type="dataset")
    for name, keys in {"n01": ["k1", "k2"], "n02": ["k3"]}.items():
        samples = {k: {"txt": k.encode(), "json": json.dumps({"class_id": name}).encode()} for k in keys}
        write(tmp_path / "ood" / "test" / "000" / f"{name}.tar", shard(samples))
    api.upload_folder(folder_path=tmp_path, repo_id=repo, repo_type="dataset")
    api.create_tag(repo, tag="v1.0", repo_type="dataset")
    api.delete_file("ood/test/000/n02.tar", repo_id=repo, repo_type="dataset")

    files = [f"hf://datasets/{repo}@v1.0/ood/test/000/{n}.tar" for n in ("n01", "n02")]
    ds = datasets.load_dataset("webdataset", data_files={"level_00": files}, split="level_00")
    assert sorted(ds["txt"]) == ["k1", "k2", "k3"]
    assert sorted(row["class_id"] for row in ds["json"]) == ["n01", "n01", "n02"]


def test_a_subprocess_inherits_the_local_hub(hub_server, tmp_path):
    api = HfApi(endpoint=hub_server)
    repo = "cood/child"
    api.create_repo(repo, repo_type="dataset")
    sha = api.upload_file(path_or_fileobj=b"hi", path_in_repo="hi.txt", repo_id=repo, repo_type="dataset").oid
    code = f"from huggingface_hub import HfApi; print(HfApi().dataset_info({repo!r}).sha)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == sha


def test_branches_tag_deletion_and_whoami(hub_server):
    api = HfApi(endpoint=hub_server)
    repo = "cood/refs"
    api.create_repo(repo, repo_type="dataset")
    base = api.upload_file(path_or_fileobj=b"1", path_in_repo="f.txt", repo_id=repo, repo_type="dataset").oid
    api.create_branch(repo, branch="dev", repo_type="dataset")
    dev = api.upload_file(path_or_fileobj=b"2", path_in_repo="f.txt", repo_id=repo, repo_type="dataset", revision="dev")
    api.create_tag(repo, tag="v1", repo_type="dataset", revision="dev")
    with pytest.raises(HfHubHTTPError) as exc:
        api.create_tag(repo, tag="v1", repo_type="dataset")
    assert exc.value.response.status_code == 409
    refs = api.list_repo_refs(repo, repo_type="dataset")
    assert {b.name: b.target_commit for b in refs.branches} == {"main": base, "dev": dev.oid}
    assert [(t.name, t.target_commit) for t in refs.tags] == [("v1", dev.oid)]
    api.delete_tag(repo, tag="v1", repo_type="dataset")
    assert api.list_repo_refs(repo, repo_type="dataset").tags == []
    with pytest.raises(RevisionNotFoundError):
        api.delete_tag(repo, tag="v1", repo_type="dataset")
    assert api.whoami()["name"] == "cood-tester"


def test_a_static_space(hub_server, tmp_path):
    api = HfApi(endpoint=hub_server)
    space = "cood/static-space"
    body = json.dumps({"name": "no-sdk", "organization": "cood", "type": "space"}).encode()
    request = urllib.request.Request(f"{hub_server}/api/repos/create", body, {"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as refused:  # the client insists on an sdk, so ask the server directly
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 400 and "a Space needs an sdk" in json.loads(refused.value.read())["error"]
    url = api.create_repo(space, repo_type="space", space_sdk="static")
    assert url == f"{hub_server}/spaces/{space}"
    api.create_repo(space, repo_type="space", space_sdk="static", exist_ok=True)
    write(tmp_path / "site" / "index.html", b"<h1>hi</h1>")
    write(tmp_path / "site" / "static" / "site.js", b"1;")
    commit = api.upload_folder(folder_path=tmp_path / "site", repo_id=space, repo_type="space").oid
    api.create_tag(space, tag="v1", repo_type="space", revision=commit)
    assert [(t.name, t.target_commit) for t in api.list_repo_refs(space, repo_type="space").tags] == [("v1", commit)]
    assert sorted(e.path for e in api.list_repo_tree(space, repo_type="space", revision="v1", recursive=True)) == [
        ".gitattributes",
        "index.html",
        "static",
        "static/site.js",
    ]
    assert api.space_info(space, revision="v1").sdk == "static"
    got = hf_hub_download(space, "index.html", repo_type="space", revision="v1", cache_dir=tmp_path / "cache")
    assert Path(got).read_bytes() == b"<h1>hi</h1>"
    assert not api.repo_exists(space, repo_type="dataset")  # a Space and a dataset of one name are two repos
