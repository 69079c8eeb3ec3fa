"""The request queue end to end on the local Hub server: two workers (separate processes) serve four requests, one of
which fails in the harness; every request is claimed once, the good ones' records enter the board verified, each is
released and republished to the dataset repo and its Space, and the failure's reason is recorded. Hostile request
files (ids that are paths, weights files on the worker's disk, a request under another file's name) are refused once
by the real worker."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import torch
from huggingface_hub import CommitOperationAdd, HfApi, hf_hub_download
from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessor

from harness.benchmarks import open_benchmark
from harness.errors import HarnessError
from harness.worker import RequestEvaluator
from leaderboard import requests as queue
from leaderboard.release import list_releases
from leaderboard.store import current_table, init_leaderboard

WORKER = "from leaderboard.cli import main; main()"


def _tiny_vit(folder: Path, labels: int, seed: int) -> Path:
    torch.manual_seed(seed)
    config = ViTConfig(
        image_size=32,
        patch_size=8,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=37,
        num_labels=labels,
    )
    ViTForImageClassification(config).save_pretrained(folder)
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


def _tags(api: HfApi, repo: str, repo_type: str) -> set[str]:
    return {ref.name for ref in api.list_repo_refs(repo, repo_type=repo_type).tags}


@pytest.mark.slow
def test_two_workers_serve_every_request_once_and_republish(hub_server, tiny_glyphs, tmp_path):
    api = HfApi(endpoint=hub_server)
    run = uuid.uuid4().hex[:8]
    requests_repo, board_repo = f"org/requests-{run}", f"org/board-{run}"
    identity = open_benchmark(tiny_glyphs, progress=False).identity()
    board = tmp_path / "board"
    init_leaderboard(board, identity)
    queue.init_queue(requests_repo, board, api)
    made = {}
    for i, labels in enumerate(
        [identity["num_id_classes"]] * 3 + [7]
    ):  # the last one's head does not fit the benchmark
        repo = f"org/vit-{i}-{run}"
        api.create_repo(repo)
        api.upload_folder(folder_path=_tiny_vit(tmp_path / f"vit{i}", labels, i), repo_id=repo)
        made[queue.make_request(api, requests_repo, f"hf:{repo}")["id"]] = repo

    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                WORKER,
                "worker",
                requests_repo,
                "--dir",
                str(board),
                "--benchmark",
                str(tiny_glyphs),
                "--publish",
                board_repo,
                "--device",
                "cpu",
                "--work-dir",
                str(tmp_path / f"work{w}"),
                "--name",
                f"w{w}",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for w in (1, 2)
    ]
    outputs = [p.communicate(timeout=900)[0] for p in workers]
    assert [p.returncode for p in workers] == [0, 0], outputs

    final = {r["id"]: r for r in queue.list_requests(api, requests_repo)[1]}
    assert sorted(final) == sorted(made)
    claims = [
        c.title.split()[1]
        for c in api.list_repo_commits(requests_repo, repo_type="dataset")
        if c.title.startswith("claim ")
    ]
    assert sorted(claims) == sorted(made)  # each request claimed exactly once
    failed = [r for r in final.values() if r["status"] == "failed"]
    done = [r for r in final.values() if r["status"] == "done"]
    assert len(failed) == 1 and made[failed[0]["id"]].startswith("org/vit-3-")
    reason = failed[0]["reason"]  # refused from its config.json's labels, before its weights were read
    assert "the model has 7 output classes, the benchmark " in reason and "has 36 ID classes" in reason
    assert "\n" not in reason
    assert len(done) == 3 and sorted(r["release"] for r in done) == [1, 2, 3]
    assert all(r["published"] == f"v{r['release']}" and r["worker"] in ("w1", "w2") for r in done)
    served = sum(int(re.search(r"served (\d+) request", out).group(1)) for out in outputs)
    assert served == 4

    table = current_table(board)
    assert len(table) == 3 * 4 and set(table["verification"]) == {"verified"} and table["model"].nunique() == 3
    for path in sorted((board / "records").glob("*.json")):
        verification = json.loads(path.read_bytes())["verification"]
        request = final[verification["request"]]
        assert verification == {
            "status": "verified",
            "request": request["id"],
            "requests_repo": requests_repo,
            "worker": request["worker"],
        }
        assert len(request["entries"]) == 4
    assert list_releases(board) == [1, 2, 3]
    assert _tags(api, board_repo, "dataset") == _tags(api, board_repo, "space") == {"v1", "v2", "v3"}
    page = Path(
        hf_hub_download(board_repo, "index.html", repo_type="space", revision="v3", cache_dir=tmp_path / "hub")
    ).read_text()
    data = json.loads(re.search(r'<script type="application/json" id="board-data">(.*?)</script>', page, re.S).group(1))
    assert len(data["models"]) == 3 and all(e["ver"] == "verified" for m in data["models"] for e in m["e"])


def _request_files(api: HfApi, repo: str) -> dict[str, dict]:
    """Every file of the queue's requests folder at its head, as JSON."""
    head = api.dataset_info(repo).sha
    return {
        path: json.loads(Path(hf_hub_download(repo, path, repo_type="dataset", revision=head)).read_text())
        for path in api.list_repo_files(repo, repo_type="dataset", revision=head)
        if path.startswith("requests/")
    }


def _worker(requests_repo: str, board: Path, benchmark: Path, work: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-c", WORKER, "worker", requests_repo, "--dir", str(board), "--benchmark"]
    command += [str(benchmark), "--device", "cpu", "--work-dir", str(work), "--name", "w1"]
    return subprocess.run(command, cwd=work.parent, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_hostile_request_files_are_refused_once_and_touch_nothing_of_the_worker(hub_server, tiny_glyphs, tmp_path):
    """Request files committed by hand, as any requester can: ids that are paths, weights files on the worker's disk,
    a request under another file's name. The real worker refuses each once, before anything is fetched or run, and
    serves the one real request."""
    api = HfApi(endpoint=hub_server)
    run = uuid.uuid4().hex[:8]
    requests_repo, repo = f"org/hostile-{run}", f"org/vit-good-{run}"
    identity = open_benchmark(tiny_glyphs, progress=False).identity()
    board, work = tmp_path / "board", tmp_path / "work"
    init_leaderboard(board, identity)
    queue.init_queue(requests_repo, board, api)
    api.create_repo(repo)
    api.upload_folder(folder_path=_tiny_vit(tmp_path / "vit", identity["num_id_classes"], 0), repo_id=repo)
    good = queue.make_request(api, requests_repo, f"hf:{repo}")
    secret = tmp_path / "worker-secret.bin"
    secret.write_bytes(b"a file of the worker's, never to be published\n")
    digest = hashlib.sha256(secret.read_bytes()).hexdigest()
    outside, absolute = tmp_path / "PWNED_h8_outside_workdir", tmp_path / "PWNED_absolute"

    def variant(request_id: str, **model) -> dict:
        return {**good, "id": request_id, "model": {**good["model"], **model}}

    no_id = "its id is not a request id (12 hex digits)"
    not_hub = "its weights_file is none of model.safetensors, pytorch_model.bin, the files of its repo it may name"
    hostile = {
        "requests/h8.json": (variant("../PWNED_h8_outside_workdir"), no_id),
        "requests/absolute.json": (variant(str(absolute)), no_id),
        "requests/abcdef000001.json": (variant("abcdef000001", weights_file=str(secret)), not_hub),
        "requests/abcdef000002.json": (variant("abcdef000002", weights_file="/dev/zero"), not_hub),
        "requests/abcdef000003.json": (
            variant("abcdef000003", weights_file="../" * 40 + str(secret).lstrip("/")),
            not_hub,
        ),
        "requests/evil-path.json": (good, f"its id {good['id']} is not its file's name (requests/<id>.json)"),
    }
    operations = [CommitOperationAdd(p, json.dumps(r).encode()) for p, (r, _) in hostile.items()]
    api.create_commit(requests_repo, operations, commit_message="by hand", repo_type="dataset")

    done = _worker(requests_repo, board, tiny_glyphs, work)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "w1: served 7 requests, 1 done, 6 failed" in done.stdout
    files = _request_files(api, requests_repo)
    assert sorted(files) == sorted([*hostile, f"requests/{good['id']}.json"])  # no file written under another name
    for path, (_, why) in hostile.items():
        assert files[path]["status"] == "failed" and files[path]["worker"] == "w1"
        assert files[path]["reason"] == f"refused {path}: {why}"  # claimed, and its reason recorded
        assert f"refused {path}: {why}\n" in done.stdout
    served = files[f"requests/{good['id']}.json"]
    assert served["status"] == "done" and served["release"] == 1 and len(served["entries"]) == 4
    titles = [c.title for c in api.list_repo_commits(requests_repo, repo_type="dataset")]
    answers = sorted(t for t in titles if t.split()[0] in ("claim", "refuse", "done", "failed"))
    assert answers == sorted(
        [f"claim {good['id']} (w1)", f"done {good['id']}"] + [f"refuse {path} (w1)" for path in hostile]
    )  # every file answered exactly once

    again = _worker(requests_repo, board, tiny_glyphs, work)
    assert again.returncode == 0 and "w1: served 0 requests, 0 done, 0 failed" in again.stdout
    assert len(api.list_repo_commits(requests_repo, repo_type="dataset")) == len(titles)  # nothing served again

    assert not outside.exists() and not absolute.exists()
    assert sorted(p.name for p in work.iterdir()) == [good["id"]]
    reasons = " ".join(f["reason"] for f in files.values() if "reason" in f)
    assert digest[:8] not in json.dumps(files)  # the secret's path is the requester's, its hash nowhere
    assert str(secret) not in reasons and str(tmp_path) not in reasons and "MemoryError" not in reasons

    table = current_table(board)
    assert len(table) == 4 and set(table["verification"]) == {"verified"} and set(table["model"]) == {good["name"]}
    shown = subprocess.run(
        [sys.executable, "-c", WORKER, "show", "--dir", str(board)], capture_output=True, text=True, timeout=120
    )
    assert shown.returncode == 0 and good["name"] in shown.stdout


def test_the_evaluator_runs_no_request_whose_id_is_a_path(tiny_glyphs, tmp_path):
    evaluator = RequestEvaluator(tiny_glyphs, device="cpu", work_dir=tmp_path / "work", progress=False)
    for request_id in ("../outside", str(tmp_path / "absolute"), "abcdef00000\n", None):
        request = {"id": request_id, "benchmark": evaluator.identity, "model": {"target": "timm:resnet18"}}
        with pytest.raises(HarnessError, match="^the request's id is not a request id \\(12 hex digits\\); nothing"):
            evaluator.evaluate(request, tmp_path / "weights.safetensors")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_the_evaluators_errors_name_the_requested_repo_not_the_workers_download(tiny_glyphs, tmp_path):
    evaluator = RequestEvaluator(tiny_glyphs, device="cpu", work_dir=tmp_path / "work", progress=False)
    snapshot = _tiny_vit(tmp_path / "snapshots" / ("ab" * 20), evaluator.identity["num_id_classes"], 0)
    processor = json.loads((snapshot / "preprocessor_config.json").read_text())
    (snapshot / "preprocessor_config.json").write_text(json.dumps({**processor, "crop_size": 10**6}))
    model = {"target": "hf:cood-tester/vit", "repo": "cood-tester/vit", "revision": "ab" * 20}
    request = {"id": "ab" * 6, "benchmark": evaluator.identity, "model": model, "name": "vit", "kappas": []}
    with pytest.raises(HarnessError) as caught:
        evaluator.evaluate({**request, "num_levels": 11}, snapshot)
    assert str(caught.value) == (
        f"hf: cood-tester/vit@{'ab' * 6}: preprocessor_config.json asks for a crop_size of 1000000 pixels, outside 1 "
        "to 4,096"
    )
    weights = tmp_path / "cache" / "w.safetensors"  # a file kind's: its file of its repo
    weights.parent.mkdir()
    weights.write_bytes(b"not safetensors")
    model = {"target": "timm:resnet18", "repo": "cood-tester/w", "revision": "cd" * 20, "file": "w.safetensors"}
    with pytest.raises(HarnessError) as caught:
        evaluator.evaluate({**request, "model": model, "num_levels": 11}, weights)
    assert str(tmp_path) not in str(caught.value) and f"w.safetensors of cood-tester/w@{'cd' * 6}" in str(caught.value)
