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
    Image.frombytes("L", (size, size), (hashlib.sha256(seed.encode()).digest() * size)[: size * size]).save(
        buffer, "PNG"
    )
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


def tar_of(path: Path, members: dict[str, bytes]) -> Path:
    """An uncompressed tar of ``members`` (name -> bytes), members in name order, mtime 0."""
    import tarfile

    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in sorted(members.items()):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def folder_images(root: Path) -> dict[str, dict[str, bytes]]:
    """``class -> {image name: bytes}`` of a tree of class folders."""
    return {c.name: {f.name: f.read_bytes() for f in sorted(c.iterdir())} for c in sorted(root.iterdir())}


def official_val(root: Path) -> Path:
    """ImageNet-1K validation images named as in the official release (``ILSVRC2012_val_%08d.JPEG``), in class
    folders."""
    val = root / "val-official"
    number = 0
    for cid in VAL_CLASSES:
        (val / cid).mkdir(parents=True)
        for i in range(5):
            number += 1
            (val / cid / f"ILSVRC2012_val_{number:08d}.JPEG").write_bytes(jpeg(f"val/{cid}/{i}"))
    return val


def class_tars(folders: Path, out: Path) -> Path:
    """The folder of per-class tars ``<wnid>.tar`` that the official ImageNet-21K tar unpacks to."""
    out.mkdir(parents=True)
    for cid, images in folder_images(folders).items():
        tar_of(out / f"{cid}.tar", images)
    return out


def devkit(path: Path, labels: dict[str, str]) -> Path:
    """An ILSVRC2012 devkit archive: ``data/meta.mat`` (ILSVRC2012_ID -> WNID, ids in an order of their own, as in the
    real one) and ``data/ILSVRC2012_validation_ground_truth.txt`` (one ILSVRC2012_ID per image, in image order)."""
    import tarfile

    import numpy as np
    from scipy.io import savemat

    wnids = sorted(set(labels.values()), reverse=True)  # the real ids do not follow the wnid order either
    synsets = np.zeros(len(wnids), dtype=[("ILSVRC2012_ID", "O"), ("WNID", "O"), ("num_children", "O")])
    for i, wnid in enumerate(wnids):
        synsets[i] = (i + 1, wnid, 0)
    meta = io.BytesIO()
    savemat(meta, {"synsets": synsets})
    truth = "".join(f"{wnids.index(labels[name]) + 1}\n" for name in sorted(labels)).encode()
    with tarfile.open(path, "w:gz") as tar:
        for name, data in (("meta.mat", meta.getvalue()), ("ILSVRC2012_validation_ground_truth.txt", truth)):
            info = tarfile.TarInfo(f"ILSVRC2012_devkit_t12/data/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def wds_shards(images: dict[str, dict[str, bytes]], prefix: str, n_shards: int, layout: str) -> dict[str, bytes]:
    """WebDataset shards laid out as timm's Hub repositories (``<prefix>-NN.tar``), samples shuffled across shards
    (seeded): ``layout="22k"``: key = file stem, json ``class_name``/``label``/``width``/``height`` (imagenet-22k-wds);
    ``"1k"``: key = file stem, json ``filename`` = ``<wnid>/<file>``, ``label``, ``width``, ``height``
    (imagenet-1k-wds)."""
    import json
    import random

    import webdataset as wds

    classes = sorted(images)
    samples = []
    for label, cid in enumerate(classes):
        for name, data in images[cid].items():
            record = {"label": label, "width": 16, "height": 16}
            record.update({"class_name": cid} if layout == "22k" else {"filename": f"{cid}/{name}"})
            samples.append(
                {
                    "__key__": name.rsplit(".", 1)[0],
                    "jpg": data,
                    "cls": str(label).encode(),
                    "json": json.dumps(record).encode(),
                }
            )
    random.Random(0).shuffle(samples)
    shards = {}
    for n in range(n_shards):
        buffer = io.BytesIO()
        with wds.TarWriter(buffer, encoder=False, mtime=0) as writer:
            for sample in samples[n::n_shards]:
                writer.write(sample)
        shards[f"{prefix}-{n:02d}.tar"] = buffer.getvalue()
    return shards


def small_imagenet(root: Path, num_val: int, num_ood: int, per_val: int, per_ood: int) -> dict[str, Path]:
    """A small ImageNet stand-in in two forms, the same images in each: ``val`` and ``pool`` as class folders
    (``num_val`` ImageNet-1K classes spread over the 1,000, ``num_ood`` ImageNet-21K classes that survive the class
    rules), and as the release files: ``val_tar`` (the flat ``ILSVRC2012_img_val.tar``) with ``val_labels`` (Kaggle's
    ``LOC_val_solution.csv``), ``pool_tar`` (a tar of per-class tars, as ``winter21_whole.tar``)."""
    from dataset_builder.imagenet_classes import ID_CLASSES, imagenet_ood_classes, read_synsets

    val, pool = root / "val", root / "imagenet21k"
    number = 0
    for cid in read_synsets(ID_CLASSES)[:: 1000 // num_val][:num_val]:
        (val / cid).mkdir(parents=True)
        for i in range(per_val):
            number += 1
            (val / cid / f"ILSVRC2012_val_{number:08d}.JPEG").write_bytes(jpeg(f"val/{cid}/{i}"))
    table = imagenet_ood_classes()
    for cid in table.loc[table["status"] == "ood", "id"].tolist()[:num_ood]:
        write_class(pool, cid, per_ood)
    val_images = folder_images(val)
    tars = class_tars(pool, root / "pool-tars")
    (root / "LOC_val_solution.csv").write_text(
        "ImageId,PredictionString\n"
        + "".join(f"{name[:-5]},{cid} 1 2 3 4\n" for cid, images in val_images.items() for name in images)
    )
    return {
        "val": val,
        "pool": pool,
        "val_tar": tar_of(root / "ILSVRC2012_img_val.tar", {n: d for i in val_images.values() for n, d in i.items()}),
        "val_labels": root / "LOC_val_solution.csv",
        "pool_tar": tar_of(root / "winter21_whole.tar", {t.name: t.read_bytes() for t in sorted(tars.iterdir())}),
    }


def small_imagenet_benchmark(root: Path, num_val: int, num_ood: int, per_val: int, per: int, id_classes: int) -> Path:
    """A benchmark built from :func:`small_imagenet` (its class folders): ``id_classes`` of the ``num_val`` ImageNet-1K
    classes against the ``num_ood`` ImageNet-21K ones of ``per`` images each, half of each class for testing."""
    from dataset_builder.imagenet import build_imagenet

    src = small_imagenet(root / "src", num_val=num_val, num_ood=num_ood, per_val=per_val, per_ood=per)
    build_imagenet(
        root / "bench", src["pool"], src["val"], id_classes=id_classes, min_images=per, images_per_class=per,
        test_fraction=0.5, workers=1, progress=False,
    )  # fmt: skip
    return root / "bench"
