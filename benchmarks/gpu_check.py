"""One GPU check of the data path, in one run of a few minutes (figures, not a test).

Prints, one line each, then all of it as one final JSON line:

(a) the forward ceiling: timm ``resnet50`` (random weights, nothing downloaded) in bf16 autocast with channels_last
    on random input tensors made beforehand on the device, batch 256, img/s (warmed up first);
(b) JPEG decoding of the ImageNet-shaped benchmark's real-size JPEGs (read from its shards), in batches of 256:
    nvJPEG (``torchvision.io.decode_jpeg(..., device="cuda")``), then torchvision and Pillow on the CPU (one
    process each), img/s; the harness's ``torchvision`` decoder (decode, resize, crop, normalise) on the device; and
    how far its uint8 model inputs, and nvJPEG's decoded pixels, are from timm's Pillow transform's and Pillow's;
(c) the harness end to end (``harness.run.evaluate``, the 4 default logit kappas, no cache) on that benchmark with
    ``decoder="pil"`` and with ``decoder="torchvision"``, img/s each (the three evaluation splits' passes; best of
    ``--repeats``) and its ratio to the forward ceiling;
(d) the largest per-level ood-AUROC difference between the two decoders' results, their largest confidence-score
    difference and how often their top-1 predictions agree.

(e) the sandboxed command, ``cood-harness submit resnet50_random.py`` (a submission file of the same model), and the
    same with ``--trust-submission``: img/s over the split passes and from the command to its exit;
(f) a null model (constant logits, no work): the harness's own cost per image, in-process (``torchvision`` decoder)
    and sandboxed (the command);
(g) stability: ``--stability`` consecutive ``evaluate`` runs with the ``torchvision`` decoder (GPU decoding), every
    score compared bit for bit with the first run's, and every NaN counted.

The benchmark (``imagenet_shaped.py``: all 1,000 ImageNet-1K classes, three JPEGs each, and 1,010 ImageNet-21K
OOD classes of eight JPEGs, so 11 levels and 11,080 images to evaluate, OOD shards of four as ImageNet's are of tens)
is built in ``--work`` on first use and reused after. A part that fails (no
nvJPEG, say) prints one line saying what failed, and the rest goes on. Run from the repository's root:

    python benchmarks/gpu_check.py [--work ~/.cache/cood-bench/imagenet-shaped-gpu] [--device cuda]

``--default-shards`` builds (in ``--work``/default-shards) a benchmark whose OOD shards have the sizes the ImageNet
builder writes by default (200 images per OOD class, 50 of them test: test shards of 50), larger and slower to build.

``--cpu-smoke`` runs every part but nvJPEG on the CPU, with ``resnet18`` on a benchmark of 4 ID and 5 OOD classes
(a few dozen images), to check the script itself in a minute.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import time
import traceback
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the other benchmarks/ scripts, as top-level modules

import numpy as np
import torch
from harness_speed import pure_forward
from imagenet_shaped import build
from PIL import Image

from dataset_builder.benchmark import Benchmark
from dataset_builder.shards import read_shard
from harness.method.severity import DEFAULT_NUM_LEVELS
from harness.run import evaluate
from harness.runtime.decoding import make_decoder
from harness.runtime.execution import Execution
from harness.runtime.scoring import EVAL_SPLITS

DECODERS = ("pil", "torchvision")
FULL = dict(
    model="resnet50",
    batch_size=256,
    forward_batches=8,
    forward_repeats=3,
    cpu_decode_images=1024,
    id_classes=None,
    id_per_class=3,
    ood_classes=1010,
    ood_per_class=8,
)
SMOKE = dict(
    model="resnet18",
    batch_size=8,
    forward_batches=2,
    forward_repeats=1,
    cpu_decode_images=16,
    id_classes=4,
    id_per_class=2,
    ood_classes=5,
    ood_per_class=2,
)


def jpeg_batches(bench: Benchmark, batch_size: int) -> list[list[bytes]]:
    """Every image of the evaluation splits, as read from the shards, in batches."""
    datas = [
        sample[bench.image_ext]
        for split in EVAL_SPLITS
        for shard in bench.shards(split)
        for sample in read_shard(bench.shard_path(shard))
    ]
    return [datas[i : i + batch_size] for i in range(0, len(datas), batch_size)]


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device: torch.device) -> float:
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - start


def forward_ceiling(model, execution: Execution, input_size, cfg: dict) -> float:
    """(a) img/s of the pure forward pass on random input tensors already on the device, best of the repeats."""
    batch = cfg["batch_size"]
    images = execution.inputs(torch.randn(batch * cfg["forward_batches"], *input_size, device=execution.device))
    pure_forward(model, images[:batch], execution, batch)  # warm-up (cuDNN picks its kernels)
    pure_forward(model, images[:batch], execution, batch)
    best = min(
        timed(lambda: pure_forward(model, images, execution, batch), execution.device)
        for _ in range(cfg["forward_repeats"])
    )
    return len(images) / best


def decode_rates(
    batches: list[list[bytes]], device: torch.device, cfg: dict, transform, bench: Benchmark, report
) -> dict:
    """(b) img/s of JPEG decoding: nvJPEG on ``device`` (a GPU), torchvision and Pillow on the CPU; and the harness's
    ``torchvision`` decoder (decode + preprocess) on ``device``."""
    import torchvision.io

    rates = {}
    tensors = [[torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in batch] for batch in batches]
    n = sum(len(batch) for batch in batches)
    if device.type == "cuda":

        def nvjpeg() -> None:
            torchvision.io.decode_jpeg(tensors[0], device=device)  # warm-up: nvJPEG's handles and buffers
            seconds = timed(lambda: [torchvision.io.decode_jpeg(batch, device=device) for batch in tensors], device)
            rates["nvjpeg_img_s"] = n / seconds
            print(
                f"(b) nvJPEG decode_jpeg on {device}, {n} JPEGs in batches of {len(tensors[0])}: "
                f"{rates['nvjpeg_img_s']:.0f} img/s"
            )

        report("nvJPEG decode", nvjpeg)
    else:
        print(f"(b) nvJPEG decode: skipped (device {device} is not a CUDA GPU)")
    limit = cfg["cpu_decode_images"]
    cpu_batches, count = [], 0
    for batch in tensors:
        if count >= limit:
            break
        cpu_batches.append(batch[: limit - count])
        count += len(cpu_batches[-1])

    def cpu_torchvision() -> None:
        seconds = timed(
            lambda: [torchvision.io.decode_jpeg(batch, device="cpu") for batch in cpu_batches], torch.device("cpu")
        )
        rates["cpu_torchvision_img_s"] = count / seconds
        print(
            f"(b) torchvision decode_jpeg on the CPU ({torch.get_num_threads()} torch threads), {count} JPEGs: "
            f"{rates['cpu_torchvision_img_s']:.0f} img/s"
        )

    def cpu_pillow() -> None:
        seconds = timed(
            lambda: [Image.open(io.BytesIO(bytes(t.numpy()))).convert("RGB") for b in cpu_batches for t in b],
            torch.device("cpu"),
        )
        rates["cpu_pillow_img_s"] = count / seconds
        print(f"(b) Pillow decode on the CPU (one process), {count} JPEGs: {rates['cpu_pillow_img_s']:.0f} img/s")

    def preprocess() -> None:
        decoder = make_decoder("torchvision", transform, 3, bench.max_image_pixels, device)
        where = [[f"batch {i}: image {j}" for j in range(len(batch))] for i, batch in enumerate(batches)]
        decoder(batches[0], where[0])  # warm-up
        seconds = timed(lambda: [decoder(batch, w) for batch, w in zip(batches, where)], device)
        rates["preprocess_img_s"] = n / seconds
        print(
            f"(b) the harness's torchvision decoder (decode, resize, crop, normalise) on {device}, {n} JPEGs: "
            f"{rates['preprocess_img_s']:.0f} img/s"
        )

    def agreement() -> None:
        rates.update(pixel_agreement(batches[0], device, transform, bench))
        print(
            f"(b) pixel agreement on {len(batches[0])} JPEGs, the model's uint8 inputs, "
            f"torchvision decoder on {device} against timm's Pillow transform: "
            f"max {rates['pixels_max_diff']} levels, mean {rates['pixels_mean_diff']:.3f}, "
            f"{rates['pixels_differing']:.2%} of values differ; the JPEG decode alone "
            f"({'nvJPEG' if device.type == 'cuda' else 'torchvision'} "
            f"against Pillow): max {rates['decode_max_diff']}, mean {rates['decode_mean_diff']:.3f}"
        )

    report("CPU torchvision decode", cpu_torchvision)
    report("CPU Pillow decode", cpu_pillow)
    report("torchvision decoder preprocessing", preprocess)
    report("pixel agreement", agreement)
    return rates


def pixel_agreement(datas: list[bytes], device: torch.device, transform, bench: Benchmark) -> dict:
    """How far the ``torchvision`` decoder's uint8 model inputs on ``device`` are from timm's own Pillow transform's
    (the latter un-normalised and rounded back to levels), and the JPEG decode alone from Pillow's, over ``datas``."""
    import torchvision.io

    decoder = make_decoder("torchvision", transform, 3, bench.max_image_pixels, device)
    where = [f"image {j}" for j in range(len(datas))]
    ours = decoder.pixels(datas, where).cpu().to(torch.int32)
    mean, std = (torch.tensor(v).view(1, 3, 1, 1) for v in (decoder.plan.mean, decoder.plan.std))
    theirs = make_decoder("pil", transform, 3, bench.max_image_pixels)(datas, where)
    theirs = ((theirs * std + mean) * 255).round().to(torch.int32)
    diff = (ours - theirs).abs()
    decode_max, decode_sum, decode_count = 0, 0, 0
    for data in datas:
        pil = torch.from_numpy(np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))).permute(2, 0, 1).to(torch.int32)
        raw = torchvision.io.decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8), device=device)
        d = (raw.cpu().to(torch.int32) - pil).abs()
        decode_max, decode_sum, decode_count = (
            max(decode_max, int(d.max())),
            decode_sum + int(d.sum()),
            decode_count + d.numel(),
        )
    return {
        "pixels_max_diff": int(diff.max()),
        "pixels_mean_diff": float(diff.double().mean()),
        "pixels_differing": float((diff > 0).double().mean()),
        "decode_max_diff": decode_max,
        "decode_mean_diff": decode_sum / decode_count,
    }


def harness_run(model, config: dict, bench_path: Path, decoder: str, args, cfg: dict, num_levels: int):
    """(c) one ``evaluate``: the Evaluation and its rates in img/s: over its three evaluation splits' passes, over the
    whole call, and after each split's first batch (the loader's start-up left out), with the start-ups in seconds."""
    model.to("cpu")  # the harness checks an in-memory model with a trial pass on the CPU, then moves it
    start = time.perf_counter()
    evaluation = evaluate(
        model,
        config,
        benchmark=bench_path,
        name=cfg["model"],
        decoder=decoder,
        device=args.device,
        amp=args.amp,
        batch_size=cfg["batch_size"],
        workers=args.workers,
        num_levels=num_levels,
        cache=False,
        progress=False,
    )
    wall = time.perf_counter() - start
    timings = evaluation.records[0]["timings"]
    images = sum(timings[f"{split}_images"] for split in EVAL_SPLITS)
    seconds = timings["evaluation_s"] - timings.get("recheck_s", 0.0)  # the pass, its re-check aside
    startup = timings["evaluation_first_batch_s"]
    first = min(cfg["batch_size"], images)
    rates = {
        "img_s": images / seconds,
        "overall_img_s": images / wall,
        "after_first_batch_img_s": (images - first) / (seconds - startup),
        "first_batch_s": startup,
        "recheck_s": timings.get("recheck_s", 0.0),
    }
    return evaluation, images, rates


SUBMISSION = '''"""timm {model}, random weights (seeded): the GPU check's submission file."""
import timm
import torch

NAME = "{model}_random"
DATA_CONFIG = {config!r}


def build_model():
    torch.manual_seed(0)
    return timm.create_model("{model}", pretrained=False, num_classes={classes})
'''
NULL = '''"""A null model: the same logits for every image, at once (the harness's own cost, measured)."""
import torch

NAME = "null_model"
DATA_CONFIG = {config!r}


class Null(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.logits = torch.nn.Parameter(torch.linspace(0.0, 1.0, {classes}))

    def forward(self, images):
        return self.logits.detach().expand(images.shape[0], -1)


def build_model():
    return Null()
'''


def submission_file(folder: Path, template: str, config: dict, cfg: dict, classes: int) -> Path:
    """A submission file written from ``template`` in its own folder (its bundle)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{folder.name}.py"
    plain = {k: tuple(v) if isinstance(v, (list, tuple)) else v for k, v in config.items()}
    path.write_text(template.format(model=cfg["model"], config=plain, classes=classes))
    return path


def cli_run(path: Path, bench_path: Path, args, cfg: dict, num_levels: int, trusted: bool, out: Path) -> dict:
    """(e), (f) one ``cood-harness submit`` command: img/s over the split passes and from the command to its exit."""
    command = (
        [
            sys.executable,
            "-m",
            "harness.cli",
            "submit",
            str(path),
            "--benchmark",
            str(bench_path),
            "--device",
            args.device,
            "--amp",
            args.amp,
            "--batch-size",
            str(cfg["batch_size"]),
            "--levels",
            str(num_levels),
            "--no-cache",
            "--no-progress",
            "--out",
            str(out),
            "-k",
            "softmax",
            "-k",
            "entropy",
            "-k",
            "max_logit",
            "-k",
            "energy",
        ]
        + (["--trust-submission"] if trusted else [])
        + ([] if args.workers is None else ["--workers", str(args.workers)])
    )
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError((done.stderr.strip().splitlines() or ["no output"])[-1])
    timings = json.loads(next((out / "records").glob("*.json")).read_text())["timings"]
    images = sum(timings[f"{split}_images"] for split in EVAL_SPLITS)
    return {
        "images": images,
        "img_s": images / (timings["evaluation_s"] - timings.get("recheck_s", 0.0)),
        "command_img_s": images / wall,
        "command_s": wall,
        "total_s": timings["total_s"],
    }


class NullModel(torch.nn.Module):
    """Constant logits at once: the harness's own cost per image, in-process."""

    def __init__(self, classes: int):
        super().__init__()
        self.logits = torch.nn.Parameter(torch.linspace(0.0, 1.0, classes))

    def forward(self, images):
        return self.logits.detach().expand(images.shape[0], -1)


def all_scores(evaluation) -> dict:
    """Every per-sample array of an evaluation, by name."""
    arrays = {}
    for split, scores in evaluation.scores.items():
        arrays |= {f"{split}/preds": scores.preds, f"{split}/logits": scores.logits}
        arrays |= {f"{split}/score/{k}": v for k, v in scores.scores.items()}
        arrays |= {f"{split}/conf/{k}": v for k, v in scores.confs.items()}
    return {k: v for k, v in arrays.items() if v is not None}


def stability(runs: int, run) -> dict:
    """(g) ``runs`` evaluations by ``run()``: every array compared bit for bit with the first run's, NaN counted."""
    first, failures, differing, nan = None, [], set(), 0
    for n in range(runs):
        try:
            arrays = all_scores(run())
        except Exception as exc:
            failures.append(f"run {n + 1}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            continue
        nan += sum(int(np.sum(~np.isfinite(v))) for v in arrays.values() if v.dtype.kind == "f")
        if first is None:
            first = arrays
        differing |= {k for k, v in arrays.items() if v.tobytes() != first[k].tobytes()}
    return {
        "runs": runs,
        "failed": failures,
        "identical": first is not None and not differing and not failures,
        "differing": sorted(differing)[:8],
        "nan": nan,
    }


def decoder_differences(evaluations: dict) -> dict:
    """(d) the largest per-level ood-AUROC difference between the decoders' results (same kappa, same level), the
    largest difference between their confidence scores, and the share of images with the same top-1 prediction."""
    pil, tv = evaluations["pil"], evaluations["torchvision"]
    auroc = 0.0
    levels = 0
    for a, b in zip(pil.results, tv.results):
        assert a.kappa == b.kappa and len(a.rows) == len(b.rows), "the decoders' results differ in shape"
        for row_a, row_b in zip(a.rows, b.rows):
            auroc = max(auroc, abs(row_a["ood_auroc"] - row_b["ood_auroc"]))
            levels += 1
    scores = 0.0
    for split in EVAL_SPLITS:
        x, y = pil.scores[split], tv.scores[split]
        assert list(x.keys) == list(y.keys), f"{split}: the decoders scored different samples"
        for kappa in x.scores:
            scores = max(
                scores, float(np.abs(x.scores[kappa].astype(np.float64) - y.scores[kappa].astype(np.float64)).max())
            )
    agree = float(np.mean([np.mean(pil.scores[s].preds == tv.scores[s].preds) for s in EVAL_SPLITS]))
    return {
        "max_level_auroc_diff": auroc,
        "levels_compared": levels,
        "max_score_diff": scores,
        "same_prediction": agree,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--work",
        type=Path,
        default=Path.home() / ".cache" / "cood-bench" / "imagenet-shaped-gpu",
        help="where the ImageNet-shaped benchmark is built (reused when there)",
    )
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--amp", default="bf16", help="none | bf16 | fp16 (the CPU smoke run: none)")
    parser.add_argument("--workers", type=int, default=None, help="the harness's loader workers (default: its own)")
    parser.add_argument("--repeats", type=int, default=2, help="harness runs per decoder, interleaved, best kept")
    parser.add_argument("--stability", type=int, default=10, help="GPU-decoding runs compared bit for bit (0: none)")
    parser.add_argument(
        "--default-shards",
        action="store_true",
        help="OOD shards of the ImageNet builder's default sizes (200 images per OOD class, 50 test)",
    )
    parser.add_argument(
        "--cpu-smoke",
        action="store_true",
        help="everything on the CPU, resnet18 on a benchmark of a few dozen images; no nvJPEG",
    )
    args = parser.parse_args()
    cfg = dict(SMOKE if args.cpu_smoke else FULL)
    if args.cpu_smoke:
        args.device, args.amp, args.repeats, args.stability = "cpu", "none", 1, min(args.stability, 2)
    if args.default_shards:
        cfg.update(ood_per_class=200, test_fraction=0.25)
        args.work = args.work / "default-shards"
    started = time.perf_counter()
    errors: list[str] = []
    figures: dict = {
        "mode": "cpu-smoke" if args.cpu_smoke else "full",
        "model": cfg["model"],
        "device": args.device,
        "amp": args.amp,
        "batch_size": cfg["batch_size"],
    }

    def report(what: str, fn):
        try:
            return fn()
        except Exception as exc:
            line = f"{what} failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            print(f"FAILED {line}", flush=True)
            traceback.print_exc(file=sys.stderr)
            errors.append(line)
            return None

    import timm
    from timm.data import resolve_data_config

    execution = Execution.resolve(args.device, args.amp)
    figures["gpu"] = execution.gpu_name()
    print(
        f"{execution.summary()}, channels_last {execution.channels_last}; torch {torch.__version__}, "
        f"timm {timm.__version__}",
        flush=True,
    )
    torch.manual_seed(0)
    num_classes = cfg["id_classes"] or 1000
    model = timm.create_model(cfg["model"], pretrained=False, num_classes=num_classes).eval()
    config = resolve_data_config({}, model=model)
    from harness.submission import timm_transform

    transform = timm_transform(config)

    workers = args.workers or min(16, os.cpu_count() or 1)
    bench_path = report(
        "building the benchmark",
        lambda: build(
            args.work,
            id_per_class=cfg["id_per_class"],
            ood_classes=cfg["ood_classes"],
            ood_per_class=cfg["ood_per_class"],
            workers=workers,
            id_classes=cfg["id_classes"],
            test_fraction=cfg.get("test_fraction", 0.5),
        ),
    )
    bench = report("opening the benchmark", lambda: Benchmark.open(bench_path)) if bench_path else None
    if bench is not None:
        figures["benchmark"] = {
            "id_classes": len(bench.id_classes),
            "ood_classes": len(bench.ood_classes),
            "images": sum(s["num_samples"] for split in EVAL_SPLITS for s in bench.shards(split)),
        }
        print(
            f"benchmark: {figures['benchmark']['id_classes']} ID and {figures['benchmark']['ood_classes']} OOD "
            f"classes, {figures['benchmark']['images']} images in the evaluation splits "
            f"({time.perf_counter() - started:.0f} s so far)",
            flush=True,
        )

    def ceiling() -> None:
        prepared = execution.prepare(model)
        figures["forward_img_s"] = forward_ceiling(prepared, execution, config["input_size"], cfg)
        print(
            f"(a) forward ceiling, {cfg['model']} at {tuple(config['input_size'])}, batch {cfg['batch_size']}: "
            f"{figures['forward_img_s']:.0f} img/s",
            flush=True,
        )

    report("forward ceiling", ceiling)
    if bench is not None:
        batches = report("reading the shards", lambda: jpeg_batches(bench, cfg["batch_size"]))
        if batches:
            figures.update(decode_rates(batches, execution.device, cfg, transform, bench, report))
            del batches

    num_levels = min(DEFAULT_NUM_LEVELS, len(bench.ood_classes) - len(bench.id_classes) + 1) if bench is not None else 0
    evaluations, harness = {}, {}
    for repeat in range(args.repeats if bench is not None else 0):
        for decoder in DECODERS:
            ran = report(
                f"harness run, decoder {decoder}",
                partial(harness_run, model, config, bench_path, decoder, args, cfg, num_levels),
            )
            if ran is None:
                continue
            evaluation, images, rates = ran
            evaluations.setdefault(decoder, evaluation)
            best = harness.setdefault(decoder, {"images": images, "runs": 0})
            for key, value in rates.items():
                best[key] = value if key == "first_batch_s" else max(best.get(key, 0.0), value)
            best["runs"] += 1
            print(
                f"    harness run {repeat + 1}, decoder {decoder:11s}: {images} images, "
                f"{rates['img_s']:.0f} img/s over the pass, "
                f"{rates['overall_img_s']:.0f} over the whole call, "
                f"{rates['after_first_batch_img_s']:.0f} after its first batch "
                f"(which came after {rates['first_batch_s']:.2f} s; re-check {rates['recheck_s']:.2f} s)",
                flush=True,
            )
    for decoder, best in harness.items():
        if "forward_img_s" in figures:
            best["ratio_to_forward"] = best["img_s"] / figures["forward_img_s"]
        ratio = f", {best['ratio_to_forward']:.2f} x the forward ceiling" if "ratio_to_forward" in best else ""
        print(
            f"(c) harness end to end, decoder {decoder:11s}: {best['img_s']:.0f} img/s "
            f"(best of {best['runs']}){ratio}; "
            f"{best['after_first_batch_img_s']:.0f} img/s after each split's first batch"
        )
    figures["harness"] = harness
    if len(evaluations) == len(DECODERS):
        differences = report("comparing the decoders", lambda: decoder_differences(evaluations))
        if differences:
            figures.update(differences)
            print(
                f"(d) largest per-level ood-AUROC difference between the decoders: "
                f"{differences['max_level_auroc_diff']:.3g} "
                f"({differences['levels_compared']} kappa levels); largest confidence-score difference "
                f"{differences['max_score_diff']:.3g}; "
                f"same top-1 prediction for {differences['same_prediction']:.2%} of images"
            )
    else:
        print("(d) decoder comparison: skipped (a harness run failed)")
    if bench is not None:
        cli = figures.setdefault("cli", {})
        resnet = submission_file(args.work / f"{cfg['model']}_random", SUBMISSION, config, cfg, num_classes)
        null = submission_file(args.work / "null_model", NULL, config, cfg, num_classes)
        for what, path, trusted in (
            ("sandboxed", resnet, False),
            ("trusted", resnet, True),
            ("null_sandboxed", null, False),
        ):
            for repeat in range(args.repeats):
                ran = report(
                    f"the command, {what}",
                    partial(
                        cli_run,
                        path,
                        bench_path,
                        args,
                        cfg,
                        num_levels,
                        trusted,
                        args.work / "out" / f"{what}-{repeat}",
                    ),
                )
                if ran is not None and ran["img_s"] > cli.get(what, {}).get("img_s", 0.0):
                    cli[what] = ran
            if what in cli:
                run = cli[what]
                print(
                    f"(e) cood-harness submit, {what:14s}: {run['img_s']:.0f} img/s over the split passes, "
                    f"{run['command_img_s']:.0f} img/s command to exit ({run['command_s']:.1f} s, total_s "
                    f"{run['total_s']:.1f})",
                    flush=True,
                )

        def null_in_process() -> None:
            best = 0.0
            for _ in range(args.repeats):
                _, images, rates = harness_run(
                    NullModel(num_classes), config, bench_path, "torchvision", args, cfg, num_levels
                )
                best = max(best, rates["img_s"])
            figures["null_in_process_img_s"] = best
            sandboxed = cli.get("null_sandboxed", {}).get("img_s")
            beside = f"; sandboxed {1e6 / sandboxed:.0f} us/image ({sandboxed:.0f} img/s)" if sandboxed else ""
            print(
                f"(f) null model (constant logits), the harness's own cost: in-process {1e6 / best:.0f} us/image "
                f"({best:.0f} img/s){beside}",
                flush=True,
            )

        report("null model", null_in_process)
        if args.stability:
            stable = stability(
                args.stability, lambda: harness_run(model, config, bench_path, "torchvision", args, cfg, num_levels)[0]
            )
            figures["stability"] = stable
            print(
                f"(g) stability, {stable['runs']} runs with the torchvision decoder on {args.device}: "
                f"{'identical scores' if stable['identical'] else 'scores DIFFER'} ({len(stable['failed'])} failed, "
                f"{stable['nan']} NaN)"
                + (f"; differing: {', '.join(stable['differing'])}" if stable["differing"] else "")
                + (f"; {'; '.join(stable['failed'])}" if stable["failed"] else ""),
                flush=True,
            )
            if not stable["identical"]:
                errors.append("stability: the runs' scores differ or a run failed")
    figures["errors"] = errors
    figures["seconds"] = time.perf_counter() - started
    print(f"done in {figures['seconds']:.0f} s" + (f", {len(errors)} part(s) failed" if errors else ""))
    print(json.dumps(figures, default=str))


if __name__ == "__main__":
    main()
