"""The request queue end to end on the local Hub server: two workers (separate processes) serve four requests, one of
which fails in the harness; every request is claimed once, the good ones' records enter the board verified, each is
released and republished to the dataset repo and its Space, and the failure's reason is recorded."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import torch
from huggingface_hub import HfApi, hf_hub_download
from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessor

from harness.benchmarks import open_benchmark
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
