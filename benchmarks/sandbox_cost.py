"""What the sandbox costs on this machine, side by side in one run (figures, not a test).

1. command to exit: ``cood-harness submit FILE --no-cache`` on a tiny glyph benchmark (544 images), sandboxed vs.
   ``--trust-submission``: the difference is what the sandbox adds to a run, its start and close above all (the
   command starts the sandbox before it imports the harness, so the child's start-up overlaps the harness's);
2. start and close inside a harness that has imported torch already (nothing to overlap): a submission file loaded in
   its sandbox (bubblewrap, the child's Python and torch, the model, a trial pass; then ending the sandbox) vs. loaded
   in the harness's own process;
3. per image: the harness's pass over a split (read, decode, forward, 4 kappas) with the model in the sandbox vs. in
   process.

Runs are interleaved and the best (passes) or median (starts) of each kept: the machine's noise hits both alike.

    python benchmarks/sandbox_cost.py [--model examples/glyph_cnn.py] [--split ood_test] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness_speed import KAPPAS, harness_pass

from dataset_builder.glyphs.build import build
from harness.benchmarks import open_benchmark
from harness.runtime.execution import Execution
from harness.runtime.inference import LocalForward
from harness.runtime.isolation import Limits, load_isolated
from harness.submission import check_output, load_file


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", default="glyphs")
    parser.add_argument("--model", default="examples/glyph_cnn.py")
    parser.add_argument("--split", default="ood_test")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    commands = {"sandbox": [], "trusted": []}
    with tempfile.TemporaryDirectory() as tmp:
        tiny = Path(tmp) / "tiny"
        build(
            tiny,
            progress=False,
            seed=0,
            pool_size=48,
            images_per_class=24,
            n_test=8,
            id_test_per_class=8,
            id_train_per_class=0,
        )
        for _ in range(args.repeats):
            for mode, extra in (("sandbox", []), ("trusted", ["--trust-submission"])):
                start = time.perf_counter()
                subprocess.run(
                    [
                        sys.executable,
                        "-c",
                        "from harness.cli import main; main()",
                        "submit",
                        args.model,
                        "--benchmark",
                        str(tiny),
                        "--out",
                        str(Path(tmp) / mode),
                        "--no-cache",
                        "--no-progress",
                        "--device",
                        "cpu",
                        *extra,
                    ],
                    check=True,
                    capture_output=True,
                )
                commands[mode].append(time.perf_counter() - start)
    command_s = {mode: statistics.median(times) for mode, times in commands.items()}

    bench = open_benchmark(args.benchmark)
    execution = Execution.resolve("cpu")
    num_id = len(bench.id_classes)
    starts, closes, loads = [], [], []
    for _ in range(args.repeats):
        start = time.perf_counter()
        sandboxed, child = load_isolated(args.model, execution, num_id, Limits())
        starts.append(time.perf_counter() - start)
        start = time.perf_counter()
        child.close()
        closes.append(time.perf_counter() - start)
        start = time.perf_counter()
        trusted = load_file(args.model)
        check_output(trusted, num_id)
        loads.append(time.perf_counter() - start)
    start_s, close_s, load_s = (statistics.median(x) for x in (starts, closes, loads))

    sandboxed, child = load_isolated(args.model, execution, num_id, Limits())
    local = LocalForward(execution.prepare(trusted.model), execution, num_id)
    in_sandbox, in_process = [], []
    try:
        for _ in range(args.repeats):
            in_sandbox.append(harness_pass(sandboxed, child, bench, KAPPAS, execution, args.split, args.batch_size, 0))
            in_process.append(harness_pass(trusted, local, bench, KAPPAS, execution, args.split, args.batch_size, 0))
    finally:
        child.close()
    n = sum(s["num_samples"] for s in bench.shards(args.split))
    sandbox_s, process_s = min(in_sandbox), min(in_process)
    print(
        f"{trusted.name} on {bench.name} {args.split} ({n} images), CPU, batch {args.batch_size}, "
        f"{args.repeats} interleaved runs"
    )
    print("\n1. command to exit, tiny benchmark (median)")
    print(f"   sandbox (default)                   {command_s['sandbox']:8.2f} s")
    print(f"   in process (--trust-submission)     {command_s['trusted']:8.2f} s")
    print(f"   what the sandbox adds               {command_s['sandbox'] - command_s['trusted']:8.2f} s")
    print("\n2. start and close in a harness with torch imported (median)")
    print(f"   sandbox: start to model ready       {start_s:8.2f} s")
    print(f"   sandbox: close                      {close_s:8.2f} s")
    print(f"   in process: import, build, trial    {load_s:8.2f} s")
    print(f"   the sandbox's extra start + close   {start_s + close_s - load_s:8.2f} s")
    print("\n3. per image (best pass, 4 kappas)")
    print(
        f"   in process (--trust-submission)     {process_s:8.2f} s  {n / process_s:9.0f} img/s  "
        f"{process_s / n * 1e6:7.1f} us/img"
    )
    print(
        f"   sandbox (default)                   {sandbox_s:8.2f} s  {n / sandbox_s:9.0f} img/s  "
        f"{sandbox_s / n * 1e6:7.1f} us/img"
    )
    print(f"   cost ratio (sandbox / in process)   {sandbox_s / process_s:8.2f} x")
    print(
        json.dumps(
            {
                "command_sandbox_s": command_s["sandbox"],
                "command_trusted_s": command_s["trusted"],
                "command_extra_s": command_s["sandbox"] - command_s["trusted"],
                "images": n,
                "sandbox_start_s": start_s,
                "sandbox_close_s": close_s,
                "in_process_load_s": load_s,
                "sandbox_extra_start_close_s": start_s + close_s - load_s,
                "sandbox_img_s": n / sandbox_s,
                "in_process_img_s": n / process_s,
                "per_image_ratio": sandbox_s / process_s,
            }
        )
    )


if __name__ == "__main__":
    main()
