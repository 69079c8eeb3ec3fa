"""The harness at scale: resumable score cache, logits reuse, torchrun, OOM back-off, autocast, Hub streaming."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from dataset_builder.glyphs.build import build
from glyph_fixtures import CNN, cnn_variant
from harness.run import submit
from leaderboard.store import first_difference

pytestmark = pytest.mark.slow  # real runs: the quick loop (-m 'not slow') leaves them to CI

SLOW = """
import time
NAME = "glyph_cnn_slow"

class Slow(cnn.GlyphCNN):
    def forward(self, x):
        time.sleep(0.04)
        return super().forward(x)

def build_model():
    return variant(Slow)
"""


def stable(record: dict) -> dict:
    return {k: v for k, v in record.items() if k not in ("created", "timings", "order_seed")}


def same_to_rounding(these: dict, those: dict) -> None:
    """The records of two runs in other batches: the deterministic kappas' the same to float rounding, MC-dropout's
    (masks drawn per batch) of the same shape."""
    assert first_difference(these["softmax"], those["softmax"]) is None
    assert these["mc_dropout"]["kappa"] == those["mc_dropout"]["kappa"]
    assert len(these["mc_dropout"]["levels"]) == len(those["mc_dropout"]["levels"])


def records_in(folder: Path) -> dict:
    return {p.stem: stable(json.loads(p.read_text())) for p in sorted((folder / "records").glob("*.json"))}


def cli(*args) -> list[str]:
    return [sys.executable, "-m", "harness.cli", "submit", *map(str, args)]


def test_killed_run_resumes_to_the_uninterrupted_result(tiny_glyphs, tmp_path):
    model = cnn_variant(tmp_path / "slow.py", SLOW)
    common = [
        model,
        "--benchmark",
        tiny_glyphs,
        "--batch-size",
        "8",
        "--workers",
        "1",
        "-k",
        "softmax",
        "-k",
        "mc_dropout",
        "--mc-passes",
        "2",
        "--no-progress",
        "--order-seed",
        "3",  # a resumed run is given its order seed, so that it reuses MC-dropout's cached values too
    ]
    cache = tmp_path / "cache"
    process = subprocess.Popen(
        cli(*common, "--cache-dir", cache, "--out", tmp_path / "resumed"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 120
    while len(list(cache.rglob("*.scores"))) < 12 and time.time() < deadline and process.poll() is None:
        time.sleep(0.05)
    assert process.poll() is None, "the run finished before it could be killed"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    done_before = len(list(cache.rglob("*.scores")))
    assert 12 <= done_before < 50 and not (tmp_path / "resumed").exists()
    resumed = subprocess.run(
        cli(*common, "--cache-dir", cache, "--out", tmp_path / "resumed"), capture_output=True, text=True
    )
    assert resumed.returncode == 0, resumed.stderr
    stats = json.loads((tmp_path / "resumed" / "records" / "softmax.json").read_text())["timings"]
    assert stats["shards_from_cache"] >= done_before - 1 and stats["shards_scored"] == 50 - stats["shards_from_cache"]
    # the uninterrupted reference: in this process and in batches of 64 (the same to rounding, as same_to_rounding says)
    reference = dict(kappas=["softmax", "mc_dropout"], mc_passes=2, workers=1, order_seed=3, batch_size=64)
    submit(model, benchmark=tiny_glyphs, cache=False, out=tmp_path / "fresh", progress=False, **reference)
    same_to_rounding(records_in(tmp_path / "resumed"), records_in(tmp_path / "fresh"))


def test_new_logit_kappas_reuse_kept_logits(tiny_glyphs, tmp_path):
    first = submit(
        CNN,
        benchmark=tiny_glyphs,
        kappas=["softmax"],
        out=tmp_path / "a",
        cache_dir=tmp_path / "cache",
        keep_logits=True,
        progress=False,
    )
    assert first.stats["images_forwarded"] == 36 * 8 + 48 * 24
    second = submit(
        CNN,
        benchmark=tiny_glyphs,
        kappas=["softmax", "energy", "entropy"],
        out=tmp_path / "b",
        cache_dir=tmp_path / "cache",
        progress=False,
    )
    assert second.stats["images_forwarded"] == 0 and second.stats["shards_from_logits"] == 50
    direct = submit(
        CNN, benchmark=tiny_glyphs, kappas=["energy", "entropy"], out=tmp_path / "c", cache=False, progress=False
    )
    assert records_in(tmp_path / "b")["energy"] == records_in(tmp_path / "c")["energy"]
    assert records_in(tmp_path / "b")["entropy"] == records_in(tmp_path / "c")["entropy"]
    # without kept logits, a new kappa needs a pass (and only for itself)
    third = submit(
        CNN,
        benchmark=tiny_glyphs,
        kappas=["max_logit"],
        out=tmp_path / "d",
        cache_dir=tmp_path / "other",
        progress=False,
    )
    assert third.stats["images_forwarded"] == 36 * 8 + 48 * 24
    assert direct.stats["shards_from_cache"] == 0


def test_a_rerun_without_kept_logits_forwards_no_image(tiny_glyphs, tmp_path):
    """Under ``keep_logits=False`` the cache still keeps the ID test split's logits (the multi-class NLL and Brier
    read them), so the same run again is served whole from the cache, with the same records."""
    runs = [
        submit(
            CNN,
            benchmark=tiny_glyphs,
            kappas=["softmax"],
            out=tmp_path / name,
            cache_dir=tmp_path / "cache",
            keep_logits=False,
            progress=False,
        )
        for name in ("a", "b")
    ]
    assert [run.stats["images_forwarded"] for run in runs] == [36 * 8 + 48 * 24, 0]
    assert runs[1].stats["shards_from_cache"] == 50
    first, again = (records_in(tmp_path / name)["softmax"] for name in ("a", "b"))
    assert again["id"]["nll_multiclass"] == first["id"]["nll_multiclass"] is not None


@pytest.fixture(scope="module")
def odd_glyphs(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("odd") / "glyphs"
    build(
        folder,
        progress=False,
        seed=3,
        pool_size=41,
        images_per_class=12,
        n_test=4,
        id_test_per_class=4,
        id_train_per_class=0,
    )
    return folder


def test_torchrun_scores_every_sample_exactly_once(odd_glyphs, tmp_path):
    manifest = json.loads((odd_glyphs / "manifest.json").read_text())
    assert sum(s["split"] == "ood_test" for s in manifest["shards"]) == 41  # an odd number of shards
    args = [
        CNN,
        "--benchmark",
        odd_glyphs,
        "--no-cache",
        "--workers",
        "1",
        "--no-progress",
        "-k",
        "softmax",
        "-k",
        "mc_dropout",
        "--mc-passes",
        "2",
        "--batch-size",
        "16",
        "--levels",
        "6",
    ]  # 41 OOD classes in windows of 36: 6 levels at most
    launcher = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "harness.cli",
        "submit",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    two = subprocess.run(
        [*launcher, *map(str, args), "--out", str(tmp_path / "two")], capture_output=True, text=True, env=env
    )
    assert two.returncode == 0, two.stderr[-3000:]
    one = subprocess.run(cli(*args, "--out", tmp_path / "one"), capture_output=True, text=True)
    assert one.returncode == 0, one.stderr
    same_to_rounding(records_in(tmp_path / "two"), records_in(tmp_path / "one"))
    timings = json.loads((tmp_path / "two" / "records" / "softmax.json").read_text())["timings"]
    total = 36 * 4 + 41 * 12
    assert timings["world_size"] == 2 and timings["images_forwarded"] == total
    assert sum(timings["images_forwarded_per_rank"]) == total and min(timings["images_forwarded_per_rank"]) > 0


def test_batch_backs_off_on_out_of_memory(tiny_glyphs, tmp_path):
    model = cnn_variant(
        tmp_path / "picky.py",
        """
NAME = "glyph_cnn"

class Picky(cnn.GlyphCNN):
    def forward(self, x):
        if len(x) > 5:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        return super().forward(x)

def build_model():
    return variant(Picky)
""",
    )
    backed_off = submit(
        model,
        benchmark=tiny_glyphs,
        kappas=["softmax", "energy"],
        out=tmp_path / "a",
        cache=False,
        batch_size=64,
        progress=False,
    )
    plain = submit(
        CNN, benchmark=tiny_glyphs, kappas=["softmax", "energy"], out=tmp_path / "b", cache=False, progress=False
    )
    assert backed_off.stats["images_forwarded"] == plain.stats["images_forwarded"]
    for a, b in zip(backed_off.records, plain.records):
        for level_a, level_b in zip(a["levels"], b["levels"]):
            assert level_a == pytest.approx(level_b, abs=1e-6)


def test_bf16_autocast_agrees_with_float32(tiny_glyphs, tmp_path):
    fp32 = submit(CNN, benchmark=tiny_glyphs, kappas=["softmax"], out=tmp_path / "a", cache=False, progress=False)
    bf16 = submit(
        CNN,
        benchmark=tiny_glyphs,
        kappas=["softmax"],
        out=tmp_path / "b",
        cache=False,
        progress=False,
        amp="bf16",
        channels_last=True,
    )
    assert bf16.records[0]["timings"]["amp"] == "bf16"
    auroc32 = [lvl["ood_auroc"] for lvl in fp32.records[0]["levels"]]
    auroc16 = [lvl["ood_auroc"] for lvl in bf16.records[0]["levels"]]
    assert auroc16 != auroc32  # autocast really ran in bf16 ...
    assert auroc16 == pytest.approx(auroc32, abs=0.03)  # ... and agrees within its precision


def test_evaluation_streams_from_the_hub_at_a_pinned_revision(tiny_glyphs, tmp_path, hub_server):
    from huggingface_hub import HfApi

    from dataset_builder.publish import publish

    publish(tiny_glyphs, "cood/tiny-glyphs", tag="v1.0.0", endpoint=hub_server)
    HfApi(endpoint=hub_server).upload_file(
        path_or_fileobj=b"later change", path_in_repo="NOTES.txt", repo_id="cood/tiny-glyphs", repo_type="dataset"
    )
    remote = submit(
        CNN,
        benchmark="hf://datasets/cood/tiny-glyphs@v1.0.0",
        kappas=["softmax"],
        out=tmp_path / "hub",
        cache=False,
        progress=False,
    )
    local = submit(CNN, benchmark=tiny_glyphs, kappas=["softmax"], out=tmp_path / "local", cache=False, progress=False)
    assert remote.benchmark.hub[0] == "cood/tiny-glyphs" and len(remote.benchmark.hub[1]) == 40
    assert stable(remote.records[0]) == stable(local.records[0])


def test_unusable_device_is_a_clear_error(tiny_glyphs, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")  # the error path needs a machine without it
    from harness.errors import HarnessError

    with pytest.raises(HarnessError, match="CUDA is not available"):
        submit(CNN, benchmark=tiny_glyphs, device="cuda", out=tmp_path / "x", progress=False)
