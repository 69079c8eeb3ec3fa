"""The harness's own cost per image, on the CPU, side by side in one run (figures, not a test).

1. a null model (constant logits, no work) evaluated on the glyph benchmark's three evaluation splits, sandboxed and
   in-process (``trust_submission``): what the harness spends per image (read, check, decode, hand over, 4 kappas,
   bookkeeping) beside any model, and what the sandbox's hand-over adds to it;
2. the bookkeeping of a pass: per-shard results of batches of 256 images from 32 shards of 8 (ImageNet-shaped OOD
   shards), 4 kappas and logits of 1,000 classes kept: one sort and one gather per batch
   (:meth:`SplitScores.pieces`), against a slice and a join per shard (as the harness did before);
3. loader workers: the three evaluation splits read by ``--workers`` processes that live across the passes
   (:class:`harness.runtime.data.Loader`), against workers started and shut down for each pass.

Runs are interleaved and the best of ``--repeats`` kept.

    python benchmarks/null_model_cost.py [--benchmark glyphs] [--repeats 3] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
from gpu_check import NULL  # the same null model as the GPU check's (this folder is on the path)

from harness.benchmarks import open_benchmark
from harness.method.scores import SplitScores
from harness.run import evaluate
from harness.runtime.data import Loader, Reading, shard_batches, shard_groups
from harness.runtime.decoding import make_decoder
from harness.runtime.scoring import EVAL_SPLITS
from harness.submission import timm_transform

GLYPH_CONFIG = {"input_size": (1, 32, 32), "mean": (0.5,), "std": (0.5,), "interpolation": "bilinear", "crop_pct": 1.0}
KAPPAS = ["softmax", "entropy", "max_logit", "energy"]


def null_pass(path: Path, benchmark: str, trusted: bool) -> tuple[float, int]:
    """Seconds over the evaluation splits' passes, and their images, of the null model."""
    evaluation = evaluate(
        path, benchmark=benchmark, kappas=KAPPAS, device="cpu", trust_submission=trusted, cache=False, progress=False
    )
    timings = evaluation.records[0]["timings"]
    return timings["evaluation_s"], sum(timings[f"{s}_images"] for s in EVAL_SPLITS)


def per_shard_joins(batch: SplitScores, counts: list[int]) -> list[SplitScores]:
    """The bookkeeping before: a slice, then a join (sort, uniqueness check, gather), per shard."""
    out, start = [], 0
    for count in counts:
        out.append(SplitScores.concat([batch.take(slice(start, start + count))]))
        start += count
    return out


def bookkeeping(repeats: int) -> dict:
    rng = np.random.default_rng(0)
    counts, batches = [8] * 32, 40
    keys = np.array([f"n{c:08d}_{i}" for c in range(32) for i in range(8)])
    logits = rng.normal(size=(256, 1000)).astype(np.float32)
    batch = SplitScores(
        keys,
        rng.integers(0, 1000, 256),
        logits.argmax(1),
        {k: rng.normal(size=256) for k in KAPPAS},
        {k: rng.normal(size=256) for k in KAPPAS},
        logits,
    )
    best = {"per_shard": float("inf"), "per_batch": float("inf")}
    for _ in range(repeats):
        for name, fn in (("per_shard", per_shard_joins), ("per_batch", lambda b, c: b.pieces(c))):
            start = time.perf_counter()
            for _ in range(batches):
                fn(batch, counts)
            best[name] = min(best[name], (time.perf_counter() - start) / (batches * 256))
    return best


def loader_passes(bench, decoder, label_of: dict, workers: int, persistent: bool, batch_size: int = 256) -> float:
    """Seconds to read the three evaluation splits, with workers kept across the passes or started per pass."""
    start = time.perf_counter()
    loader = Loader(bench, decoder, Reading(batch_size, workers)) if persistent else None
    try:
        for split in EVAL_SPLITS:
            groups = shard_groups(bench.shards(split), batch_size)
            passes = (
                loader.batches(groups, label_of[split])
                if persistent
                else shard_batches(bench, groups, decoder, label_of[split], Reading(batch_size, workers))
            )
            for _ in passes:
                pass
    finally:
        if loader is not None:
            loader.close()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", default="glyphs")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    bench = open_benchmark(args.benchmark, progress=False)
    figures: dict = {}

    with tempfile.TemporaryDirectory(prefix="cood-null-") as folder:
        path = Path(folder) / "null_model.py"
        path.write_text(NULL.format(config=GLYPH_CONFIG, classes=len(bench.id_classes)))
        best = {"sandboxed": float("inf"), "in_process": float("inf")}
        for _ in range(args.repeats):
            for mode, trusted in (("sandboxed", False), ("in_process", True)):
                seconds, images = null_pass(path, args.benchmark, trusted)
                best[mode] = min(best[mode], seconds / images)
    figures["null_model_us_per_image"] = {k: round(v * 1e6, 1) for k, v in best.items()}
    print(
        f"1. null model, {images:,} images of {args.benchmark}, 4 kappas (best of {args.repeats}): "
        f"{best['sandboxed'] * 1e6:.1f} us/image sandboxed ({1 / best['sandboxed']:,.0f} img/s), "
        f"{best['in_process'] * 1e6:.1f} us/image in-process ({1 / best['in_process']:,.0f} img/s)",
        flush=True,
    )

    cost = bookkeeping(args.repeats)
    figures["bookkeeping_us_per_image"] = {k: round(v * 1e6, 2) for k, v in cost.items()}
    print(
        f"2. bookkeeping, batches of 256 from 32 shards of 8, logits kept: {cost['per_shard'] * 1e6:.2f} us/image "
        f"with a join per shard, {cost['per_batch'] * 1e6:.2f} us/image with one sort per batch "
        f"({cost['per_shard'] / cost['per_batch']:.1f}x)",
        flush=True,
    )

    decoder = make_decoder("torchvision", timm_transform(GLYPH_CONFIG), 1, bench.max_image_pixels)
    label_of = {
        split: dict(
            zip(*(lambda c: (c["id"], c["index"]))(bench.id_classes if split.startswith("id") else bench.ood_classes))
        )
        for split in EVAL_SPLITS
    }
    images = sum(s["num_samples"] for split in EVAL_SPLITS for s in bench.shards(split))
    reads = {"per_pass": float("inf"), "persistent": float("inf")}
    for _ in range(args.repeats):
        for mode in reads:
            reads[mode] = min(reads[mode], loader_passes(bench, decoder, label_of, args.workers, mode == "persistent"))
    figures["loader_s"] = {k: round(v, 3) for k, v in reads.items()}
    print(
        f"3. reading the 3 evaluation splits ({images:,} images) with {args.workers} loader workers: "
        f"{reads['per_pass']:.2f} s started per pass, {reads['persistent']:.2f} s kept across passes "
        f"({reads['per_pass'] - reads['persistent']:+.2f} s)",
        flush=True,
    )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
