"""The light install: without the torch extra, the leaderboard works and the harness and builder say what to install."""

import re
import subprocess
import sys

import pytest

from command_fixtures import ROOT, blocking, run_main
from dataset_builder.console import TORCH_EXTRA

BLOCKED = (
    "torch",
    "torchvision",
    "timm",
    "pytorch_ood",
    "scipy",
    "PIL",
    "datasets",
    "webdataset",
    "sklearn",
    "matplotlib",
    "skimage",
    "open_clip",
    "transformers",
)


@pytest.fixture(scope="module")
def no_torch(tmp_path_factory) -> dict:
    """An environment in which every package of the torch extra fails to import, as after ``pip install cood-bench``."""
    return blocking(tmp_path_factory.mktemp("site"), BLOCKED)


def test_the_blocker_blocks(no_torch, tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", "import torch"], env=no_torch, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1 and "No module named 'torch'" in done.stderr


def test_the_leaderboard_without_torch(no_torch, tmp_path):
    board = tmp_path / "board"
    steps = [
        ("import-paper", "-d", board),
        ("release", "-d", board, "--note", "paper"),
        ("show", "-d", board, "--limit", "3"),
        ("report", "-d", board),
        ("site", tmp_path / "site", "-d", board),
        ("publish", "--help"),
        ("--help",),
    ]
    outputs = {}
    for step in steps:
        done = run_main("leaderboard.cli", *step, cwd=tmp_path, env=no_torch)
        assert done.returncode == 0, (step, done.stderr)
        outputs[step[0]] = done.stdout
    assert "imported 1,821 entries (697 models)" in outputs["import-paper"]
    assert "released v1: 1,821 entries" in outputs["release"]
    assert (tmp_path / "site" / "index.html").is_file()


@pytest.mark.parametrize(
    "module,args,command",
    [
        ("harness.cli", ["submit", ROOT / "examples" / "glyph_cnn.py"], "cood-harness submit"),
        ("harness.cli", ["kappas"], "cood-harness kappas"),
        ("dataset_builder.cli", ["--help"], "cood-dataset"),
    ],
)
def test_the_harness_and_builder_name_the_extra(no_torch, tmp_path, module, args, command):
    done = run_main(module, *args, cwd=tmp_path, env=no_torch)
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"error: {command} needs the torch extra (missing: torch, torchvision, timm, pytorch_ood")
    assert line.endswith("pip install 'cood-bench[torch]'")


def test_the_harness_helps_and_checks_without_torch(no_torch, tmp_path):
    for args in (["--help"], ["submit", "--help"], ["kappas", "--help"]):
        done = run_main("harness.cli", *args, cwd=tmp_path, env=no_torch)
        assert done.returncode == 0 and done.stderr == "", (args, done.stderr)
        assert done.stdout.startswith(
            f"Usage: -c {' '.join(args[:-1])}".rstrip() + " [OPTIONS]"
        )  # python -c names the program -c
    done = run_main(
        "harness.cli", "submit", "missing.py", cwd=tmp_path, env=no_torch
    )  # what needs no torch is checked first
    assert (done.returncode, done.stderr) == (2, "error: submission file missing.py not found\n")


def test_a_request_without_torch_and_the_worker_names_the_extra(no_torch, tmp_path, hub_server):
    import io
    import uuid

    import torch
    from huggingface_hub import HfApi

    from leaderboard.store import init_leaderboard

    api, run_id = HfApi(endpoint=hub_server), uuid.uuid4().hex[:8]
    weights, requests = f"org/light-model-{run_id}", f"org/light-requests-{run_id}"
    buffer = io.BytesIO()
    torch.save({"fc.weight": torch.ones(2, 3)}, buffer)
    api.create_repo(weights)
    api.upload_file(path_or_fileobj=buffer.getvalue(), path_in_repo="w.pt", repo_id=weights)
    board = tmp_path / "board"
    init_leaderboard(
        board,
        {
            "id": "glyphs",
            "version": "1.0.0",
            "manifest_sha256": "ab" * 32,
            "num_id_classes": 36,
            "num_ood_classes": 400,
        },
    )
    outputs = {}
    for step in [
        ("queue-init", requests, "-d", board),
        ("request", "timm:resnet18", "-q", requests, "--weights", weights, "--file", "w.pt"),
    ]:
        done = run_main("leaderboard.cli", *step, cwd=tmp_path, env=no_torch)
        assert done.returncode == 0, (step, done.stderr)
        outputs[step[0]] = done.stdout
    assert (
        "(torch weights, sha256 " in outputs["request"]
    )  # checked statically: the pickle names tensor rebuilders only
    listed = run_main("leaderboard.cli", "requests", requests, cwd=tmp_path, env=no_torch).stdout
    assert f"{requests}: 1 request" in listed and "pending" in listed
    done = run_main("leaderboard.cli", "worker", requests, "-d", board, cwd=tmp_path, env=no_torch)
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    missing = re.fullmatch(
        r"cood-leaderboard: error: the worker needs the torch extra \(No module named '(\w+)'\): "
        r"pip install 'cood-bench\[torch\]'",
        line,
    )
    assert missing and missing[1] in TORCH_EXTRA, line  # the first of the extra's packages the worker imports
