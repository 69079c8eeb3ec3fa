"""How fast ``cood-harness submit`` answers a mistake: seconds from the command to its one-line error, its exit code,
and whether torch was imported first (figures, not a test).

Each mistake runs in a fresh process of the real entry point, from the repository's root, with the embedded glyph
benchmark (built on first use) as the benchmark folder where one is needed. Run from the repository's root:

    python benchmarks/fast_errors.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBE = (
    "import atexit, sys; atexit.register(lambda: print('torch imported:', 'torch' in sys.modules)); "
    "from harness.cli import main; main()"
)
CNN, WEIGHTS = "examples/glyph_cnn.py", "examples/weights/glyph_cnn.safetensors"


def mistakes(folder: str, imagenet_weights: str) -> dict[str, list[str]]:
    """Each mistake's command-line arguments; ``folder``: a benchmark folder (36 ID classes), ``imagenet_weights``: a
    vit_large_patch16_224 weights file of 1,000 classes."""
    return {
        "kappa typo (a file)": ["submit", CNN, "-k", "sofmax"],
        "kappa typo (a zoo target)": ["submit", "timm:resnet18", "--weights", WEIGHTS, "-k", "sofmax"],
        "kappa parameter typo": ["submit", CNN, "-k", "energy:temprature=1"],
        "kappa parameter value of the wrong type": ["submit", CNN, "-k", "energy(temperature=hot)"],
        "benchmark path that does not exist": ["submit", CNN, "--benchmark", "no/such/benchmark"],
        "benchmark folder without a manifest": ["submit", CNN, "--benchmark", "examples"],
        "missing weights file": ["submit", "timm:resnet18", "--weights", "missing.safetensors"],
        "more levels than a benchmark folder's classes": ["submit", CNN, "--benchmark", folder, "--levels", "500"],
        "more levels than the embedded benchmark's classes": ["submit", CNN, "--levels", "500"],
        "severity rule typo": ["submit", CNN, "--severity-rule", "orignal"],
        "typo'd subcommand": ["sbumit", CNN],
        "a weights file of 1,000 classes on 36 ID classes": [
            "submit", "timm:vit_large_patch16_224", "--weights", imagenet_weights, "--benchmark", folder,
        ],
    }  # fmt: skip


def imagenet_weights(folder: Path) -> str:
    """A random-init timm vit_large_patch16_224 (1,000 classes, 1.2 GB) saved as safetensors in ``folder``."""
    import timm
    from safetensors.torch import save_file

    path = folder / "vit_large_patch16_224-1000.safetensors"
    save_file(timm.create_model("vit_large_patch16_224").state_dict(), path)
    return str(path)


def answer(args: list[str]) -> tuple[float, int, str, str]:
    """Seconds to the answer, the exit code, the last line on stderr and whether torch was imported."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - started
    err = done.stderr.strip().splitlines() or [""]
    torch = (done.stdout.strip().splitlines() or ["?"])[-1].removeprefix("torch imported: ")
    return seconds, done.returncode, err[-1], torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="Runs of each mistake; the best is shown.")
    args = parser.parse_args()
    from dataset_builder.embedded import embedded_benchmark

    folder = str(embedded_benchmark("glyphs", progress=False))
    with tempfile.TemporaryDirectory() as scratch:
        for label, argv in mistakes(folder, imagenet_weights(Path(scratch))).items():
            runs = [answer(argv) for _ in range(args.repeats)]
            seconds, code, line, torch = min(runs)
            print(f"{label}: {seconds:.2f} s, exit {code}, torch imported: {torch}\n    {line[:150]}")


if __name__ == "__main__":
    main()
