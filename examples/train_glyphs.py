"""Train the example glyph classifiers on the glyph benchmark's ID training set and save their weights.

Deterministic (seeded, one thread, deterministic algorithms): rerunning it on the same platform (torch version,
CPU and its kernels, recorded beside each weights file as ``<name>.platform.json``) reproduces the committed
weights byte for byte. Elsewhere torch promises no bit-identity; the retrained models then score alike.

    python examples/train_glyphs.py [--benchmark FOLDER] [--out examples/weights]
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import platform
from pathlib import Path

import torch
from PIL import Image
from safetensors.torch import save_file

from dataset_builder.benchmark import Benchmark
from dataset_builder.embedded import embedded_benchmark
from dataset_builder.shards import iter_samples
from harness.submission import timm_transform

HERE = Path(__file__).resolve().parent
MODELS = {"glyph_cnn": {"epochs": 12, "lr": 5e-3}, "glyph_mlp": {"epochs": 6, "lr": 2e-3}}
SEED = 0


def load_module(name: str):
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def training_set(benchmark: Benchmark, transform) -> tuple[torch.Tensor, torch.Tensor]:
    """All ID training images as one tensor, with their class indices, in shard order."""
    label_of = dict(zip(benchmark.id_classes["id"], benchmark.id_classes["index"]))
    images, labels = [], []
    for shard in benchmark.shards("id_train"):
        for sample in iter_samples(benchmark.shard_path(shard)):
            images.append(transform(Image.open(io.BytesIO(sample[benchmark.image_ext])).convert("L")))
            labels.append(label_of[json.loads(sample["json"])["class_id"]])
    return torch.stack(images), torch.tensor(labels)


def platform_info() -> dict:
    """What bit-identical training depends on: torch's version and CPU kernels, and the CPU."""
    cpu = platform.processor()
    if Path("/proc/cpuinfo").is_file():
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), cpu)
    return {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "machine": platform.machine(), "cpu": cpu}


def train(name: str, images: torch.Tensor, labels: torch.Tensor, epochs: int, lr: float) -> dict[str, torch.Tensor]:
    torch.manual_seed(SEED)
    model = load_module(name).build_model(pretrained=False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    generator = torch.Generator().manual_seed(SEED)
    steps = epochs * ((len(images) + 127) // 128)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=steps)
    model.train()
    for epoch in range(epochs):
        order = torch.randperm(len(images), generator=generator)
        total, correct = 0.0, 0
        for start in range(0, len(images), 128):
            batch = order[start : start + 128]
            logits = model(images[batch])
            loss = torch.nn.functional.cross_entropy(logits, labels[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            total += loss.item() * len(batch)
            correct += (logits.argmax(1) == labels[batch]).sum().item()
        print(f"{name} epoch {epoch + 1}/{epochs}: loss {total / len(images):.4f}, train acc {correct / len(images):.4f}")
    return {k: v.contiguous() for k, v in model.state_dict().items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", type=Path, default=None, help="glyph benchmark folder [default: the embedded one]")
    parser.add_argument("--out", type=Path, default=HERE / "weights")
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    benchmark = Benchmark.open(args.benchmark or embedded_benchmark("glyphs"))
    images, labels = training_set(benchmark, timm_transform(load_module("glyph_cnn").DATA_CONFIG))
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.models:
        save_file(train(name, images, labels, **MODELS[name]), args.out / f"{name}.safetensors")
        (args.out / f"{name}.platform.json").write_text(json.dumps(platform_info(), indent=1) + "\n")
        print(f"saved {args.out / (name + '.safetensors')}")


if __name__ == "__main__":
    main()
