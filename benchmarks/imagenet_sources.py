"""Images/s of the ImageNet builder from the release's tar of per-class tars against class folders, side by side.

Generates one ImageNet-21K-shaped set of images (real ids that survive the WordNet rules, ``--images`` JPEGs of
500x375 pixels per class, the size of a typical ImageNet photo) in a temporary folder, lays it out both as class
folders and as one outer tar of ``<wnid>.tar`` members, and builds the benchmark from each (same options, same
workers, alternating, best of ``--repeats``). Prints images written per second, the ratio, the time spent indexing
the outer tar, and that both benchmarks are byte-identical.

    python benchmarks/imagenet_sources.py                          # 40 classes x 300 images, 2 workers
    python benchmarks/imagenet_sources.py --classes 200 --workers 16
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import random
import tarfile
import tempfile
import time
from pathlib import Path

from PIL import Image

ID_CLASSES = ["n01440764", "n01443537"]


def photo(rng: random.Random) -> bytes:
    """A 500x375 JPEG with smooth content (about 57 KB), from a random 60x45 image."""
    buffer = io.BytesIO()
    Image.frombytes("RGB", (60, 45), rng.randbytes(60 * 45 * 3)).resize((500, 375), Image.BICUBIC).save(
        buffer, "JPEG", quality=90
    )
    return buffer.getvalue()


def generate(root: Path, classes: int, images: int, distinct: int = 400) -> tuple[Path, Path, Path]:
    """``(class folders, outer tar, val folders)``; ``distinct`` different photos are reused across classes."""
    from dataset_builder.imagenet_classes import imagenet_ood_classes

    rng = random.Random(0)
    photos = [photo(rng) for _ in range(distinct)]
    table = imagenet_ood_classes()
    pool, val, outer = root / "folders", root / "val", root / "winter21_whole.tar"
    with tarfile.open(outer, "w") as whole:
        for c, cid in enumerate(table.loc[table["status"] == "ood", "id"][:classes]):
            (pool / cid).mkdir(parents=True)
            inner = io.BytesIO()
            with tarfile.open(fileobj=inner, mode="w") as tar:
                for i in range(images):
                    data = photos[(c * images + i) % distinct]
                    (pool / cid / f"{cid}_{i}.JPEG").write_bytes(data)
                    info = tarfile.TarInfo(f"{cid}_{i}.JPEG")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
            info = tarfile.TarInfo(f"{cid}.tar")
            info.size = inner.tell()
            inner.seek(0)
            whole.addfile(info, inner)
    for cid in ID_CLASSES:
        (val / cid).mkdir(parents=True)
        for i in range(50):
            (val / cid / f"ILSVRC2012_val_{cid}_{i}.JPEG").write_bytes(photos[i])
    return pool, outer, val


def tree_hash(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(path.relative_to(root).as_posix().encode() + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--classes", type=int, default=40, help="OOD classes")
    parser.add_argument("--images", type=int, default=300, help="images per OOD class (the builder keeps 200)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    from dataset_builder.imagenet import build_imagenet
    from dataset_builder.sources import ClassTarSource

    with tempfile.TemporaryDirectory() as tmp:
        pool, outer, val = generate(Path(tmp), args.classes, args.images)
        start = time.perf_counter()
        ClassTarSource.from_outer_tar(str(outer))
        index_s, outer_mib = time.perf_counter() - start, outer.stat().st_size / 2**20
        best, hashes = {}, {}
        for repeat in range(args.repeats):
            for form, source in (("folders", pool), ("tar of tars", outer)):
                out = Path(tmp) / f"bench-{repeat}-{form.replace(' ', '-')}"
                start = time.perf_counter()
                build_imagenet(out, source, val, id_classes=ID_CLASSES, workers=args.workers, progress=False)
                seconds = time.perf_counter() - start
                written = sum(s["num_samples"] for s in json.loads((out / "manifest.json").read_text())["shards"])
                best[form] = max(best.get(form, 0.0), written / seconds)
                hashes[form] = tree_hash(out)
    print(
        f"{args.classes} classes x {args.images} images of 500x375 px, {args.workers} workers, best of {args.repeats}:"
    )
    for form, rate in best.items():
        print(f"  {form:12s} {rate:8.0f} images/s")
    print(f"  ratio tar of tars / folders: {best['tar of tars'] / best['folders']:.2f}")
    print(f"  outer tar index ({outer_mib:.0f} MiB, {args.classes} members): {index_s * 1000:.0f} ms")
    print(f"  benchmarks byte-identical: {hashes['folders'] == hashes['tar of tars']}")


if __name__ == "__main__":
    main()
