"""Harness speed on this machine, side by side in one run (figures, not a test).

1. overhead: the harness's full path (read shards, check sha256, decode, transform, forward, 4 kappas)
   vs. the pure forward pass on the same images already decoded into one tensor;
2. one pass for 4 logit kappas vs. 4 separate passes (one kappa each);
3. AUROC of 50k vs 50k scores: the project's rank-based implementation vs. a straightforward
   pairwise one (and scikit-learn's, for reference);
(the sandbox's cost: ``benchmarks/sandbox_cost.py``).

    python benchmarks/harness_speed.py [--split ood_test] [--model examples/glyph_cnn.py] [--device cpu]
"""

from __future__ import annotations

import argparse
import io
import json
import time

import numpy as np
import torch
from PIL import Image
from sklearn.metrics import roc_auc_score

from dataset_builder.shards import iter_samples
from harness.benchmarks import open_benchmark
from harness.config import EvalConfig
from harness.kappas import resolve_kappas
from harness.method.metrics import auroc
from harness.runtime.decoding import make_decoder
from harness.runtime.distributed import Ranks
from harness.runtime.execution import Execution
from harness.runtime.inference import LocalForward
from harness.runtime.scoring import Scorer
from harness.submission import load_file

KAPPAS = ["softmax", "entropy", "max_logit", "energy"]


def harness_pass(
    submission, forward, bench, kappas, execution, split, batch_size, workers, decoder="auto", decoded=None
) -> float:
    images = make_decoder(decoder, submission.transform, submission.channels, bench.max_image_pixels, execution.device)
    config = EvalConfig(batch_size=batch_size, workers=workers, keep_logits=False, progress=False)
    scorer = Scorer(
        forward=forward,
        decoder=images,
        benchmark=bench,
        kappas=resolve_kappas(kappas),
        execution=execution,
        ranks=Ranks(),
        config=config,
        decoded=decoded,
    )
    start = time.perf_counter()
    scorer.passes((split,), check=False)
    return time.perf_counter() - start


def pure_forward(model, images: torch.Tensor, execution, batch_size: int) -> float:
    start = time.perf_counter()
    with torch.inference_mode(), execution.autocast():
        for i in range(0, len(images), batch_size):
            model(execution.inputs(images[i : i + batch_size]))
    if execution.device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def pairwise_auroc(pos: np.ndarray, neg: np.ndarray, chunk: int = 2000) -> float:
    total = 0.0
    for i in range(0, len(pos), chunk):
        p = pos[i : i + chunk, None]
        total += np.count_nonzero(p > neg[None, :]) + 0.5 * np.count_nonzero(p == neg[None, :])
    return total / (len(pos) * len(neg))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", default="glyphs")
    parser.add_argument("--model", default="examples/glyph_cnn.py")
    parser.add_argument("--split", default="ood_test")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument(
        "--workers", type=int, default=0, help="0: a background thread reads and decodes (the CPU default)"
    )
    args = parser.parse_args()

    bench = open_benchmark(args.benchmark)
    submission = load_file(args.model)
    execution = Execution.resolve(args.device)
    model = execution.prepare(submission.model)
    shards = bench.shards(args.split)
    images = torch.stack(
        [
            submission.transform(
                Image.open(io.BytesIO(s[bench.image_ext])).convert("L" if submission.channels == 1 else "RGB")
            )
            for shard in shards
            for s in iter_samples(bench.shard_path(shard))
        ]
    )
    n = len(images)
    print(
        f"{submission.name} on {bench.name} {args.split}: {n} images, device {execution.device}, amp {execution.amp}, "
        f"batch {args.batch_size}, {args.workers} loader workers, "
        f"{torch.get_num_threads()} torch threads for the pure pass"
    )

    pure_forward(model, images[: args.batch_size], execution, args.batch_size)  # warm-up
    forward_s = pure_forward(model, images, execution, args.batch_size)  # all cores to torch
    execution.share_cpu(args.workers)  # as the harness runs: the loader workers keep their cores
    local = LocalForward(model, execution, len(bench.id_classes))
    one_pass_s = harness_pass(submission, local, bench, KAPPAS, execution, args.split, args.batch_size, args.workers)
    separate_s = sum(
        harness_pass(submission, local, bench, [k], execution, args.split, args.batch_size, args.workers)
        for k in KAPPAS
    )
    print("\n1. harness overhead")
    print(f"   pure forward on decoded tensors  {forward_s:8.2f} s  {n / forward_s:9.0f} img/s")
    print(f"   harness, 4 kappas, one pass      {one_pass_s:8.2f} s  {n / one_pass_s:9.0f} img/s")
    print(f"   overhead ratio (harness / pure)  {one_pass_s / forward_s:8.2f} x")
    print("\n2. four logit kappas")
    print(f"   one shared pass                  {one_pass_s:8.2f} s")
    print(f"   four separate passes             {separate_s:8.2f} s")
    print(f"   speed-up                         {separate_s / one_pass_s:8.2f} x")

    rng = np.random.default_rng(0)
    pos, neg = rng.normal(0.5, 1.0, 50_000).round(3), rng.normal(0.0, 1.0, 50_000).round(3)  # rounded: many ties
    timings = {}
    for name, fn in {
        "project (average ranks)": auroc,
        "scikit-learn roc_auc_score": lambda p, q: roc_auc_score(np.r_[np.ones(len(p)), np.zeros(len(q))], np.r_[p, q]),
        "straightforward pairwise": pairwise_auroc,
    }.items():
        start = time.perf_counter()
        value = fn(pos, neg)
        timings[name] = (time.perf_counter() - start, value)
    print("\n3. AUROC, 50,000 ID vs 50,000 OOD scores (with ties)")
    for name, (seconds, value) in timings.items():
        print(f"   {name:32s} {seconds * 1000:10.1f} ms   auroc {value:.10f}")
    base = timings["project (average ranks)"][0]
    print(f"   pairwise / project               {timings['straightforward pairwise'][0] / base:8.0f} x")
    print(
        json.dumps(
            {
                "images": n,
                "forward_img_s": n / forward_s,
                "harness_img_s": n / one_pass_s,
                "overhead_ratio": one_pass_s / forward_s,
                "one_pass_speedup": separate_s / one_pass_s,
                "auroc_ms": base * 1000,
                "pairwise_ms": timings["straightforward pairwise"][0] * 1000,
            }
        )
    )


if __name__ == "__main__":
    main()
