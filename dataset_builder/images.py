"""Building a benchmark from images by class (folders ``<root>/<class>/<image>``, or any
:class:`dataset_builder.sources.ImageSource`): streaming, parallel, resumable.

The work is cut into blocks of classes, each independent of the others: an ID block writes one
``id/test/<block>.tar``; an OOD block writes one ``ood/estimation/<block>.tar`` and one
``ood/test/<group>/<class>.tar`` per class (``group`` = the class's position among the candidates
// :data:`TEST_GROUP_SIZE`). Blocks run in a process pool; a worker holds at most one class's
images in memory, so memory does not grow with the input. A finished block leaves a marker in
``<root>.partial/.build/``; rerunning the same build skips every block whose marker and shards
are there, so an interrupted build resumes without redoing finished shards. Workers report each finished
class, so the progress bar (and its ETA) moves per class.

Per OOD class: fewer than ``min_images`` files, or fewer readable ones, removes the class with
the rule ``too_few_images``; otherwise images are read in the seeded split order
(:func:`dataset_builder.split.split_order`) and each is fully decoded; an unreadable one, or one
of more than ``max_image_pixels`` pixels (checked before decoding), is skipped and reported in the
manifest (``skipped_images``), and reading goes on until
``images_per_class`` good ones are found. Image bytes are stored as they are, never re-encoded,
all under the one field ``image_ext`` (WebDataset and ``datasets`` keep one image field per
benchmark; PIL reads an image by its content, whatever the field's name); the manifest counts the
real formats (``image_formats``).
"""

from __future__ import annotations

import hashlib
import io
import json
import multiprocessing
import re
import shutil
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TypeVar

import pandas as pd
from PIL import Image
from tqdm import tqdm

from dataset_builder import faults
from dataset_builder import manifest as manifest_io
from dataset_builder.assemble import class_counts, class_labels, finish, number_pool, partial_of, write_class_tables
from dataset_builder.benchmark import copy_entry
from dataset_builder.console import bars_off
from dataset_builder.errors import BenchmarkError
from dataset_builder.files import write_atomic
from dataset_builder.manifest import MAX_IMAGE_PIXELS
from dataset_builder.private import DEFAULT_SHARE, FOLDER, check_share, resolve_seed, with_private_part
from dataset_builder.private import SPLITS as PRIVATE_SPLITS
from dataset_builder.shards import ShardWriter, make_sample, sample_key, write_shard
from dataset_builder.sources import FolderSource, ImageSource, SourceError
from dataset_builder.split import DEFAULT_FIT_PER_CLASS, SPLIT_RULE, split_class, split_order, split_private
from dataset_builder.workers import worker_pool

TEST_GROUP_SIZE = 1000
IMAGE_EXTS = ("jpg", "jpeg", "png", "webp", "bmp", "gif", "tif", "tiff")
CLASS_ID = re.compile(r"^[A-Za-z0-9_-]+$")
STATE = ".build"
IMAGE_RULES = {
    "not_in_source": "the class has no folder in the OOD image source",
    "too_few_images": "fewer than min_images readable images in the source",
    "unreadable_source": (
        "the class's part of the source does not read (a corrupt per-class tar); manifest unreadable_sources"
    ),
}


@dataclass(frozen=True)
class ImageSettings:
    """What decides the images of a benchmark (all recorded in the manifest)."""

    seed: int = 0
    images_per_class: int = 200
    n_test: int = 50
    min_images: int = 200
    image_ext: str = "jpg"
    ood_classes_per_shard: int = 64
    id_classes_per_shard: int = 200
    max_image_pixels: int = MAX_IMAGE_PIXELS
    fit_per_class: int = DEFAULT_FIT_PER_CLASS
    private_share: float = DEFAULT_SHARE  # of each class's test images, held back (dataset_builder.private)
    private_seed: int | None = None  # None: drawn from secrets, recorded in the private manifest only

    def check(self) -> None:
        check_share(self.private_share)
        if self.fit_per_class < 1:
            raise BenchmarkError(f"fit_per_class must be at least 1, got {self.fit_per_class}")
        if not 0 < self.n_test < self.images_per_class:
            raise BenchmarkError(
                f"n_test must be between 1 and images_per_class - 1, got {self.n_test} of {self.images_per_class}"
            )
        if self.min_images < 1:
            raise BenchmarkError(f"min_images must be at least 1, got {self.min_images}")
        if self.image_ext not in IMAGE_EXTS:
            raise BenchmarkError(f"image_ext must be one of {', '.join(IMAGE_EXTS)}, got {self.image_ext!r}")
        if self.ood_classes_per_shard < 1 or self.id_classes_per_shard < 1:
            raise BenchmarkError("classes per shard must be at least 1")
        if self.max_image_pixels < 1:
            raise BenchmarkError(f"max_image_pixels must be at least 1, got {self.max_image_pixels}")


@dataclass(frozen=True)
class Block:
    """Classes written together; ``positions`` number the candidates (they name the test shard groups)."""

    kind: str  # "id", "fit" or "ood"
    number: int
    source: ImageSource  # narrowed to the block's classes
    classes: tuple[str, ...]
    positions: tuple[int, ...]
    labels: tuple[int, ...] = ()  # each class's label (:mod:`dataset_builder.assemble`)
    test_source: ImageSource | None = None  # a fit block: the ID test images, whose byte-identical copies it skips

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.number:06d}"


def class_folders(root: Path) -> list[str]:
    """Sorted names of the sub-folders of ``root``; an error when ``root`` is not a folder."""
    return FolderSource(Path(root)).classes()


def as_source(source: ImageSource | Path | str) -> ImageSource:
    """A source as it is, a path as class folders."""
    return source if isinstance(source, ImageSource) else FolderSource(Path(source))


T = TypeVar("T")
_progress = None  # where a finished class is reported: the pool's queue in a worker, the bar in the main process


def _set_progress(target) -> None:
    global _progress
    _progress = target


def _each_class(items: Iterable[T]) -> Iterator[T]:
    """``items``, reporting one finished class to the progress bar after each (so the bar and its ETA move per
    class)."""
    for item in items:
        yield item
        if _progress is not None:
            _progress.put(1)


class ImageTooLarge(ValueError):
    """An image of more pixels than the benchmark's ``max_image_pixels``."""


def image_format(data: bytes, max_pixels: int = MAX_IMAGE_PIXELS) -> str:
    """The format (``JPEG``, ``PNG``, ...) of an image that decodes completely; raises on anything else, and on an
    image of more than ``max_pixels`` pixels before decoding it."""
    with Image.open(io.BytesIO(data)) as image:
        if image.width * image.height > max_pixels:
            raise ImageTooLarge(f"{image.width}x{image.height} pixels, above max_image_pixels {max_pixels}")
        image.draft("RGB", (1, 1))  # JPEG: decode at 1/8 scale; every byte of the stream is still read
        image.load()
        return image.format


def check_class_ids(ids: list[str], what: str) -> None:
    bad = [c for c in ids if not CLASS_ID.match(c)]
    if bad:
        raise BenchmarkError(
            f"{what} class name {bad[0]!r} is not [A-Za-z0-9_-]+ (class names become shard names and sample keys)"
        )


def _read_good(
    source: ImageSource,
    names: list[str],
    class_id: str,
    wanted: int | None,
    skipped: list[dict],
    max_pixels: int,
    exclude: set[str] = frozenset(),
    excluded: list[dict] | None = None,
) -> dict[str, tuple[bytes, str]]:
    """``name -> (bytes, format)`` of the first ``wanted`` (all when None) readable images of ``names`` of at most
    ``max_pixels`` pixels, in order; an image whose sha256 is in ``exclude`` is passed over and listed in
    ``excluded``."""
    good: dict[str, tuple[bytes, str]] = {}
    for name in names:
        if wanted is not None and len(good) == wanted:
            break
        try:
            data = source.read(class_id, name)
            if exclude and hashlib.sha256(data).hexdigest() in exclude:
                excluded.append({"class_id": class_id, "file": name})
                continue
            good[name] = (data, image_format(data, max_pixels))
        except Exception as exc:
            error = re.sub(
                r"<[^>]* at 0x[0-9a-f]+>", "the file", f"{type(exc).__name__}: {exc}"
            )  # no addresses: rebuilds are identical
            skipped.append({"class_id": class_id, "file": name, "error": error[:200]})
    return good


def _checked_keys(class_id: str, names: list[str]) -> list[str]:
    """The sample keys of ``names``; two images of one key are an error."""
    keys = [sample_key(class_id, name) for name in names]
    if len(set(keys)) != len(keys):
        clash = next(k for k in keys if keys.count(k) > 1)
        raise BenchmarkError(
            f"class {class_id}: two images map to the sample key {clash}"
            " (file names differing only in dots or extension)"
        )
    return keys


def _samples(
    class_id: str, label: int, names: list[str], good: dict[str, tuple[bytes, str]], ext: str, formats: Counter
) -> list[dict]:
    keys = _checked_keys(class_id, names)
    formats.update(good[name][1] for name in names)
    return [make_sample(key, ext, good[name][0], class_id, label) for key, name in zip(keys, names)]


def _test_samples(
    class_id: str, label: int, names: list[str], good: dict, s: ImageSettings, formats: Counter
) -> tuple[list[dict], list[dict]]:
    """A class's test samples, published and held back (:func:`dataset_builder.split.split_private`); ``formats``
    counts the published ones."""
    _checked_keys(class_id, names)  # a published and a private image of one key clash too
    test = split_private(names, class_id, s.private_seed, s.private_share)
    return (
        _samples(class_id, label, test.public, good, s.image_ext, formats),
        _samples(class_id, label, test.private, good, s.image_ext, Counter()),
    )


def _id_shard(
    partial: Path,
    relpath: str,
    block: Block,
    s: ImageSettings,
    out: dict,
    what: str,
    read: Callable[[str], dict],
) -> dict[str, int]:
    """One shard of a block's ID classes (``id_test``, or ``id_fit`` for a fit block), each class's images from
    ``read(class id)``; an ID test shard's private share goes to the private part's shard of the same path. Returns
    the published images per class."""
    split = "id_fit" if block.kind == "fit" else "id_test"
    writer, private, counts = ShardWriter(partial, relpath, split), ShardWriter(partial / FOLDER, relpath, split), {}
    for cid, label in _each_class(zip(block.classes, block.labels)):
        good = read(cid)
        if not good:
            raise BenchmarkError(f"ID class {cid} has no readable {what}image in {block.source.location(cid)}")
        if split == "id_test":
            public, held = _test_samples(cid, label, sorted(good), good, s, out["formats"])
            out["private_counts"]["id_test"][cid] = len(held)
        else:
            public, held = _samples(cid, label, sorted(good), good, s.image_ext, out["formats"]), []
        for sample in public:
            writer.write(sample)
        for sample in held:
            private.write(sample)
        counts[cid] = len(public)
    out["shards"].append(writer.close())
    out["private_shards"].append(private.close())
    return counts


def _run_id(partial: Path, block: Block, s: ImageSettings, out: dict) -> None:
    def read_test(cid: str) -> dict:
        return _read_good(block.source, block.source.names(cid), cid, None, out["skipped"], s.max_image_pixels)

    counts = _id_shard(partial, f"id/test/{block.number:06d}.tar", block, s, out, "", read_test)
    out["classes"] += [{"id": cid, "num_images": n} for cid, n in counts.items()]


def _run_fit(partial: Path, block: Block, s: ImageSettings, out: dict) -> None:
    source = block.source

    def read_fit(cid: str) -> dict:
        test = block.test_source
        tests = {hashlib.sha256(test.read(cid, n)).hexdigest() for n in test.names(cid)}
        return _read_good(
            source,
            split_order(source.names(cid), cid, s.seed),
            cid,
            s.fit_per_class,
            out["skipped"],
            s.max_image_pixels,
            tests,
            out["duplicates"],
        )

    counts = _id_shard(partial, f"id/fit/{block.number:06d}.tar", block, s, out, "training ", read_fit)
    out["fit"] += [{"id": cid, "num_fit_images": n} for cid, n in counts.items()]


def _run_ood(partial: Path, block: Block, s: ImageSettings, out: dict) -> None:
    source, classes = block.source, out["classes"]
    estimation = ShardWriter(partial, f"ood/estimation/{block.number:06d}.tar", "ood_estimation")
    for cid, position, label in _each_class(zip(block.classes, block.positions, block.labels)):
        try:
            names = source.names(cid)
        except SourceError as exc:
            out["unreadable"].append({"class_id": cid, "error": str(exc)[:300]})
            classes.append({"id": cid, "num_images": 0, "rule": "unreadable_source"})
            continue
        good = {}
        if len(names) >= s.min_images:
            wanted = max(s.images_per_class, s.min_images)
            good = _read_good(source, split_order(names, cid, s.seed), cid, wanted, out["skipped"], s.max_image_pixels)
        if len(good) < s.min_images:
            classes.append({"id": cid, "num_images": 0, "rule": "too_few_images"})
            continue
        split = split_class(good, cid, s.seed, s.n_test, s.images_per_class)
        public, held = _test_samples(cid, label, split.test, good, s, out["formats"])
        relpath = f"ood/test/{position // TEST_GROUP_SIZE:03d}/{cid}.tar"
        out["shards"].append(write_shard(partial, relpath, "ood_test", public, class_id=cid))
        if held:
            out["private_shards"].append(write_shard(partial / FOLDER, relpath, "ood_test", held, class_id=cid))
        out["private_counts"]["ood_test"][cid] = len(held)
        for sample in _samples(cid, label, split.estimation, good, s.image_ext, out["formats"]):
            estimation.write(sample)
        classes.append({"id": cid, "num_images": len(public) + len(split.estimation), "rule": None})
    out["shards"].insert(0, estimation.close())


def run_block(task: tuple[Path, Block, ImageSettings]) -> dict:
    """Write one block's shards (its private ones in ``private/``), then its marker; return what the manifest and
    class tables need from it."""
    partial, block, s = task
    out = {
        "block": block.name,
        **{key: [] for key in ("shards", "private_shards", "classes", "skipped", "fit", "duplicates", "unreadable")},
        "formats": Counter(),
        "private_counts": {split: {} for split in PRIVATE_SPLITS},
    }
    {"id": _run_id, "fit": _run_fit, "ood": _run_ood}[block.kind](partial, block, s, out)
    block.source.close()
    result = {
        **out,
        "shards": [i.to_dict() for i in out["shards"] if i is not None],
        "private_shards": [i.to_dict() for i in out["private_shards"] if i is not None],
        "formats": dict(out["formats"]),
    }
    marker = partial / STATE / f"{block.name}.json"
    write_atomic(marker, json.dumps(result, sort_keys=True).encode())
    faults.point("block-done", marker)
    return result


def check_fit_source(fit_source: ImageSource, id_ids: list[str]) -> None:
    """Every ID class has training images, and there is no other class."""
    folders = fit_source.classes()
    missing = [c for c in id_ids if c not in folders]
    if missing:
        raise BenchmarkError(
            f"{len(missing)} ID classes are not among the {fit_source.class_units} of the training images "
            f"{fit_source}, e.g. {missing[0]}"
        )
    extra = sorted(set(folders) - set(id_ids))
    if extra:
        raise BenchmarkError(
            f"{fit_source} has {len(extra)} {fit_source.class_units} that are not ID classes, e.g. {extra[0]!r}"
        )


def fit_entry(settings: ImageSettings, fitted: dict[str, int], ordered: list[dict]) -> dict:
    """The manifest's ``fit``: how the ``id_fit`` split was drawn, the classes that had fewer images, the copies
    skipped."""
    duplicates = sorted((d for r in ordered for d in r.get("duplicates", [])), key=lambda d: (d["class_id"], d["file"]))
    return {
        "split": "id_fit",
        "source": "ID training images",
        "per_class": settings.fit_per_class,
        "seed": settings.seed,
        "rule": "per class, the first fit_per_class readable images in the seeded split order, skipping byte-identical "
        "copies of the class's ID test images",
        "num_images": sum(fitted.values()),
        "shards": [sh["path"] for r in ordered for sh in r["shards"] if sh["split"] == "id_fit"],
        "short_classes": {c: n for c, n in sorted(fitted.items()) if n < settings.fit_per_class},
        "duplicates_of_test": {"count": len(duplicates), "images": duplicates},
    }


def finished_block(partial: Path, block: Block) -> dict | None:
    """The result of a block finished by an earlier run (marker present, shards and their Parquet copies there with
    their sizes), else None."""
    marker = partial / STATE / f"{block.name}.json"
    if not marker.is_file():
        return None
    result = json.loads(marker.read_text())
    written = [(partial, s) for s in result["shards"]] + [(partial / FOLDER, s) for s in result["private_shards"]]
    for folder, shard in written:
        for file in (shard, *copy_entry(shard)):  # the shard and its Parquet copy
            path = folder / file["path"]
            if not path.is_file() or path.stat().st_size != file["num_bytes"]:
                return None
    return result


def _blocks(
    kind: str,
    source: ImageSource,
    ids: list[str],
    size: int,
    labels: dict[str, int],
    test_source: ImageSource | None = None,
) -> list[Block]:
    blocks = []
    for n, start in enumerate(range(0, len(ids), size)):
        classes = tuple(ids[start : start + size])
        blocks.append(
            Block(
                kind,
                n,
                source.subset(classes),
                classes,
                tuple(range(start, start + len(classes))),
                tuple(labels[c] for c in classes),
                None if test_source is None else test_source.subset(classes),
            )
        )
    return blocks


def _open_partial(root: Path, config: dict, overwrite: bool) -> Path:
    """The ``<root>.partial`` folder to build in: fresh, or an interrupted build of the same config to resume
    (a complete build that was stopped before its swap is built again)."""
    partial = partial_of(root)
    saved = partial / STATE / "config.json"
    wanted = json.dumps(config, sort_keys=True, indent=1)
    if (partial / "classes").is_dir() and not (partial / STATE).exists():  # finished, then stopped before its swap
        shutil.rmtree(partial)
    if partial.exists():
        if not saved.is_file() or saved.read_text() != wanted:
            raise BenchmarkError(
                f"{partial} holds an interrupted build with other inputs or options;"
                " delete it, or rerun with the same ones"
            )
        return partial
    (partial / STATE).mkdir(parents=True)
    saved.write_text(wanted)
    return partial


class _Bar:
    def __init__(self, bar: tqdm):
        self.bar = bar

    def put(self, n: int) -> None:
        self.bar.update(n)


def _run(tasks: list[tuple[Path, Block, ImageSettings]], workers: int, bar: tqdm) -> dict[str, dict]:
    """Run the blocks (in this process when ``workers`` <= 1), the bar moving per class; a failed block stops the build
    with its error."""
    results = {}
    if workers <= 1:
        _set_progress(_Bar(bar))
        try:
            for task in tasks:
                result = run_block(task)
                results[result["block"]] = result
        finally:
            _set_progress(None)
        return results
    if not tasks:
        return results
    done_classes = multiprocessing.get_context("spawn").SimpleQueue()
    with worker_pool(workers, _set_progress, (done_classes,)) as pool:
        finished = pool.imap_unordered(run_block, tasks)
        while len(results) < len(tasks):
            try:
                result = finished.next(timeout=0.5)
                results[result["block"]] = result
            except multiprocessing.TimeoutError:
                pass
            while not done_classes.empty():
                bar.update(done_classes.get())
    while not done_classes.empty():
        bar.update(done_classes.get())
    return results


def _check_pool_left(partial: Path, ood_table: pd.DataFrame, candidates: int, needed: int, min_images: int) -> None:
    """Refuse (and remove the finished blocks: they cannot become a benchmark) a pool left with fewer than ``needed``
    classes after the image rules."""
    kept = int((ood_table["status"] == "ood").sum())
    if kept >= needed:
        return
    shutil.rmtree(partial, ignore_errors=True)
    removed = ood_table["rule"].value_counts()
    why = f"{removed.get('too_few_images', 0)} with fewer than --min-images {min_images} readable images"
    if removed.get("unreadable_source", 0):
        why += f", {removed['unreadable_source']} unreadable"
    raise BenchmarkError(
        f"{kept} OOD classes left of the {candidates} in the source ({why}); the benchmark needs at least {needed}: "
        "lower --min-images or give more classes (nothing was written)"
    )


def _with_private_seed(partial: Path, settings: ImageSettings) -> ImageSettings:
    """``settings`` with a private seed when its share is above 0: the one given, else the one an interrupted build in
    ``partial`` drew (so that it resumes), else a new one from :func:`dataset_builder.private.resolve_seed`."""
    if settings.private_share == 0 or settings.private_seed is not None:
        return settings
    try:
        drawn = json.loads((partial / STATE / "config.json").read_text())["settings"]["private_seed"]
    except (OSError, ValueError, KeyError, TypeError):
        drawn = None
    return replace(settings, private_seed=resolve_seed(settings.private_share, drawn))


def _with_private_part(partial: Path, manifest: dict, settings: ImageSettings, ordered: list[dict]) -> dict:
    """The manifest with its ``private`` entry, the private part's manifest written (nothing when the share is 0)."""
    shards = [s for r in ordered for s in r["private_shards"]]
    return with_private_part(
        partial,
        manifest,
        share=settings.private_share,
        seed=settings.private_seed,
        counts={
            split: {c: n for r in ordered for c, n in r["private_counts"][split].items()} for split in PRIVATE_SPLITS
        },
        shards=[s for split in PRIVATE_SPLITS for s in shards if s["split"] == split],
    )


def _checked_sources(
    id_source: ImageSource | Path,
    id_ids: list[str],
    ood_source: ImageSource | Path,
    candidates: list[str],
    fit_source: ImageSource | Path | None,
) -> tuple[ImageSource, ImageSource, ImageSource | None]:
    """The three sources as :class:`ImageSource`, after checking the class ids, that the ID source holds every ID
    class and that the fit source fits the ID classes."""
    check_class_ids(id_ids, "ID")
    check_class_ids(candidates, "OOD")
    id_source, ood_source = as_source(id_source), as_source(ood_source)
    fit_source = None if fit_source is None else as_source(fit_source)
    id_present = set(id_source.classes())
    missing_id = [c for c in id_ids if c not in id_present]
    if missing_id:
        raise BenchmarkError(
            f"{len(missing_id)} ID classes are not among the {id_source.class_units} of the ID source {id_source}, "
            f"e.g. {missing_id[0]}"
        )
    if fit_source is not None:
        check_fit_source(fit_source, id_ids)
    return id_source, ood_source, fit_source


def _build_config(settings: ImageSettings, description: dict, id_ids: list[str], in_source: list[str], sources) -> dict:
    """What a build is resumed by: the format, the settings, the description, the classes and the sources."""
    return {
        "format_version": manifest_io.FORMAT_VERSION,  # a build of another format is not resumed
        "settings": asdict(settings),
        "description": description,
        "id": id_ids,
        "ood": in_source,
        "sources": [source.identity() for source in sources if source is not None],
    }


def _run_blocks(
    partial: Path, blocks: list[Block], settings: ImageSettings, workers: int, progress: bool
) -> list[dict]:
    """The results of ``blocks`` in their order: those an earlier run finished, the others run now."""
    results = {b.name: r for b in blocks if (r := finished_block(partial, b)) is not None}
    todo = [(partial, b, settings) for b in blocks if b.name not in results]
    with tqdm(
        total=sum(len(b.classes) for b in blocks),
        initial=sum(len(b.classes) for b in blocks if b.name in results),
        desc="building",
        unit="class",
        disable=bars_off(progress),
    ) as bar:
        results.update(_run(todo, workers, bar))
    return [results[b.name] for b in blocks]


def _with_outcome(
    id_table: pd.DataFrame, ood_table: pd.DataFrame, ordered: list[dict], not_in_source: set[str], fitted: dict | None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The class tables with each class's image counts, and the OOD classes the image rules removed marked so."""
    outcome = {c["id"]: c for r in ordered for c in r["classes"]}
    id_table = id_table.assign(num_images=[outcome[c]["num_images"] for c in id_table["id"]])
    if fitted is not None:
        id_table = id_table.assign(num_fit_images=[fitted[c] for c in id_table["id"]])
    ood_table = ood_table.reset_index(drop=True).copy()
    ood_table["num_images"] = [outcome[c]["num_images"] if c in outcome else 0 for c in ood_table["id"]]
    ood_table.loc[ood_table["id"].isin(not_in_source), ["status", "rule"]] = ["removed", "not_in_source"]
    for rule in ("too_few_images", "unreadable_source"):
        removed = ood_table["id"].map(lambda c, rule=rule: c in outcome and outcome[c].get("rule") == rule)
        ood_table.loc[removed, ["status", "rule"]] = ["removed", rule]
    return id_table, number_pool(ood_table)


def _manifest(
    description: dict,
    settings: ImageSettings,
    ordered: list[dict],
    tables: tuple[pd.DataFrame, pd.DataFrame],
    fitted: dict | None,
) -> dict:
    """The public manifest of the blocks' results ``ordered`` and the final class ``tables`` (ID, OOD)."""
    shards = [s for r in ordered for s in r["shards"]]
    shards = [s for split in ("id_test", "id_fit", "ood_estimation", "ood_test") for s in shards if s["split"] == split]
    skipped = sorted((s for r in ordered for s in r["skipped"]), key=lambda s: (s["class_id"], s["file"]))
    unreadable = sorted((u for r in ordered for u in r.get("unreadable", [])), key=lambda u: u["class_id"])
    formats = sum((Counter(r["formats"]) for r in ordered), Counter())
    return {
        "format_version": manifest_io.FORMAT_VERSION,
        **description,
        "rules": {**description.get("rules", {}), "image_rules": IMAGE_RULES},
        "seed": settings.seed,
        "split": {
            "rule": SPLIT_RULE,
            "images_per_class": settings.images_per_class,
            "n_test": settings.n_test,
            "min_images": settings.min_images,
        },
        "image_ext": settings.image_ext,
        "max_image_pixels": settings.max_image_pixels,
        "image_formats": dict(sorted(formats.items())),
        "skipped_images": {"count": len(skipped), "images": skipped},
        **({"unreadable_sources": {"count": len(unreadable), "classes": unreadable}} if unreadable else {}),
        **({"fit": fit_entry(settings, fitted, ordered)} if fitted is not None else {}),
        "classes": class_counts(*tables),
        "shards": shards,
    }


def _swap_in(partial: Path, root: Path, manifest: dict, overwrite: bool) -> str:
    """Move the finished build into ``root``; return its manifest sha256 (a failed swap leaves nothing behind)."""
    shutil.rmtree(partial / STATE)
    try:
        return finish(partial, root, manifest, overwrite)
    except BaseException:  # a finished build cannot resume: nothing is left behind
        shutil.rmtree(partial, ignore_errors=True)
        raise


def build_from_folders(
    root: str | Path,
    *,
    id_source: ImageSource | Path,
    id_table: pd.DataFrame,
    ood_source: ImageSource | Path,
    ood_table: pd.DataFrame,
    settings: ImageSettings,
    description: dict,
    workers: int = 2,
    progress: bool = True,
    overwrite: bool = False,
    fit_source: ImageSource | Path | None = None,
    min_ood_classes: int = 1,
) -> str:
    """Build a benchmark under ``root``; return its manifest sha256.

    Each source is an :class:`dataset_builder.sources.ImageSource` or a folder of class folders.
    ``id_table``: the ID classes (columns ``index``, ``id``, ...), each a class of ``id_source``.
    ``ood_table``: every OOD candidate in pool order (columns ``id``, ``status``, ``rule``,
    ``collides_with``, ...); rows with status ``ood`` are read from ``ood_source``, the others keep
    their removal reason. ``fit_source`` (optional): ID training images in ``<class>/`` folders, of which a seeded
    ``settings.fit_per_class`` per class become the ``id_fit`` split (byte-identical copies of ID test images passed
    over and listed). ``description``: the manifest's ``benchmark``, ``source`` and ``rules``. The caller
    checks ``root`` first (:func:`dataset_builder.assemble.check_target`); the swap checks it again. Fewer than
    ``min_ood_classes`` OOD classes left after the image rules is an error, and nothing is written.
    """
    settings.check()
    root = Path(root)
    settings = _with_private_seed(partial_of(root), settings)
    id_ids = id_table.sort_values("index")["id"].tolist()
    candidates = ood_table.loc[ood_table["status"] == "ood", "id"].tolist()
    id_source, ood_source, fit_source = _checked_sources(id_source, id_ids, ood_source, candidates, fit_source)
    ood_present = set(ood_source.classes())
    in_source = [c for c in candidates if c in ood_present]
    config = _build_config(settings, description, id_ids, in_source, (id_source, ood_source, fit_source))
    partial = _open_partial(root, config, overwrite)

    labels = class_labels(id_ids, ood_table)
    blocks = _blocks("id", id_source, id_ids, settings.id_classes_per_shard, labels)
    if fit_source is not None:
        blocks += _blocks("fit", fit_source, id_ids, settings.id_classes_per_shard, labels, id_source)
    blocks += _blocks("ood", ood_source, in_source, settings.ood_classes_per_shard, labels)
    ordered = _run_blocks(partial, blocks, settings, workers, progress)

    fitted = {c["id"]: c["num_fit_images"] for r in ordered for c in r.get("fit", [])}
    fitted = fitted if fit_source is not None else None
    not_in_source = set(candidates) - set(in_source)
    id_table, ood_table = _with_outcome(id_table, ood_table, ordered, not_in_source, fitted)
    _check_pool_left(partial, ood_table, len(in_source), min_ood_classes, settings.min_images)
    write_class_tables(partial, id_table, ood_table, labels)
    manifest = _manifest(description, settings, ordered, (id_table, ood_table), fitted)
    return _swap_in(partial, root, _with_private_part(partial, manifest, settings, ordered), overwrite)
