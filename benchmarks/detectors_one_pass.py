"""All supported feature and logit detectors from one pass vs. each pytorch-ood detector run the usual way (figures).

The harness: ``evaluate`` of ``glyph_cnn`` on the embedded benchmark with every registered pytorch-ood detector that
reads logits or features (one pass over the fit split and the evaluation splits, then fit and score from its outputs),
no score cache. The usual way, per detector, as pytorch-ood's documentation runs it: the detector built on the model's
pieces (the model for logit detectors, an encoder giving the features and the last layer for the others),
``fit(loader)`` over the fit split's images, then ``predict(x)`` over every evaluation image, batch by batch. The
images are decoded once, before the clock starts, so the usual way is timed without any data-loading cost: the ratio
is a lower bound of what one pass saves.

    python benchmarks/detectors_one_pass.py [--detectors knn,vim,...] [--batch-size 256]
"""

from __future__ import annotations

import argparse
import inspect
import io
import json
import time
from pathlib import Path

import torch
from PIL import Image
from pytorch_ood import detector as pod
from torch.utils.data import DataLoader, TensorDataset

from dataset_builder.shards import iter_samples
from harness.benchmarks import open_benchmark
from harness.kappas import registry
from harness.kappas.features import FeatureTap
from harness.kappas.fitting import fit_split
from harness.kappas.ood_bridge import MISSING_DEFAULTS, bridged_classes
from harness.run import evaluate
from harness.submission import load_file

MODEL = str(Path(__file__).resolve().parents[1] / "examples" / "glyph_cnn.py")
EVAL_SPLITS = ("id_test", "ood_estimation", "ood_test")


class Encoder(torch.nn.Module):
    """The model up to its last layer: the features that layer reads (captured from the model's own forward)."""

    def __init__(self, model: torch.nn.Module, num_classes: int):
        super().__init__()
        self.model, self.tap = model, FeatureTap(model, num_classes)

    def forward(self, x):
        self.model(x)
        return self.tap.take()


def decoded(bench, submission, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    labels = {c: i for i, c in enumerate(bench.id_classes["id"])}
    images, ys = [], []
    for shard in bench.shards(split):
        for sample in iter_samples(bench.shard_path(shard)):
            image = Image.open(io.BytesIO(sample[bench.image_ext])).convert("L" if submission.channels == 1 else "RGB")
            images.append(submission.transform(image))
            ys.append(labels.get(json.loads(sample["json"])["class_id"], -1))  # -1: an OOD class
    return torch.stack(images), torch.tensor(ys)


def usual_way(cls, params: dict, model, num_classes: int, fit_x, fit_y, eval_x, batch_size: int) -> float:
    takes = set(inspect.signature(cls.__init__).parameters)
    linear = FeatureTap(model, num_classes).layer
    encoder = Encoder(model, num_classes)
    kwargs = {k: v for k, v in params.items() if k != "fit"}
    if cls is pod.ViM and kwargs.get("d") is None:
        kwargs["d"] = linear.in_features // 2
    if "model" in takes:
        kwargs["model"] = model
    elif "backbone" in takes:
        kwargs["backbone"] = torch.nn.Sequential(encoder, torch.nn.Unflatten(1, (-1, 1, 1)))
        kwargs["head"] = torch.nn.Sequential(torch.nn.Flatten(), linear)
    else:
        kwargs["encoder"] = encoder
        if "head" in takes:
            kwargs["head"] = linear
        if "w" in takes:
            kwargs["w"], kwargs["b"] = linear.weight, linear.bias
    start = time.perf_counter()
    detector = cls(**kwargs)
    if cls.requires_fit:
        detector.fit(DataLoader(TensorDataset(fit_x, fit_y), batch_size=batch_size))
    with torch.no_grad():
        for i in range(0, len(eval_x), batch_size):
            detector.predict(eval_x[i : i + batch_size])
    return time.perf_counter() - start


def harness(names: list[str], batch_size: int) -> float:
    start = time.perf_counter()
    evaluation = evaluate(MODEL, kappas=names, cache=False, progress=False, batch_size=batch_size)
    seconds = time.perf_counter() - start
    forwarded = evaluation.records[0]["timings"]["images_forwarded"]
    print(f"harness: {len(names)} detectors, one pass ({forwarded} images forwarded): {seconds:.1f} s", flush=True)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--detectors", default=None, help="comma-separated kappa names (default: every feature/logit one)"
    )
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args()
    classes = bridged_classes()
    names = args.detectors.split(",") if args.detectors else list(classes)
    harness_runs = [harness(names, args.batch_size)]

    bench = open_benchmark("glyphs")
    submission = load_file(MODEL)
    model = submission.model.eval()
    num_classes = len(bench.id_classes)
    split, _ = fit_split(bench)
    fit_x, fit_y = decoded(bench, submission, split)
    eval_x = torch.cat([decoded(bench, submission, s)[0] for s in EVAL_SPLITS])
    print(
        f"usual way: fit on {len(fit_x)} {split} images, predict {len(eval_x)} evaluation images per detector "
        "(images decoded beforehand, not timed)",
        flush=True,
    )
    total = 0.0
    for name in names:
        params = {**registry().get(name).defaults, **MISSING_DEFAULTS.get(classes[name].__name__, {})}
        seconds = usual_way(classes[name], params, model, num_classes, fit_x, fit_y, eval_x, args.batch_size)
        total += seconds
        print(f"  {name:20s} {seconds:8.1f} s", flush=True)
    harness_runs.append(harness(names, args.batch_size))  # before and after: the machine's load hits both sides
    harness_s = min(harness_runs)
    print(
        f"\nharness, one pass, {len(names)} detectors   {harness_s:8.1f} s "
        f"(best of {', '.join(f'{t:.1f}' for t in harness_runs)})"
    )
    print(f"pytorch-ood the usual way, summed     {total:8.1f} s")
    print(f"ratio (usual / harness)               {total / harness_s:8.2f} x")


if __name__ == "__main__":
    main()
