"""The request queue on the local Hub server: requests validated at once, claims atomic under concurrency, records
marked verified only by the worker's path, weights files checked without running them."""

from __future__ import annotations

import io
import json
import threading
import uuid
import zipfile

import numpy as np
import pytest
from huggingface_hub import HfApi
from safetensors.numpy import save as save_safetensors
from typer.testing import CliRunner

from lb_records import GLYPHS as BENCHMARK
from lb_records import record
from leaderboard import requests as queue
from leaderboard.cli import app
from leaderboard.errors import LeaderboardError
from leaderboard.store import add_files, add_records, current_table, init_leaderboard
from leaderboard.weights_check import check_weights_file


def _name(prefix: str) -> str:
    return f"org/{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def api(hub_server) -> HfApi:
    return HfApi(endpoint=hub_server)


@pytest.fixture
def requests_repo(api, tmp_path) -> str:
    board = tmp_path / "board"
    init_leaderboard(board, BENCHMARK)
    repo = _name("requests")
    queue.init_queue(repo, board, api)
    return repo


def _model_repo(api: HfApi, files: dict[str, bytes]) -> str:
    repo = _name("model")
    api.create_repo(repo, exist_ok=True)
    for path, data in files.items():
        api.upload_file(path_or_fileobj=data, path_in_repo=path, repo_id=repo)
    return repo


def _tensors(seed: int = 0) -> bytes:
    return save_safetensors({"fc.weight": np.random.default_rng(seed).standard_normal((3, 4)).astype(np.float32)})


def _torch_file(state) -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


class Call:
    def __reduce__(self):
        return (print, ("this ran while loading",))


def test_a_request_is_validated_pinned_and_added_once(api, requests_repo):
    repo = _model_repo(api, {"w.safetensors": _tensors()})
    made = queue.make_request(
        api, requests_repo, "timm:resnet18", weights=repo, file="w.safetensors", kappas=["energy"]
    )
    commit = api.model_info(repo).sha
    assert made["status"] == "pending" and made["name"] == repo.split("/")[1] and made["kappas"] == ["energy"]
    assert made["model"]["revision"] == commit and made["model"]["weights_format"] == "safetensors"
    assert made["benchmark"] == BENCHMARK and made["num_levels"] == 11
    _, listed = queue.list_requests(api, requests_repo)
    assert [r["id"] for r in listed] == [made["id"]]
    with pytest.raises(LeaderboardError, match=f"already requested as {made['id']} \\(status pending\\)"):
        queue.make_request(api, requests_repo, "timm:resnet18", weights=repo, file="w.safetensors", kappas=["energy"])
    # a new commit of the model repo is another request, pinned to that commit
    api.upload_file(path_or_fileobj=_tensors(1), path_in_repo="w.safetensors", repo_id=repo)
    again = queue.make_request(
        api, requests_repo, "timm:resnet18", weights=repo, file="w.safetensors", kappas=["energy"]
    )
    assert again["id"] != made["id"] and again["model"]["revision"] == api.model_info(repo).sha != commit


@pytest.mark.parametrize(
    ("target", "options", "message"),
    [
        (
            "my_model.py",
            {},
            f"target 'my_model.py': give {queue.target_usage()}; a submission file is never run from a request",
        ),
        ("keras:resnet", {}, f"target 'keras:resnet': give {queue.target_usage()}"),
        ("timm:resnet18", {}, "timm: targets need --weights <owner>/<name>"),
        (
            "timm:resnet18",
            {"weights": "no-slash", "file": "w.safetensors"},
            "--weights 'no-slash': not a Hub model repo id",
        ),
        ("timm:resnet18", {"weights": "org/x", "file": "w.npz"}, "--file 'w.npz': a weights file in the repo"),
        ("timm:resnet18", {"weights": "org/x", "file": "../w.pt"}, "--file '../w.pt': a weights file in the repo"),
        ("hf:org/x", {"weights": "org/y", "file": "w.pt"}, "target 'hf:org/x' is its own Hub repo (hf:<owner>/<name>)"),
        ("hf:x", {}, "target 'hf:x': hf: takes a Hub model repo id"),
    ],
)
def test_a_malformed_request_is_refused_before_any_download(api, requests_repo, target, options, message):
    with pytest.raises(LeaderboardError) as info:
        queue.make_request(api, requests_repo, target, **options)
    assert str(info.value).startswith(message)
    assert queue.list_requests(api, requests_repo)[1] == []


def test_weights_that_would_run_code_or_are_broken_are_refused(api, requests_repo):
    cases = {
        "w.pt": (_torch_file({"x": Call()}), "would call __builtin__.print when loaded; only tensors are accepted"),
        "w.safetensors": (b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}", "is not a valid safetensors file"),
        "w.bin": (b"not a zip", "is no torch.save zip archive"),
    }
    for file, (data, message) in cases.items():
        repo = _model_repo(api, {file: data})
        with pytest.raises(LeaderboardError, match=message):
            queue.make_request(api, requests_repo, "timm:resnet18", weights=repo, file=file)
    repo = _model_repo(api, {"w.safetensors": _tensors()})
    with pytest.raises(LeaderboardError, match="has no file other.safetensors"):
        queue.make_request(api, requests_repo, "timm:resnet18", weights=repo, file="other.safetensors")
    with pytest.raises(LeaderboardError, match="looking up org/absent@main failed"):
        queue.make_request(api, requests_repo, "timm:resnet18", weights="org/absent", file="w.safetensors")
    with pytest.raises(LeaderboardError, match="is no transformers model repo"):
        queue.make_request(api, requests_repo, f"hf:{repo}")
    assert queue.list_requests(api, requests_repo)[1] == []


def test_torch_state_dicts_pass_the_static_check(tmp_path):
    import torch

    states = {
        "plain.pt": {"w": torch.ones(2, 3), "n": torch.arange(4)},
        "nested.pth": {"state_dict": {"w": torch.ones(2, dtype=torch.bfloat16)}, "epoch": 3},
        "parameter.bin": {"p": torch.nn.Parameter(torch.zeros(2))},
    }
    for name, state in states.items():
        (tmp_path / name).write_bytes(_torch_file(state))
        assert check_weights_file(tmp_path / name) == "torch"
    assert torch.load(tmp_path / "plain.pt", weights_only=True)["n"].tolist() == [0, 1, 2, 3]
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as handle:
        handle.writestr("w/other.txt", b"x")
    (tmp_path / "empty.pt").write_bytes(archive.getvalue())
    with pytest.raises(LeaderboardError, match="is no torch.save archive \\(no data.pkl\\)"):
        check_weights_file(tmp_path / "empty.pt")
    (tmp_path / "w.onnx").write_bytes(b"x")
    with pytest.raises(LeaderboardError, match="unknown format"):
        check_weights_file(tmp_path / "w.onnx")


def test_concurrent_claims_take_each_request_exactly_once(api, requests_repo):
    made = []
    for seed in range(5):
        repo = _model_repo(api, {"w.safetensors": _tensors(seed)})
        made.append(queue.make_request(api, requests_repo, "timm:resnet18", weights=repo, file="w.safetensors")["id"])
    taken: dict[str, list[str]] = {}
    errors = []

    def work(name: str) -> None:
        try:
            while (request := queue.claim(api, requests_repo, name)) is not None:
                taken.setdefault(request["id"], []).append(name)
                queue.finish(api, requests_repo, request, "done", entries=[])
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(f"w{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert sorted(taken) == sorted(made) and all(len(names) == 1 for names in taken.values())
    final = {r["id"]: r for r in queue.list_requests(api, requests_repo)[1]}
    assert all(final[i]["status"] == "done" and final[i]["worker"] == taken[i][0] for i in made)
    claims = [
        c.title for c in api.list_repo_commits(requests_repo, repo_type="dataset") if c.title.startswith("claim ")
    ]
    assert sorted(c.split()[1] for c in claims) == sorted(made)


def test_an_interrupted_request_goes_back_to_pending_and_a_stranger_cannot_finish_it(api, requests_repo):
    repo = _model_repo(api, {"w.safetensors": _tensors()})
    made = queue.make_request(api, requests_repo, "timm:resnet18", weights=repo, file="w.safetensors")
    mine = queue.claim(api, requests_repo, "w1")
    assert mine["id"] == made["id"] and queue.claim(api, requests_repo, "w2") is None
    with pytest.raises(LeaderboardError, match="is no longer this worker's"):
        queue.finish(api, requests_repo, {**mine, "worker": "w2"}, "done")
    back = queue.finish(api, requests_repo, mine, "pending")
    assert back["status"] == "pending" and "worker" not in back
    assert queue.claim(api, requests_repo, "w2")["worker"] == "w2"


def test_a_queue_belongs_to_one_benchmark_revision(api, requests_repo, tmp_path):
    other = tmp_path / "other"
    init_leaderboard(other, {**BENCHMARK, "manifest_sha256": "cd" * 32})
    with pytest.raises(LeaderboardError, match=f"{requests_repo} is the queue of another leaderboard"):
        queue.init_queue(requests_repo, other, api)
    with pytest.raises(LeaderboardError, match="is no request queue"):
        queue.read_queue(api, _name("nothing"))


def test_records_claiming_verification_are_refused_unless_the_worker_adds_them(tmp_path):
    board = tmp_path / "board"
    claimed = {
        **record(),
        "verification": {"status": "verified", "request": "0" * 12, "requests_repo": "o/r", "worker": "w"},
    }
    path = tmp_path / "claimed.json"
    path.write_text(json.dumps(claimed))
    for add in (lambda: add_files(board, [path], create=True), lambda: add_records(board, [claimed], create=True)):
        with pytest.raises(LeaderboardError, match="carries a 'verification' block; only the leaderboard's worker"):
            add()
    result = CliRunner().invoke(app, ["add", str(path), "--dir", str(board), "--init"])
    assert result.exit_code != 0 and "only the leaderboard's worker marks records verified" in str(result.exception)
    add_records(board, [record()], create=True, verified={"request": "0" * 12, "requests_repo": "o/r", "worker": "w"})
    add_records(board, [record(kappa="entropy")])
    table = current_table(board)
    assert dict(zip(table["kappa"], table["verification"])) == {"softmax": "verified", "entropy": "self-reported"}
    stored = json.loads(next(p for p in sorted((board / "records").glob("*.json"))).read_bytes())
    assert stored["verification"] == {"status": "verified", "request": "0" * 12, "requests_repo": "o/r", "worker": "w"}


def test_the_queue_commands(api, requests_repo, tmp_path):
    repo = _model_repo(api, {"w.safetensors": _tensors()})
    runner = CliRunner()
    made = runner.invoke(
        app,
        [
            "request",
            "timm:resnet18",
            "--queue",
            requests_repo,
            "--weights",
            repo,
            "--file",
            "w.safetensors",
            "--name",
            "resnet18-mine",
        ],
    )
    assert made.exit_code == 0, made.output
    assert made.output.startswith("requested ") and f"pending in {requests_repo}" in made.output
    listed = runner.invoke(app, ["requests", requests_repo])
    assert listed.exit_code == 0 and f"{requests_repo}: 1 request\n" in listed.output
    assert "pending  resnet18-mine" in listed.output
    refused = runner.invoke(app, ["request", "model.py", "--queue", requests_repo])
    assert refused.exit_code != 0 and "a submission file is never run from a request" in str(refused.exception)
    board = tmp_path / "board2"
    init_leaderboard(board, BENCHMARK)
    created = runner.invoke(app, ["queue-init", _name("q"), "--dir", str(board)])
    assert created.exit_code == 0 and f"takes requests for {BENCHMARK['id']} {BENCHMARK['version']}" in created.output
