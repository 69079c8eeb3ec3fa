"""Publishing a benchmark folder to the local Hub: by tag, idempotent, resumable."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pandas as pd
import pytest
from huggingface_hub import HfApi, snapshot_download

from dataset_builder.errors import BenchmarkError
from dataset_builder.publish import batches, local_files, publish


def tar_bytes(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def make_benchmark(root: Path) -> Path:
    """A tiny benchmark folder in the DESIGN.md layout (8 files)."""
    shards = {
        "id/test/000000.tar": tar_bytes({"id1.png": b"\x89PNG id1", "id1.json": b'{"class_id": "a"}'}),
        "ood/estimation/000000.tar": tar_bytes({"o1.png": b"\x89PNG o1", "o1.json": b'{"class_id": "n01"}'}),
        "ood/test/000/n01.tar": tar_bytes({"o2.png": b"\x89PNG o2", "o2.json": b'{"class_id": "n01"}'}),
        "ood/test/000/n02.tar": tar_bytes({"o3.png": b"\x89PNG o3", "o3.json": b'{"class_id": "n02"}'}),
    }
    manifest = {"format_version": 1, "benchmark": "tiny", "shards": [{"path": path} for path in shards]}
    files = {"manifest.json": json.dumps(manifest).encode(), "README.md": b"---\nlicense: mit\n---\n# tiny\n", **shards}
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    (root / "classes").mkdir()
    pd.DataFrame({"index": [0], "id": ["a"], "name": ["A"]}).to_parquet(root / "classes" / "id.parquet")
    pd.DataFrame({"id": ["n01", "n02"], "status": ["ood", "ood"]}).to_parquet(root / "classes" / "ood.parquet")
    (root / "manifest.json.partial").write_bytes(b"half written")
    (root / ".cache").mkdir()
    (root / ".cache" / "x").write_bytes(b"local cache")
    return root


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {path: file.read_bytes() for path, file in local_files(root).items()}


class CommitSpy:
    """Records the paths of every commit ``publish`` makes; can fail on a given call, as an interruption."""

    def __init__(self, monkeypatch, fail_on_call: int | None = None):
        self.calls: list[list[str]] = []
        self.fail_on_call = fail_on_call
        real = HfApi.create_commit
        spy = self

        def create_commit(api, repo_id, operations, **kwargs):
            if len(spy.calls) + 1 == spy.fail_on_call:
                spy.fail_on_call = None
                raise ConnectionError("connection lost (simulated)")
            spy.calls.append(sorted(op.path_in_repo for op in operations))
            return real(api, repo_id, operations, **kwargs)

        monkeypatch.setattr(HfApi, "create_commit", create_commit)


def test_local_files_skip_hidden_and_partial(tmp_path):
    root = make_benchmark(tmp_path / "b")
    assert sorted(local_files(root)) == [
        "README.md",
        "classes/id.parquet",
        "classes/ood.parquet",
        "id/test/000000.tar",
        "manifest.json",
        "ood/estimation/000000.tar",
        "ood/test/000/n01.tar",
        "ood/test/000/n02.tar",
    ]


def test_batches_by_count_and_bytes():
    sizes = {"a": 5, "b": 5, "c": 5, "d": 20, "e": 1}
    assert batches(list(sizes), sizes, max_files=2, max_bytes=100) == [["a", "b"], ["c", "d"], ["e"]]
    assert batches(list(sizes), sizes, max_files=10, max_bytes=10) == [["a", "b"], ["c"], ["d"], ["e"]]
    assert batches([], {}, 2, 10) == []


def test_publish_then_download_by_tag(hub_server, tmp_path, monkeypatch):
    root = make_benchmark(tmp_path / "bench")
    spy = CommitSpy(monkeypatch)
    sha = publish(root, "cood/bench-a", tag="v1", endpoint=hub_server, batch_files=3)
    api = HfApi(endpoint=hub_server)
    assert api.dataset_info("cood/bench-a", revision="v1").sha == sha
    assert [len(c) for c in spy.calls] == [3, 3, 2]
    assert spy.calls[-1] == ["README.md", "manifest.json"]
    downloaded = Path(snapshot_download("cood/bench-a", repo_type="dataset", revision="v1", local_dir=tmp_path / "dl"))
    assert tree_bytes(downloaded) == tree_bytes(root)
    assert (downloaded / ".gitattributes").is_file() and not (downloaded / "manifest.json.partial").exists()


def test_publishing_twice_is_idempotent(hub_server, tmp_path, monkeypatch):
    root = make_benchmark(tmp_path / "bench")
    sha = publish(root, "cood/bench-b", tag="v1", endpoint=hub_server)
    api = HfApi(endpoint=hub_server)
    commits = len(api.list_repo_commits("cood/bench-b", repo_type="dataset"))
    spy = CommitSpy(monkeypatch)
    assert publish(root, "cood/bench-b", tag="v1", endpoint=hub_server) == sha
    assert spy.calls == []
    assert len(api.list_repo_commits("cood/bench-b", repo_type="dataset")) == commits == 3  # initial, data, manifest


def test_interrupted_publish_resumes_with_the_rest(hub_server, tmp_path, monkeypatch):
    root = make_benchmark(tmp_path / "bench")
    spy = CommitSpy(monkeypatch, fail_on_call=2)
    with pytest.raises(ConnectionError):
        publish(root, "cood/bench-c", tag="v1", endpoint=hub_server, batch_files=2)
    api = HfApi(endpoint=hub_server)
    first = spy.calls[0]
    assert first == ["classes/id.parquet", "classes/ood.parquet"]
    assert api.list_repo_refs("cood/bench-c", repo_type="dataset").tags == []
    assert set(api.list_repo_files("cood/bench-c", repo_type="dataset")) == {".gitattributes", *first}

    sha = publish(root, "cood/bench-c", tag="v1", endpoint=hub_server, batch_files=2)
    resumed = [p for call in spy.calls[1:] for p in call]
    assert sorted(resumed) == sorted(set(local_files(root)) - set(first))
    assert api.dataset_info("cood/bench-c", revision="v1").sha == sha
    downloaded = Path(snapshot_download("cood/bench-c", repo_type="dataset", revision="v1", local_dir=tmp_path / "dl"))
    assert tree_bytes(downloaded) == tree_bytes(root)


def test_a_new_version_uploads_the_difference_and_old_tags_stay(hub_server, tmp_path, monkeypatch):
    root = make_benchmark(tmp_path / "bench")
    v1 = publish(root, "cood/bench-d", tag="v1", endpoint=hub_server)
    old_readme = (root / "README.md").read_bytes()
    (root / "README.md").write_bytes(b"# tiny, version 2\n")
    (root / "ood" / "test" / "000" / "n02.tar").unlink()
    with pytest.raises(BenchmarkError, match=r"cood/bench-d tag v1 already holds other files \(2, e.g. README.md\)"):
        publish(root, "cood/bench-d", tag="v1", endpoint=hub_server)

    spy = CommitSpy(monkeypatch)
    v2 = publish(root, "cood/bench-d", tag="v2", endpoint=hub_server)
    assert v2 != v1 and spy.calls == [["README.md", "ood/test/000/n02.tar"]]  # the upload and the deletion
    api = HfApi(endpoint=hub_server)
    assert "ood/test/000/n02.tar" not in api.list_repo_files("cood/bench-d", repo_type="dataset", revision="v2")
    assert "ood/test/000/n02.tar" in api.list_repo_files("cood/bench-d", repo_type="dataset", revision="v1")
    old = snapshot_download("cood/bench-d", repo_type="dataset", revision="v1", local_dir=tmp_path / "v1")
    assert (Path(old) / "README.md").read_bytes() == old_readme


def test_not_a_benchmark_folder(hub_server, tmp_path):
    with pytest.raises(BenchmarkError, match="is not a benchmark folder: no manifest.json"):
        publish(tmp_path, "cood/bench-e", tag="v1", endpoint=hub_server)
