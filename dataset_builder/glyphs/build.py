"""Build the glyph benchmark folder (DESIGN.md layout), byte-identical for the same seed."""

from __future__ import annotations

import shutil
import unicodedata
from pathlib import Path

from tqdm import tqdm

from dataset_builder import manifest as manifest_io
from dataset_builder.assemble import (
    check_target,
    class_counts,
    class_labels,
    finish,
    number_pool,
    partial_of,
    write_class_tables,
)
from dataset_builder.glyphs import classes as glyph_classes
from dataset_builder.glyphs import render
from dataset_builder.glyphs.settings import BENCHMARK_ID, BENCHMARK_VERSION
from dataset_builder.manifest import MAX_IMAGE_PIXELS
from dataset_builder.shards import RollingShards, make_sample, sample_key, write_shard
from dataset_builder.split import SPLIT_RULE, split_class
from dataset_builder.workers import worker_pool

IMAGE_EXT = "png"
TEST_GROUP_SIZE = 1000


def _render_class(task: tuple[int, str, str, list[str]]) -> list[tuple[str, bytes]]:
    seed, char, cid, keys = task
    return [(key, render.render_png(char, render.style_for(seed, cid, key))) for key in keys]


def _samples(rendered: list[tuple[str, bytes]], cid: str, label: int, keep: set[str] | None = None) -> list[dict]:
    return [
        make_sample(sample_key(cid, key), IMAGE_EXT, png, cid, label)
        for key, png in rendered
        if keep is None or key in keep
    ]


def build(
    root: str | Path,
    *,
    seed: int = 0,
    pool_size: int | None = 400,
    images_per_class: int = 200,
    n_test: int = 50,
    id_test_per_class: int = 50,
    id_train_per_class: int = 300,
    rule_sets: dict[str, bool] | None = None,
    workers: int = 2,
    progress: bool = True,
    overwrite: bool = False,
) -> str:
    """Render and write the whole benchmark beside ``root``, then swap it in (an existing benchmark only with
    ``overwrite``); return the manifest sha256. A failed build leaves nothing behind."""
    root = Path(root)
    check_target(root, overwrite)
    partial = partial_of(root)
    shutil.rmtree(partial, ignore_errors=True)  # a killed earlier build: this builder does not resume
    try:
        manifest = _write(
            partial,
            seed=seed,
            pool_size=pool_size,
            images_per_class=images_per_class,
            n_test=n_test,
            id_test_per_class=id_test_per_class,
            id_train_per_class=id_train_per_class,
            rule_sets=rule_sets,
            workers=workers,
            progress=progress,
        )
        return finish(partial, root, manifest, overwrite)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise


def _write(
    partial: Path,
    *,
    seed: int,
    pool_size: int | None,
    images_per_class: int,
    n_test: int,
    id_test_per_class: int,
    id_train_per_class: int,
    rule_sets: dict[str, bool] | None,
    workers: int,
    progress: bool,
) -> dict:
    """Write the class tables and shards into ``partial``; return the manifest."""
    table = glyph_classes.select_pool(glyph_classes.classify(rule_sets), pool_size, seed)
    id_table = table[table["status"] == "id"].copy()
    id_table["index"] = [glyph_classes.ID_CHARS.index(c) for c in id_table["char"]]
    id_table = id_table.sort_values("index")[["index", "id", "char", "name"]]
    ood_table = number_pool(table[table["status"] != "id"])
    labels = class_labels(id_table["id"].tolist(), ood_table)
    write_class_tables(partial, id_table, ood_table, labels)

    keys = [f"{i:04d}" for i in range(images_per_class)]
    id_tasks = [
        (
            seed,
            c,
            cid,
            [f"test{i:04d}" for i in range(id_test_per_class)] + [f"train{i:04d}" for i in range(id_train_per_class)],
        )
        for c, cid in zip(id_table["char"], id_table["id"])
    ]
    pool = ood_table[ood_table["status"] == "ood"]
    ood_tasks = [(seed, c, cid, keys) for c, cid in zip(pool["char"], pool["id"])]

    shards = []
    id_test = RollingShards(partial, "id/test", "id_test")
    id_train = RollingShards(partial, "id/train", "id_train")
    estimation = RollingShards(partial, "ood/estimation", "ood_estimation")
    with (
        worker_pool(workers) as workers_pool,
        tqdm(
            total=len(id_tasks) + len(ood_tasks), desc="rendering glyph classes", unit="class", disable=not progress
        ) as bar,
    ):
        for (_, _, cid, _), rendered in zip(id_tasks, workers_pool.imap(_render_class, id_tasks)):
            id_test.add(_samples([r for r in rendered if r[0].startswith("test")], cid, labels[cid]))
            id_train.add(_samples([r for r in rendered if r[0].startswith("train")], cid, labels[cid]))
            bar.update()
        for index, ((_, _, cid, _), rendered) in enumerate(zip(ood_tasks, workers_pool.imap(_render_class, ood_tasks))):
            split = split_class(keys, cid, seed, n_test)
            estimation.add(_samples(rendered, cid, labels[cid], set(split.estimation)))
            relpath = f"ood/test/{index // TEST_GROUP_SIZE:03d}/{cid}.tar"
            shards.append(
                write_shard(
                    partial, relpath, "ood_test", _samples(rendered, cid, labels[cid], set(split.test)), class_id=cid
                )
            )
            bar.update()
    shards = id_test.close() + id_train.close() + estimation.close() + shards

    manifest = {
        "format_version": manifest_io.FORMAT_VERSION,
        "benchmark": {
            "id": BENCHMARK_ID,
            "version": BENCHMARK_VERSION,
            "description": "Rendered characters: Latin capitals and digits (ID) vs. other DejaVu characters (OOD).",
        },
        "source": {
            "kind": "glyphs",
            "faces": list(render.FACES),
            "image_size": render.IMAGE_SIZE,
            "unicode_version": unicodedata.unidata_version,
        },
        "seed": seed,
        "split": {
            "rule": SPLIT_RULE,
            "images_per_class": images_per_class,
            "n_test": n_test,
            "id_test_per_class": id_test_per_class,
            "id_train_per_class": id_train_per_class,
        },
        "rules": {
            "descriptions": glyph_classes.RULES,
            "rule_sets": {**glyph_classes.OPTIONAL_RULE_SETS, **(rule_sets or {})},
            "thresholds": {
                "min_ink": glyph_classes.MIN_INK,
                "max_extent": glyph_classes.MAX_EXTENT,
                "ambiguous_iou": glyph_classes.AMBIGUOUS_IOU,
                "duplicate_iou": glyph_classes.DUPLICATE_IOU,
            },
            "pool_size": pool_size,
        },
        "image_ext": IMAGE_EXT,
        "max_image_pixels": MAX_IMAGE_PIXELS,
        "classes": class_counts(id_table, ood_table),
        "shards": [s.to_dict() for s in shards],
    }
    return manifest
