"""Small ImageNet-shaped image trees with real ImageNet ids, generated with PIL (deterministic bytes)."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

from PIL import Image

# ID classes present in the validation folder: tench, lion, hammerhead, monarch
VAL_CLASSES = ["n01440764", "n01494475", "n02129165", "n02279972"]
REMOVED = {
    "n01440764": ("id_class", "n01440764"),  # tench itself
    "n01439121": ("hypernym", "n01440764"),  # cyprinid: an ancestor of tench
    "n01322898": ("hyponym", "n02129165"),  # lion cub: a descendant of lion
    "n01494757": ("hyponym", "n01494475"),  # smooth hammerhead
    "n03145719": ("visually_ambiguous", "n03942813"),  # cue ball vs. ping-pong ball
}
SURVIVORS = ["n00006024", "n00006484", "n00120010", "n00141669", "n02277268"]  # ..., viceroy
TOO_FEW = "n00005787"  # 4 images < min_images
CORRUPT = "n00006484"  # 2 unreadable files among 10: 8 good ones are left, exactly images_per_class
CORRUPT_TOO_FEW = "n00288000"  # 7 files, 2 unreadable: 5 good < min_images
OPTIONS = dict(images_per_class=8, test_fraction=0.25, min_images=6, seed=0)


def jpeg(seed: str, size: int = 16) -> bytes:
    """A deterministic small JPEG: pixels from sha256(seed)."""
    pixels = hashlib.sha256(seed.encode()).digest() * (size * size * 3 // 32 + 1)
    buffer = io.BytesIO()
    Image.frombytes("RGB", (size, size), pixels[: size * size * 3]).save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


def png(seed: str, size: int = 16) -> bytes:
    buffer = io.BytesIO()
    Image.frombytes("L", (size, size), (hashlib.sha256(seed.encode()).digest() * size)[: size * size]).save(buffer, "PNG")
    return buffer.getvalue()


def write_class(root: Path, class_id: str, count: int, prefix: str = "") -> None:
    folder = root / class_id
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        (folder / f"{prefix}{class_id}_{i}.JPEG").write_bytes(jpeg(f"{class_id}/{i}"))


def imagenet_tree(root: Path) -> tuple[Path, Path]:
    """``(imagenet21k, val)`` folders: val has 5 images per ID class; 21K has the classes above, 10 images each."""
    val, pool = root / "val", root / "imagenet21k"
    for cid in VAL_CLASSES:
        write_class(val, cid, 5, prefix="ILSVRC2012_val_")
    for cid in [*REMOVED, *SURVIVORS]:
        write_class(pool, cid, 10)
    write_class(pool, TOO_FEW, 4)
    write_class(pool, CORRUPT_TOO_FEW, 7)
    for cid in (CORRUPT, CORRUPT_TOO_FEW):
        whole = (pool / cid / f"{cid}_0.JPEG").read_bytes()
        (pool / cid / f"{cid}_0.JPEG").write_bytes(whole[: len(whole) // 2])  # truncated
        (pool / cid / f"{cid}_1.JPEG").write_bytes(b"not an image")
    return pool, val
