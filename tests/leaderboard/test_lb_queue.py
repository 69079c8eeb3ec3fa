"""The request queue on the local Hub server: requests validated at once, claims atomic under concurrency, records
marked verified only by the worker's path, weights files checked without running them."""

from __future__ import annotations

import hashlib
import io
import json
import threading
import uuid
import zipfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from huggingface_hub import CommitOperationAdd, HfApi, hf_hub_download
from safetensors.numpy import save as save_safetensors
from typer.testing import CliRunner

from dataset_builder.errors import CoodError
from lb_records import GLYPHS as BENCHMARK
from lb_records import record
from leaderboard import requests as queue
from leaderboard.cli import app
from leaderboard.errors import LeaderboardError
from leaderboard.store import add_files, add_records, current_table, init_leaderboard
from leaderboard.weights_check import check_weights_file
from leaderboard.worker import Worker


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


def _commit_files(api: HfApi, repo: str, files: dict[str, bytes]) -> None:
    """Commit files to the requests repo as any requester can: by hand, not through ``make_request``."""
    operations = [CommitOperationAdd(path, data) for path, data in files.items()]
    api.create_commit(repo, operations, commit_message="by hand", repo_type="dataset")


def _answers(api: HfApi, repo: str) -> Counter:
    """How often each request file was answered: claimed or refused (the commit titles)."""
    titles = [c.title.split()[:2] for c in api.list_repo_commits(repo, repo_type="dataset")]
    return Counter(" ".join(t) for t in titles if t[0] in ("claim", "refuse"))


def test_files_that_are_no_request_are_refused_once_with_their_fields_kept(api, requests_repo):
    repo = _model_repo(api, {"w.safetensors": _tensors()})
    good = queue.make_request(api, requests_repo, "timm:resnet18", weights=repo, file="w.safetensors")

    def variant(request_id: str, **changes) -> bytes:
        model = {**good["model"], **changes.pop("model", {})}
        return json.dumps({**good, "id": request_id, "model": model, **changes}).encode()

    ids = iter(f"{n:012x}" for n in range(0xABC000000000, 0xABC000000100))
    hostile = {
        "requests/garbage.json": (b"{not json", "not a JSON object of at most 64 KiB"),
        "requests/list.json": (b"[1, 2]", "not a JSON object of at most 64 KiB"),
        "requests/big.json": (json.dumps({"status": "pending", "pad": "x" * 70_000}).encode(), "not a JSON object"),
        "requests/deep.json": (b"[" * 30_000 + b"]" * 30_000, "not a JSON object of at most 64 KiB"),
        "requests/no-status.json": (variant("no-status", status="weird"), "its id is not a request id"),
    }
    for changes, why in [
        ({"name": "../../etc"}, "its name is not a model name (printable, at most 200 bytes, no / or \\)"),
        ({"name": "ok\x1b[2J"}, "its name is not a model name"),
        ({"kappas": "softmax"}, "its kappas are not a list of at most 64 kappa names"),
        ({"num_levels": 3}, "it is not for the queue's benchmark revision and level count"),
        ({"benchmark": {**BENCHMARK, "manifest_sha256": "cd" * 32}}, "it is not for the queue's benchmark revision"),
        ({"model": {"file": "/etc/passwd"}}, "--file '/etc/passwd': a weights file in the repo"),
        ({"model": {"file": "../../w.safetensors"}}, "--file '../../w.safetensors': a weights file in the repo"),
        ({"model": {"weights_file": "/dev/zero"}}, "a weights_file beside its file"),
        ({"model": {"revision": "main"}}, "its revision is not a commit sha or its weights_sha256 not a sha256"),
        ({"model": {"repo": "org/other\n"}}, "--weights 'org/other\\n': not a Hub model repo id"),
        ({"model": {"target": "my_model.py"}}, "target 'my_model.py': give "),
    ]:
        request_id = next(ids)
        hostile[queue.request_path(request_id)] = (variant(request_id, **changes), why)
    _commit_files(api, requests_repo, {path: data for path, (data, _) in hostile.items()})

    answered = {}
    while (taken := queue.claim(api, requests_repo, "w1")) is not None:
        answered[taken.get("id", "-")] = taken
        if taken["status"] == "running":
            queue.finish(api, requests_repo, taken, "done", entries=[])
    assert queue.claim(api, requests_repo, "w2") is None  # nothing is served again
    assert _answers(api, requests_repo) == Counter(
        [f"claim {good['id']}"] + [f"refuse {path}" for path in hostile]
    )  # every file answered exactly once
    head, files = api.dataset_info(requests_repo).sha, api.list_repo_files(requests_repo, repo_type="dataset")
    assert sorted(f for f in files if f.startswith("requests/")) == sorted([*hostile, queue.request_path(good["id"])])
    for path, (data, why) in hostile.items():
        there = json.loads(Path(hf_hub_download(requests_repo, path, repo_type="dataset", revision=head)).read_text())
        assert there["status"] == "failed" and there["worker"] == "w1"
        assert there["reason"].startswith(f"refused {path}: {why}") and "\n" not in there["reason"]
        if path.removeprefix("requests/").removesuffix(".json") in answered:
            kept = json.loads(data)  # a request's own fields stay as they were
            assert {k: there[k] for k in ("id", "name", "model", "kappas")} == {
                k: kept[k] for k in ("id", "name", "model", "kappas")
            }
    listed = [(r.get("id"), r["status"]) for r in queue.list_requests(api, requests_repo)[1]]
    assert sorted(status for _, status in listed) == ["done"] + ["failed"] * len(hostile)
    assert (good["id"], "done") in listed
    shown = CliRunner().invoke(app, ["requests", requests_repo])
    assert shown.exit_code == 0 and f"{requests_repo}: {len(hostile) + 1} requests\n" in shown.output
    assert "\x1b" not in shown.output and "ok\\x1b[2J" in shown.output  # a name's escape is shown, not acted on


class ModelError(CoodError):
    """A project error about the request's model."""


class FailingEvaluator:
    """Fails each request the way its name says, after reading the weights it was handed; the first time, a requester
    rewrites the queue's ``queue.json`` for another benchmark meanwhile."""

    identity = BENCHMARK

    def __init__(self, secret: Path, api: HfApi, requests_repo: str):
        self.secret, self.handed, self.api, self.requests_repo = secret, [], api, requests_repo

    def evaluate(self, request: dict, weights: Path) -> tuple[list[dict], Path]:
        if not self.handed:
            other = {"benchmark": {**BENCHMARK, "manifest_sha256": "cd" * 32}, "num_levels": 11}
            _commit_files(self.api, self.requests_repo, {queue.QUEUE_JSON: json.dumps(other).encode()})
        self.handed.append(weights)
        digest = hashlib.sha256(self.secret.read_bytes()).hexdigest()
        if request["name"] == "project-error":
            raise ModelError(f"the weights file {self.secret} (sha256 {digest[:12]}) does not fit {request['id']}")
        raise RuntimeError(f"{self.secret}: {self.secret.read_text()}")


def test_public_reasons_quote_nothing_of_the_worker(api, tmp_path):
    board = tmp_path / "board"
    init_leaderboard(board, BENCHMARK)
    requests_repo = _name("requests")
    queue.init_queue(requests_repo, board, api)
    made = {}
    for name in ("project-error", "other-error", "swapped"):
        repo = _model_repo(api, {"w.safetensors": _tensors(len(made))})
        made[name] = queue.make_request(
            api, requests_repo, "timm:resnet18", weights=repo, file="w.safetensors", name=name
        )
    swapped = made["swapped"]  # its weights file is another than the one requested, at the same commit
    swapped = {**swapped, "model": {**swapped["model"], "weights_sha256": "ab" * 32}}
    _commit_files(api, requests_repo, {queue.request_path(swapped["id"]): json.dumps(swapped).encode()})
    secret = tmp_path / "secret.txt"
    secret.write_text("the worker's own\nfile")
    evaluator, lines = FailingEvaluator(secret, api, requests_repo), []
    served = Worker(api, requests_repo, board, evaluator, name="w1", log=lines.append).run()

    reasons = {r["name"]: r["reason"] for r in served}  # the requests are checked against the board, not queue.json
    assert [r["status"] for r in served] == ["failed"] * 3 and len(evaluator.handed) == 2
    assert sorted(p.read_bytes() for p in evaluator.handed) == sorted([_tensors(0), _tensors(1)])  # the Hub's files
    pid = made["project-error"]["id"]
    assert reasons == {
        "project-error": f"ModelError: the weights file <local path> (sha256 <hash>) does not fit {pid}",
        "other-error": "the evaluation failed on the worker (RuntimeError); the worker's log has the details",
        "swapped": f"LeaderboardError: {swapped['model']['repo']}@{swapped['model']['revision']}: "
        "its weights file is not the requested one (another sha256)",
    }
    digest = hashlib.sha256(secret.read_bytes()).hexdigest()
    for reason in reasons.values():
        assert digest[:8] not in reason and str(tmp_path) not in reason and "the worker's own" not in reason
    assert any(str(secret) in line and digest[:12] in line for line in lines)  # the worker's log has it all
    assert {r["id"]: r["reason"] for r in queue.list_requests(api, requests_repo)[1]} == {
        made[n]["id"]: reasons[n] for n in made
    }
