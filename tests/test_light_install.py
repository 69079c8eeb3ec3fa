"""The light install: without the torch extra, the leaderboard works and the harness and builder say what to install."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCKED = ("torch", "torchvision", "timm", "pytorch_ood", "scipy", "PIL", "datasets", "webdataset", "sklearn",
           "matplotlib", "skimage", "open_clip", "transformers")


@pytest.fixture(scope="module")
def no_torch(tmp_path_factory) -> dict:
    """An environment in which every package of the torch extra fails to import, as after ``pip install cood-bench``."""
    site = tmp_path_factory.mktemp("site")
    (site / "sitecustomize.py").write_text(
        "import sys\n"
        f"BLOCKED = {BLOCKED!r}\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in BLOCKED:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}')\n"
        "sys.meta_path.insert(0, Block())\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}


def run(env: dict, module: str, *args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", f"from {module} import main; main()", *map(str, args)], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_the_blocker_blocks(no_torch, tmp_path):
    done = subprocess.run([sys.executable, "-c", "import torch"], env=no_torch, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "No module named 'torch'" in done.stderr


def test_the_leaderboard_without_torch(no_torch, tmp_path):
    board = tmp_path / "board"
    steps = [("import-paper", "-d", board), ("release", "-d", board, "--note", "paper"), ("show", "-d", board, "--limit", "3"),
             ("report", "-d", board), ("site", tmp_path / "site", "-d", board), ("publish", "--help"), ("--help",)]
    outputs = {}
    for step in steps:
        done = run(no_torch, "leaderboard.cli", *step, cwd=tmp_path)
        assert done.returncode == 0, (step, done.stderr)
        outputs[step[0]] = done.stdout
    assert "imported 1848 entries (706 models)" in outputs["import-paper"]
    assert "released v1: 1848 entries" in outputs["release"]
    assert (tmp_path / "site" / "index.html").is_file()


@pytest.mark.parametrize("module,command", [("harness.cli", "cood-harness"), ("dataset_builder.cli", "cood-dataset")])
def test_the_harness_and_builder_name_the_extra(no_torch, tmp_path, module, command):
    done = run(no_torch, module, "--help", cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"error: {command} needs the torch extra (missing: torch, torchvision, timm, pytorch_ood")
    assert line.endswith("pip install 'cood-bench[torch]'")
