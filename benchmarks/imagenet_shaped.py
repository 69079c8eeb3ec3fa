"""An ImageNet-shaped benchmark of real-size JPEGs, for timing the data path (not a test fixture).

Real photos (scikit-image's, offline) are cropped at random, resized to the sizes ImageNet's JPEGs typically have
(500x375 and its kin) and encoded at quality 90 with 4:2:0 chroma subsampling, as most ImageNet files are; the
ImageNet builder then turns 1,000 ID classes (all of ImageNet-1K, so real classifiers' logits line up) and
``--ood-classes`` real ImageNet-21K OOD classes into a benchmark. Deterministic: the same arguments give the same
bytes.

    python benchmarks/imagenet_shaped.py OUT [--id-per-class 1] [--ood-classes 1010] [--ood-per-class 2]
"""

from __future__ import annotations

import argparse
import hashlib
import io
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import skimage.data
from PIL import Image

from dataset_builder.imagenet import build_imagenet
from dataset_builder.imagenet_classes import ID_CLASSES, imagenet_ood_classes, read_synsets

PHOTOS = (
    "astronaut",
    "coffee",
    "chelsea",
    "rocket",
    "hubble_deep_field",
    "immunohistochemistry",
    "retina",
    "colorwheel",
    "camera",
    "coins",
    "brick",
    "grass",
    "gravel",
    "moon",
    "clock",
)
SIZES = ((500, 375), (500, 333), (375, 500), (500, 400), (333, 500), (500, 500), (400, 300), (500, 357))
QUALITY = 90
GRAIN = 12.0


def source_photos() -> list[Image.Image]:
    """The source photos, RGB, upscaled so that every crop below has at least ImageNet's resolution."""
    photos = []
    for name in PHOTOS:
        image = Image.fromarray(getattr(skimage.data, name)()).convert("RGB")
        scale = max(1.0, 640 / min(image.size))
        photos.append(image.resize((round(image.width * scale), round(image.height * scale)), Image.Resampling.BICUBIC))
    return photos


def photo_jpeg(photos: list[Image.Image], seed: str) -> bytes:
    """One ImageNet-sized JPEG: a seeded crop of a seeded photo, resized, colour-jittered, quality 90."""
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "little"))
    photo = photos[rng.integers(len(photos))]
    width, height = SIZES[rng.integers(len(SIZES))]
    crop_w = int(rng.integers(min(photo.width, width) // 2, photo.width + 1))
    crop_h = min(photo.height, max(8, round(crop_w * height / width)))
    left, top = int(rng.integers(0, photo.width - crop_w + 1)), int(rng.integers(0, photo.height - crop_h + 1))
    image = photo.crop((left, top, left + crop_w, top + crop_h)).resize((width, height), Image.Resampling.BICUBIC)
    pixels = np.asarray(image, dtype=np.float32) * rng.uniform(0.7, 1.3, size=3) + rng.uniform(-20, 20)
    pixels += rng.normal(0.0, GRAIN, pixels.shape)  # a camera's grain: upscaled crops alone are smoother than photos
    if rng.random() < 0.5:
        pixels = pixels[:, ::-1]
    out = io.BytesIO()
    Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(out, "JPEG", quality=QUALITY, subsampling=2)
    return out.getvalue()


def _write_jpegs(paths: list[Path]) -> None:
    """Write the JPEGs at ``paths``, each seeded by its class folder and index (``<wnid>/<wnid>_<i>.JPEG``)."""
    photos = source_photos()
    for path in paths:
        path.write_bytes(photo_jpeg(photos, f"{path.parent.name}/{path.stem.rsplit('_', 1)[1]}"))


def write_trees(
    root: Path, id_per_class: int, ood_classes: int, ood_per_class: int, id_classes: int | None = None, workers: int = 2
) -> tuple[Path, Path]:
    """``(imagenet21k, val)`` folders of real-size JPEGs: the first ``id_classes`` ImageNet-1K classes (all when
    None), and ``ood_classes`` 21K classes that survive the WordNet rules; written by ``workers`` processes."""
    val, pool = root / "val", root / "imagenet21k"
    table = imagenet_ood_classes()
    survivors = table.loc[table["status"] == "ood", "id"].tolist()[:ood_classes]
    paths = []
    for folder, classes, count in (
        (val, read_synsets(ID_CLASSES)[:id_classes], id_per_class),
        (pool, survivors, ood_per_class),
    ):
        for wnid in classes:
            (folder / wnid).mkdir(parents=True, exist_ok=True)
            paths += [folder / wnid / f"{wnid}_{i}.JPEG" for i in range(count)]
    chunks = [paths[i::workers] for i in range(workers)]
    with ProcessPoolExecutor(workers) as pool_:
        list(pool_.map(_write_jpegs, chunks))
    return pool, val


def build(
    out: Path,
    id_per_class: int = 1,
    ood_classes: int = 1010,
    ood_per_class: int = 2,
    workers: int = 2,
    id_classes: int | None = None,
    test_fraction: float = 0.5,
) -> Path:
    """The benchmark in ``out`` (its source trees in ``out/source``); an existing one is reused. ``id_classes``: the
    first so many ImageNet-1K classes (all 1,000 when None, so real classifiers' logits line up); ``ood_classes``: 1,010
    by default, the fewest that give 11 severity levels of 1,000 ID classes; ``test_fraction``: of each OOD class's
    images, the share in its test shard (the ImageNet builder's default is 0.25)."""
    bench = out / "benchmark"
    if (bench / "manifest.json").is_file():
        return bench
    pool, val = write_trees(out / "source", id_per_class, ood_classes, ood_per_class, id_classes, workers)
    ids = None if id_classes is None else read_synsets(ID_CLASSES)[:id_classes]
    build_imagenet(
        bench,
        pool,
        val,
        min_images=ood_per_class,
        images_per_class=ood_per_class,
        test_fraction=test_fraction,
        id_classes=ids,
        workers=workers,
        progress=False,
    )
    return bench


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--id-per-class", type=int, default=1)
    parser.add_argument("--ood-classes", type=int, default=1010)
    parser.add_argument("--ood-per-class", type=int, default=2)
    args = parser.parse_args()
    bench = build(args.out, args.id_per_class, args.ood_classes, args.ood_per_class)
    sizes = [p.stat().st_size for p in (args.out / "source").rglob("*.JPEG")]
    print(f"{bench}: {len(sizes)} JPEGs, mean {np.mean(sizes) / 1000:.0f} KB")


if __name__ == "__main__":
    main()
