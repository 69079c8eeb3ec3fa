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
from dataset_builder.console import bars_off
from dataset_builder.glyphs import classes as glyph_classes
from dataset_builder.glyphs import render
from dataset_builder.glyphs.settings import BENCHMARK_ID, BENCHMARK_VERSION
from dataset_builder.manifest import MAX_IMAGE_PIXELS
from dataset_builder.private import DEFAULT_SHARE, FOLDER, resolve_seed, with_private_part
from dataset_builder.shards import RollingShards, ShardInfo, make_sample, sample_key, write_shard
from dataset_builder.split import SPLIT_RULE, ClassSplit, PrivateSplit, split_class, split_private
from dataset_builder.workers import worker_pool

IMAGE_EXT = "png"
TEST_GROUP_SIZE = 1000
PRIVATE_STYLE = "private-image/{}"  # a private image's style seed: the private seed, never the published one
PRIVATE_RULE = (
    "per class, order the test images by sha256(f'private/{seed}/{class_id}/{image_key}') with the benchmark's seed; "
    "the first floor(n_test_images * share) are private, rendered with the style "
    "style_for(f'private-image/{private_seed}', class_id, image_key) instead of the published seed's"
)


def _render_class(task: tuple[str, str, list[tuple[int | str, str]]]) -> list[tuple[str, bytes]]:
    char, cid, seeded_keys = task
    return [(key, render.render_png(char, render.style_for(seed, cid, key))) for seed, key in seeded_keys]


def _samples(rendered: dict[str, bytes], keys: list[str], cid: str, label: int) -> list[dict]:
    return [make_sample(sample_key(cid, key), IMAGE_EXT, rendered[key], cid, label) for key in keys]


def _seeded(seed: int, private_seed: int | None, test: PrivateSplit, others: list[str]) -> list[tuple[int | str, str]]:
    """What to render for a class: its public test images and ``others`` from ``seed``, its private test images from
    the private seed (so they cannot be rendered from the published seed)."""
    return [(seed, key) for key in test.public + others] + [
        (PRIVATE_STYLE.format(private_seed), key) for key in test.private
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
    private_share: float = DEFAULT_SHARE,
    private_seed: int | None = None,
    workers: int = 2,
    progress: bool = True,
    overwrite: bool = False,
) -> str:
    """Render and write the whole benchmark beside ``root``, then swap it in (an existing benchmark only with
    ``overwrite``); return the manifest sha256. A failed build leaves nothing behind. ``private_share`` of each
    class's ID and OOD test images are held back in the private part (:mod:`dataset_builder.private`): which ones
    follows from ``seed`` (so the published part is the same for every private seed), their images are rendered from
    ``private_seed`` (drawn from :mod:`secrets` when None), so they cannot be rendered from what is published. None
    are by default here; the embedded benchmark and ``cood-dataset glyphs`` hold back ``settings.DEFAULTS``' share."""
    root = Path(root)
    private_seed = resolve_seed(private_share, private_seed)
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
            private=(private_share, private_seed),
            workers=workers,
            progress=progress,
        )
        return finish(partial, root, manifest, overwrite)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise


def _tables(partial: Path, seed: int, pool_size: int | None, rule_sets: dict[str, bool] | None):
    """Write the class tables; return the ID table, the OOD table and the labels."""
    table = glyph_classes.select_pool(glyph_classes.classify(rule_sets), pool_size, seed)
    id_table = table[table["status"] == "id"].copy()
    id_table["index"] = [glyph_classes.ID_CHARS.index(c) for c in id_table["char"]]
    id_table = id_table.sort_values("index")[["index", "id", "char", "name"]]
    ood_table = number_pool(table[table["status"] != "id"])
    labels = class_labels(id_table["id"].tolist(), ood_table)
    write_class_tables(partial, id_table, ood_table, labels)
    return id_table, ood_table, labels


class _Writers:
    """The shard writers of a glyph benchmark, public and private, fed one rendered class at a time."""

    def __init__(self, partial: Path):
        self.partial = partial
        self.id_test = RollingShards(partial, "id/test", "id_test")
        self.id_train = RollingShards(partial, "id/train", "id_train")
        self.estimation = RollingShards(partial, "ood/estimation", "ood_estimation")
        self.private_id_test = RollingShards(partial / FOLDER, "id/test", "id_test")
        self.ood_test: list[ShardInfo] = []
        self.private_ood_test: list[ShardInfo] = []
        self.private_counts: dict[str, dict[str, int]] = {"id_test": {}, "ood_test": {}}

    def add_id(self, cid: str, label: int, images: dict[str, bytes], test: PrivateSplit, train: list[str]) -> None:
        self.id_test.add(_samples(images, test.public, cid, label))
        self.id_train.add(_samples(images, train, cid, label))
        self.private_id_test.add(_samples(images, test.private, cid, label))
        self.private_counts["id_test"][cid] = len(test.private)

    def add_ood(
        self, cid: str, label: int, images: dict[str, bytes], split: ClassSplit, test: PrivateSplit, relpath: str
    ):
        self.estimation.add(_samples(images, split.estimation, cid, label))
        public = _samples(images, test.public, cid, label)
        self.ood_test.append(write_shard(self.partial, relpath, "ood_test", public, class_id=cid))
        if test.private:
            private = _samples(images, test.private, cid, label)
            self.private_ood_test.append(write_shard(self.partial / FOLDER, relpath, "ood_test", private, class_id=cid))
        self.private_counts["ood_test"][cid] = len(test.private)

    def close(self) -> tuple[list[ShardInfo], list[ShardInfo]]:
        """The public shards and the private ones, in manifest order."""
        public = self.id_test.close() + self.id_train.close() + self.estimation.close() + self.ood_test
        return public, self.private_id_test.close() + self.private_ood_test


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
    private: tuple[float, int | None],
    workers: int,
    progress: bool,
) -> dict:
    """Write the class tables, the shards and the private part into ``partial``; return the manifest."""
    share, private_seed = private
    id_table, ood_table, labels = _tables(partial, seed, pool_size, rule_sets)
    train = [f"train{i:04d}" for i in range(id_train_per_class)]
    id_ids, pool = id_table["id"].tolist(), ood_table[ood_table["status"] == "ood"]
    id_tests = {
        cid: split_private([f"test{i:04d}" for i in range(id_test_per_class)], cid, seed, share) for cid in id_ids
    }
    keys = [f"{i:04d}" for i in range(images_per_class)]
    splits = {cid: split_class(keys, cid, seed, n_test) for cid in pool["id"]}
    ood_tests = {cid: split_private(split.test, cid, seed, share) for cid, split in splits.items()}
    tasks = [(c, cid, _seeded(seed, private_seed, id_tests[cid], train)) for c, cid in zip(id_table["char"], id_ids)]
    tasks += [
        (c, cid, _seeded(seed, private_seed, ood_tests[cid], splits[cid].estimation))
        for c, cid in zip(pool["char"], pool["id"])
    ]
    writers = _Writers(partial)
    with (
        worker_pool(workers) as workers_pool,
        tqdm(total=len(tasks), desc="rendering glyph classes", unit="class", disable=bars_off(progress)) as bar,
    ):
        for index, ((_, cid, _), images) in enumerate(zip(tasks, workers_pool.imap(_render_class, tasks))):
            if index < len(id_ids):
                writers.add_id(cid, labels[cid], dict(images), id_tests[cid], train)
            else:
                relpath = f"ood/test/{(index - len(id_ids)) // TEST_GROUP_SIZE:03d}/{cid}.tar"
                writers.add_ood(cid, labels[cid], dict(images), splits[cid], ood_tests[cid], relpath)
            bar.update()
    shards, private_shards = writers.close()
    manifest = _manifest(seed, pool_size, images_per_class, n_test, id_test_per_class, id_train_per_class, rule_sets)
    manifest["classes"] = class_counts(id_table, ood_table)
    manifest["shards"] = [s.to_dict() for s in shards]
    return with_private_part(
        partial,
        manifest,
        share=share,
        seed=private_seed,
        counts=writers.private_counts,
        shards=[s.to_dict() for s in private_shards],
        rule=PRIVATE_RULE,
    )


def _manifest(
    seed: int,
    pool_size: int | None,
    images_per_class: int,
    n_test: int,
    id_test_per_class: int,
    id_train_per_class: int,
    rule_sets: dict[str, bool] | None,
) -> dict:
    """The manifest, without its classes and shards."""
    return {
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
    }
