"""Scale evidence for the image-folder builder: throughput, peak memory at two input sizes, WordNet filtering time.

Generates an ImageNet-shaped tree in a temporary folder (OOD classes = real ImageNet-21K ids that
survive the WordNet rules, ``--images`` small JPEGs each; ID = a few ImageNet-1K val classes), builds
it with :func:`dataset_builder.imagenet.build_imagenet`, and prints figures. Each size is built in its
own process so that its peak memory (``ru_maxrss`` of the builder and of its worker processes) is its own.

    python benchmarks/build_scale.py                       # 200 and 600 classes, 210 images each
    python benchmarks/build_scale.py --sizes 2000 --workers 8
"""

from __future__ import annotations

import argparse
import io
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from PIL import Image

ID_CLASSES = ["n01440764", "n01443537", "n01484850", "n01491361", "n01494475"]


def small_jpeg(rng: random.Random, size: int = 32) -> bytes:
    buffer = io.BytesIO()
    Image.frombytes("RGB", (size, size), rng.randbytes(size * size * 3)).save(buffer, "JPEG", quality=85)
    return buffer.getvalue()


def generate(root: Path, num_classes: int, images: int) -> tuple[Path, Path]:
    from dataset_builder.imagenet_classes import imagenet_ood_classes

    table = imagenet_ood_classes()
    rng = random.Random(0)
    pool, val = root / "imagenet21k", root / "val"
    for folder, classes, count in (
        (pool, table.loc[table["status"] == "ood", "id"][:num_classes], images),
        (val, ID_CLASSES, 50),
    ):
        for cid in classes:
            (folder / cid).mkdir(parents=True)
            for i in range(count):
                (folder / cid / f"{cid}_{i}.JPEG").write_bytes(small_jpeg(rng))
    return pool, val


def run_one(num_classes: int, images: int, workers: int) -> dict:
    """Generate and build one size in this process; return its figures."""
    from dataset_builder.imagenet import build_imagenet

    imports = (
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    )  # webdataset imports torch: most of the baseline
    with tempfile.TemporaryDirectory() as tmp:
        pool, val = generate(Path(tmp), num_classes, images)
        start = time.perf_counter()
        build_imagenet(Path(tmp) / "bench", pool, val, id_classes=ID_CLASSES, workers=workers, progress=False)
        seconds = time.perf_counter() - start
        manifest = json.loads((Path(tmp) / "bench" / "manifest.json").read_text())
    written = sum(s["num_samples"] for s in manifest["shards"])
    peak = lambda who: resource.getrusage(who).ru_maxrss / 1024  # noqa: E731 - KiB on Linux
    return {
        "classes": num_classes,
        "source_images": num_classes * images,
        "images_written": written,
        "seconds": round(seconds, 2),
        "images_per_s": round(written / seconds),
        "mib_after_imports": round(imports),
        "peak_mib_main": round(peak(resource.RUSAGE_SELF)),
        "peak_mib_worker": round(peak(resource.RUSAGE_CHILDREN)),
    }


def wordnet_timing() -> dict:
    from dataset_builder.imagenet_classes import imagenet_ood_classes

    start = time.perf_counter()
    table = imagenet_ood_classes()
    seconds = time.perf_counter() - start
    return {
        "pool_ids": len(table),
        "survivors": int((table["status"] == "ood").sum()),
        "seconds": round(seconds, 2),
        "removed_by_rule": {k: int(v) for k, v in table["rule"].value_counts().sort_index().items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[200, 600], help="OOD classes per run")
    parser.add_argument("--images", type=int, default=210, help="images per OOD class")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(run_one(args.one, args.images, args.workers)))
        return
    print("WordNet filtering of the full ImageNet-21K list:", json.dumps(wordnet_timing()))
    for size in args.sizes:
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--one",
                str(size),
                "--images",
                str(args.images),
                "--workers",
                str(args.workers),
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        print("build:", out.strip())


if __name__ == "__main__":
    main()
