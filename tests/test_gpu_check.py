"""``benchmarks/gpu_check.py --cpu-smoke``: the GPU check's script runs every part on the CPU and reports measured
figures."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # real runs: the quick loop (-m 'not slow') leaves them to CI

ROOT = Path(__file__).resolve().parents[1]


def positive(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def test_gpu_check_cpu_smoke_measures_every_part(tmp_path):
    home, cache, tmp = tmp_path / "home", tmp_path / "cache", tmp_path / "tmp"
    for folder in (home, cache, tmp):
        folder.mkdir()
    env = {**os.environ, "HOME": str(home), "COOD_BENCH_CACHE": str(cache), "TMPDIR": str(tmp)}
    done = subprocess.run(
        [sys.executable, "benchmarks/gpu_check.py", "--cpu-smoke", "--work", str(tmp_path / "work")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    figures = json.loads(lines[-1])
    assert figures["errors"] == [], figures["errors"]
    assert figures["mode"] == "cpu-smoke" and figures["device"] == "cpu"
    assert any("nvJPEG decode: skipped" in line for line in lines)
    assert "nvjpeg_img_s" not in figures
    for key in ("forward_img_s", "cpu_torchvision_img_s", "cpu_pillow_img_s", "preprocess_img_s"):
        assert positive(figures[key]), (key, figures.get(key))
    images = figures["benchmark"]["images"]
    assert images > 0 and figures["benchmark"]["id_classes"] == 4
    assert set(figures["harness"]) == {"pil", "torchvision"}
    for decoder, run in figures["harness"].items():
        assert run["images"] == images, decoder
        assert positive(run["img_s"]) and positive(run["overall_img_s"]) and positive(run["ratio_to_forward"]), decoder
    assert figures["levels_compared"] > 0
    assert 0.0 <= figures["max_level_auroc_diff"] <= 1e-3
    assert (tmp_path / "work" / "benchmark" / "manifest.json").is_file()
    assert set(figures["cli"]) == {"sandboxed", "trusted", "null_sandboxed"}
    for what, run in figures["cli"].items():
        assert run["images"] == images and positive(run["img_s"]) and positive(run["command_img_s"]), what
        assert run["command_s"] > run["total_s"] > 0, what
    assert positive(figures["null_in_process_img_s"])
    assert figures["stability"] == {"runs": 2, "failed": [], "identical": True, "differing": [], "nan": 0}
