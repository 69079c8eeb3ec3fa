"""The reading side and the bookkeeping of a pass: a GPU decode that completes late is waited for and its memory not
reused while in use, a failed run leaves the process clean, errors name a batch's first shard, loader workers live
across passes, and per-batch bookkeeping gives exactly the per-shard results."""

import multiprocessing
import re
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from dataset_builder.benchmark import Benchmark
from glyph_fixtures import load_example
from harness import HarnessError, evaluate
from harness.method.scores import SplitScores
from harness.runtime.data import Loader, Reading, shard_batches, shard_groups
from harness.runtime.decoding import make_decoder

ROOT = Path(__file__).resolve().parents[1]
CNN = ROOT / "examples" / "glyph_cnn.py"


class LateLane:
    """A stand-in for a CUDA stream on the CPU: each batch is written, by a thread that finishes late, into a buffer
    taken from a pool of freed ones (as the caching allocator reuses freed memory, NaN-filled when new); a buffer goes
    back to the pool only when the consumer takes the next batch (``record_stream``: its work on the last is done).
    The consumer must wait in ``take`` and call it in its own thread, once per batch."""

    def __init__(self, delay: float = 0.02):
        self.delay, self.free, self.held, self.turn = delay, [], None, 0
        self.lock = threading.Lock()
        self.takers: set[str] = set()

    def run(self, decode, *args):
        images = decode(*args)  # the true pixels, written late into a reused buffer
        self.turn += 1
        with self.lock:
            fits = [b for b in self.free if b.shape == images.shape]
            buffer = fits[0] if fits else torch.full_like(images, float("nan"))
            self.free = [b for b in self.free if b is not buffer]
        ready = threading.Event()

        def write():
            time.sleep(self.delay)
            buffer.copy_(images)
            ready.set()

        threading.Thread(target=write, daemon=True).start()
        return buffer, ready

    def take(self, images, ready):
        ready.wait()
        self.takers.add(threading.current_thread().name)
        with self.lock:
            if self.held is not None:
                self.free.append(self.held)
            self.held = images
        return images


class OffCpuDecoder:
    """The ``torchvision`` decoder on the CPU, presenting itself as a device decoder (so batches are decoded in the
    consumer's process, on a lane, as on a GPU)."""

    def __init__(self, decoder):
        self.inner, self.name, self.device = decoder, "late", torch.device("meta")

    def __call__(self, datas, wheres):
        return self.inner(datas, wheres)


def _expected(bench, groups, decoder, label_of, batch_size):
    loader = Loader(bench, decoder, Reading(batch_size, workers=0))
    return [(b["keys"], b["images"]) for b in loader.batches(groups, label_of)]


@pytest.mark.parametrize("workers", [0, 1])
def test_a_gpu_decode_that_completes_late_is_waited_for_and_its_buffer_not_reused_in_use(tiny_glyphs, workers):
    bench = Benchmark.open(tiny_glyphs)
    cnn = load_example(CNN)
    from harness.submission import timm_transform

    decoder = make_decoder("torchvision", timm_transform(cnn.DATA_CONFIG), 1, bench.max_image_pixels)
    label_of = dict(zip(bench.ood_classes["id"], bench.ood_classes["index"]))
    groups = shard_groups(bench.shards("ood_test"), 16)
    lane = LateLane()
    expected = _expected(bench, groups, decoder, label_of, 16)
    loader = Loader(bench, OffCpuDecoder(decoder), Reading(16, workers), lane=lane)
    try:
        for n, batch in enumerate(loader.batches(groups, label_of)):
            time.sleep(0.05)  # the model at work on the batch while the reading side runs ahead and writes late
            assert batch["keys"] == expected[n][0]
            assert torch.equal(
                batch["images"], expected[n][1]
            )  # no NaN of an unwritten buffer, no other batch's pixels
    finally:
        loader.close()
    assert n + 1 == lane.turn == len(expected) > 2
    assert lane.takers == {threading.current_thread().name}


def _nan_on_batch(model, bad: int):
    """``model``, whose ``bad``-th forward pass (counting from 1) returns NaN logits."""
    calls = {"n": 0}

    def hook(_module, _inputs, output):
        calls["n"] += 1
        return output * float("nan") if calls["n"] == bad else output

    model.register_forward_hook(hook)
    return model


def _leftovers() -> tuple[list, list]:
    threads = [t.name for t in threading.enumerate() if t.name == "cood-prefetch" or "pin_memory" in t.name.lower()]
    return threads, multiprocessing.active_children()


@pytest.mark.parametrize("workers", [0, 1])
def test_after_a_run_fails_mid_split_the_next_run_in_the_process_is_normal(tiny_glyphs, workers):
    cnn = load_example(CNN)
    options = dict(
        benchmark=tiny_glyphs,
        kappas=["softmax", "energy"],
        device="cpu",
        batch_size=16,
        workers=workers,
        progress=False,
    )
    before = _leftovers()
    with pytest.raises(HarnessError, match=r"NaN or infinite logits") as failed:
        evaluate(_nan_on_batch(cnn.build_model(), bad=5), cnn.DATA_CONFIG, **options)  # 1: trial pass, then batches
    assert "\n" not in str(failed.value)
    assert _leftovers() == before  # no reading thread, no loader worker left behind
    after = evaluate(cnn.build_model(), cnn.DATA_CONFIG, **options)
    fresh = evaluate(cnn.build_model(), cnn.DATA_CONFIG, **{**options, "workers": 0})
    for split, scores in fresh.scores.items():
        assert np.array_equal(after.scores[split].keys, scores.keys)
        for kappa in scores.scores:
            assert np.array_equal(after.scores[split].scores[kappa], scores.scores[kappa])
    assert _leftovers() == before


def test_a_failing_batch_names_its_first_shard_and_how_many_more(tiny_glyphs):
    cnn = load_example(CNN)
    bench = Benchmark.open(tiny_glyphs)
    with pytest.raises(HarnessError) as failed:
        evaluate(
            _nan_on_batch(cnn.build_model(), bad=3),  # the trial pass, the features' check, then the first batch
            cnn.DATA_CONFIG,
            benchmark=tiny_glyphs,
            kappas=["softmax"],
            device="cpu",
            batch_size=64,
            workers=0,
            progress=False,
        )
    pattern = r"shard (\S+) \(and (\d+) more shards in its batch\): the model returned .*"
    named = re.fullmatch(pattern, str(failed.value))
    assert named, str(failed.value)  # a batch mixes rows of many shards of every split
    paths = {s["path"] for split in ("id_test", "ood_estimation", "ood_test") for s in bench.shards(split)}
    assert named[1] in paths and 1 <= int(named[2]) < len(paths)


def test_loader_workers_live_across_passes_and_give_the_same_batches(tiny_glyphs):
    bench = Benchmark.open(tiny_glyphs)
    cnn = load_example(CNN)
    from harness.submission import timm_transform

    decoder = make_decoder("torchvision", timm_transform(cnn.DATA_CONFIG), 1, bench.max_image_pixels)
    loader = Loader(bench, decoder, Reading(16, workers=2))
    try:
        passes, pids = [], []
        for split in ("id_test", "ood_test", "id_test"):
            classes = bench.id_classes if split.startswith("id") else bench.ood_classes
            label_of = dict(zip(classes["id"], classes["index"]))
            groups = shard_groups(bench.shards(split), 16)
            got = [(b["keys"], b["labels"], b["images"]) for b in loader.batches(groups, label_of)]
            want = [
                (b["keys"], b["labels"], b["images"])
                for b in shard_batches(bench, groups, decoder, label_of, Reading(16, 0))
            ]
            assert sorted(k for keys, _, _ in got for k in keys) == sorted(k for keys, _, _ in want for k in keys)
            by_key = {keys[0]: (labels, images) for keys, labels, images in want}
            for keys, labels, images in got:
                assert torch.equal(labels, by_key[keys[0]][0]) and torch.equal(images, by_key[keys[0]][1])
            passes.append(len(got))
            pids.append(sorted(w.pid for w in loader._loader._iterator._workers))
        assert pids[0] == pids[1] == pids[2] and all(passes)
    finally:
        loader.close()
    assert multiprocessing.active_children() == []


def test_a_batchs_pieces_are_its_shards_results_sorted_as_concat_sorts_them():
    rng = np.random.default_rng(0)
    counts = [3, 1, 5, 4]
    keys = np.array([f"k{n:03d}" for n in rng.permutation(13)])
    logits = rng.normal(size=(13, 4)).astype(np.float32)
    batch = SplitScores(
        keys,
        rng.integers(0, 4, 13),
        logits.argmax(1),
        {"a": rng.normal(size=13)},
        {"a": rng.normal(size=13)},
        logits,
        rng.normal(size=(13, 2)).astype(np.float32),
    )
    pieces = batch.pieces(counts)
    start = 0
    for count, piece in zip(counts, pieces):
        want = SplitScores.concat([batch.take(slice(start, start + count))])
        start += count
        for name in ("keys", "labels", "preds", "logits", "features"):
            assert np.array_equal(getattr(piece, name), getattr(want, name)), name
            assert getattr(piece, name).dtype == getattr(want, name).dtype
        assert np.array_equal(piece.scores["a"], want.scores["a"]) and np.array_equal(piece.confs["a"], want.confs["a"])
    twice = SplitScores(np.array(["a", "b", "a"]), np.zeros(3), np.zeros(3), {}, {})
    with pytest.raises(HarnessError, match="scored twice"):
        twice.pieces([3])
    assert len(twice.pieces([2, 1])) == 2  # the same key in two shards is theirs to check


class Recording:
    """A forward pass whose logits are each image's first pixels; it logs when batches are launched and collected (by
    their first row's seed: the rows' seeds are all it is told besides the pixels), and runs out of memory on batches
    larger than ``fits``."""

    head = None

    def __init__(self, fits: int = 1 << 30):
        self.log, self.fits = [], fits

    def launch(self, images, seeds, kappas):
        from harness.runtime.inference import ModelOutput

        if len(images) > self.fits:
            raise torch.cuda.OutOfMemoryError("simulated")
        seed = int(seeds[0])
        self.log.append(("launch", seed))
        output = ModelOutput(images.flatten(1)[:, :3].numpy().astype(np.float32), None, {}, {})
        log = self.log

        class Later:
            def result(self):
                log.append(("collect", seed))
                return output

        return Later()


def _batch(keys: list[str], seed: int) -> dict:
    """A mixed batch of ``keys`` (``<shard>_<name>``): each row names its shard."""
    return {
        "keys": keys,
        "rows": [key.split("_")[0] for key in keys],
        "labels": torch.arange(len(keys)),
        "images": torch.from_numpy(np.random.default_rng(seed).normal(size=(len(keys), 4))),
        "seeds": np.full(len(keys), seed, dtype=np.int64),
    }


def test_a_batch_is_collected_after_the_next_is_launched_with_the_same_results():
    from harness.kappas import resolve_kappas
    from harness.runtime.inference import score_batch_adaptive, score_mixed

    kappas = resolve_kappas(["softmax", "energy"])
    batches = [  # rows of shards mixed across batches, as the secret order mixes them
        _batch(["s1_b", "s2_c", "s0_a", "s1_a"], 10),
        _batch(["s2_a", "s3_z", "s2_b"], 11),
        _batch(["s3_y", "s2_d"], 12),
    ]
    sizes = {"s1": 2, "s0": 1, "s2": 4, "s3": 2}
    forward = Recording()
    got = dict(score_mixed(forward, iter(batches), sizes, 3, kappas))
    assert forward.log == [
        ("launch", 10),
        ("launch", 11),
        ("collect", 10),
        ("launch", 12),
        ("collect", 11),
        ("collect", 12),
    ]
    assert set(got) == set(sizes)
    one = [score_batch_adaptive(Recording(), b, 3, kappas, keep_logits=True) for b in batches]
    whole = SplitScores.concat(one)
    for shard, scores in got.items():
        want = whole.take(np.flatnonzero(np.char.startswith(whole.keys, shard + "_")))
        assert list(scores.keys) == sorted(scores.keys) == list(want.keys)
        assert np.array_equal(scores.logits, want.logits) and np.array_equal(
            scores.scores["energy"], want.scores["energy"]
        )
    halved = dict(score_mixed(Recording(fits=1), iter(batches[:1]), {"s1": 2, "s0": 1, "s2": 1}, 3, kappas))
    for shard in ("s1", "s0"):  # out of memory: halves, each shard still given its own samples
        assert np.array_equal(halved[shard].keys, got[shard].keys) and np.array_equal(
            halved[shard].logits, got[shard].logits
        )
    assert np.array_equal(halved["s2"].logits, got["s2"].take(np.array([2])).logits)
