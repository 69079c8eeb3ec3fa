"""``cood-dataset``: build benchmarks (thin command line over the builder's Python API)."""

from __future__ import annotations

from pathlib import Path

import typer

from dataset_builder import __version__
from dataset_builder.console import make_app, require_torch_extra, run_app

require_torch_extra("cood-dataset")  # before the imports below, which need it
from dataset_builder.errors import NOTHING_WRITTEN, BenchmarkError, on_interrupt  # noqa: E402
from dataset_builder.glyphs.settings import DEFAULTS as GLYPHS  # noqa: E402
from dataset_builder.imagenet_classes import DEFAULT_RULE_SETS  # noqa: E402
from dataset_builder.levels import DEFAULT_NUM_LEVELS  # noqa: E402
from dataset_builder.private import DEFAULT_SHARE  # noqa: E402
from dataset_builder.split import DEFAULT_FIT_PER_CLASS, MAX_PRIVATE_SHARE  # noqa: E402

app = make_app("Build C-OOD benchmarks as WebDataset shards.", f"cood-dataset {__version__}")
# the options the image builders (imagenet, folder) share, declared once
MIN_IMAGES = typer.Option(200, help="Classes with fewer readable images are removed.")
IMAGES_PER_CLASS = typer.Option(200, help="Images kept per OOD class.")
TEST_FRACTION = typer.Option(0.25, help="Share of a class's images in the test split.")
SEED = typer.Option(0, help="Seed of the split.")
FIT_PER_CLASS = typer.Option(
    DEFAULT_FIT_PER_CLASS,
    help="id_fit images per ID class (with --train; docs/benchmark-format.md: why this default).",
)
OVERWRITE = typer.Option(False, help="Replace an existing benchmark folder.")
PRIVATE_SHARE = typer.Option(
    DEFAULT_SHARE,
    min=0.0,
    max=MAX_PRIVATE_SHARE,
    help="Share of each class's ID and OOD test images held back in the private part private/, never published "
    "(e.g. 0.15; docs/benchmark-format.md: the private part).",
)
PRIVATE_SEED = typer.Option(
    None,
    show_default="drawn from secrets, written only into private/manifest.json",
    help="Seed choosing the private images (keep it secret: it is not in the public manifest).",
)


@app.command()
def glyphs(
    out: Path | None = typer.Argument(
        None, show_default="the embedded benchmark's cache folder", help="Output folder."
    ),
    seed: int = typer.Option(0, help="Seed of the split, the pool sampling and the image styles."),
    pool_size: int = typer.Option(400, help="OOD classes to keep (seeded sample of the survivors); 0 keeps all."),
    images_per_class: int = typer.Option(200, help="Images per OOD class."),
    n_test: int = typer.Option(50, help="Test images per OOD class (the rest estimate the class)."),
    id_test_per_class: int = typer.Option(50, help="ID test images per ID class."),
    id_train_per_class: int = typer.Option(300, help="ID training images per ID class (for training example models)."),
    visually_ambiguous: bool = typer.Option(True, help="Remove characters that draw like an ID character."),
    private_share: float = typer.Option(
        GLYPHS["private_share"],
        min=0.0,
        max=MAX_PRIVATE_SHARE,
        help="Share of each class's ID and OOD test images held back in the private part private/, never published "
        "(docs/benchmark-format.md: the private part).",
    ),
    private_seed: int | None = typer.Option(
        None,
        show_default="drawn from secrets, written only into private/manifest.json",
        help="Seed rendering the private images, chosen by --seed (keep it secret: it is not in the public manifest).",
    ),
    workers: int = typer.Option(2, help="Rendering processes."),
    overwrite: bool = typer.Option(False, help="Replace an existing benchmark in OUT."),
) -> None:
    """Build the embedded glyph benchmark (byte-identical for the same options)."""
    from dataset_builder.embedded import embedded_benchmark
    from dataset_builder.glyphs.build import build
    from dataset_builder.manifest import load_manifest

    options = dict(
        seed=seed,
        pool_size=pool_size or None,
        images_per_class=images_per_class,
        n_test=n_test,
        id_test_per_class=id_test_per_class,
        id_train_per_class=id_train_per_class,
        private_share=private_share,
        private_seed=private_seed,
    )
    rule_sets = {"visually_ambiguous": visually_ambiguous}
    if out is None and overwrite:
        raise BenchmarkError("--overwrite needs an OUT folder (the cache is built once per set of options)")
    if out is None:
        out = embedded_benchmark("glyphs", rule_sets=rule_sets, workers=workers, **options)
    else:
        build(out, rule_sets=rule_sets, workers=workers, overwrite=overwrite, **options)
    _summary(out, load_manifest(out)[1])


@app.command()
def imagenet(
    out: Path = typer.Argument(..., help="Output folder."),
    imagenet21k: str = typer.Option(
        ...,
        "--imagenet21k",
        help="ImageNet-21K (fall11 or winter21): the release tar of per-class tars, "
        "its folder of <wnid>.tar files, class folders <wnid>/<images>, "
        "or hf://datasets/<repo>[@<revision>][/<shard glob>].",
    ),
    val: str = typer.Option(
        ...,
        "--val",
        help="ImageNet-1K validation: class folders <wnid>/<images>, the official tar "
        "ILSVRC2012_img_val.tar (with --val-labels), or hf://datasets/<repo>[@<revision>][/<shard glob>].",
    ),
    val_labels: Path | None = typer.Option(
        None,
        "--val-labels",
        help="Labels of the validation tar: the devkit ILSVRC2012_devkit_t12.tar.gz or Kaggle's LOC_val_solution.csv.",
    ),
    pool: str = typer.Option(
        "imagenet21k", help="Class list of the source: imagenet21k (21,843 ids) or imagenet22k (fall11, 21,841)."
    ),
    rule_set: list[str] = typer.Option(
        list(DEFAULT_RULE_SETS), help="Rule sets to switch on (repeat): visually_ambiguous, biologically_distinct."
    ),
    no_rule_sets: bool = typer.Option(False, "--no-rule-sets", help="Switch every optional rule set off."),
    id_classes: int | None = typer.Option(
        None,
        "--id-classes",
        metavar="N",
        show_default="all 1,000",
        help="Build a small benchmark of N ID classes: N of the ImageNet-1K classes in --val, picked with --seed.",
    ),
    levels: int = typer.Option(
        DEFAULT_NUM_LEVELS,
        "--levels",
        help="Severity levels the benchmark must give (the harness's --levels): a pool too small for them is warned "
        "about before any image is read (they need |ID| + levels - 1 OOD classes).",
    ),
    min_images: int = MIN_IMAGES,
    images_per_class: int = IMAGES_PER_CLASS,
    test_fraction: float = TEST_FRACTION,
    seed: int = SEED,
    train: str | None = typer.Option(
        None,
        "--train",
        help="ImageNet-1K training images (<wnid>/ folders, ILSVRC2012_img_train.tar, "
        "or hf://datasets/...): a seeded id_fit split for detectors that fit.",
    ),
    fit_per_class: int = FIT_PER_CLASS,
    private_share: float = PRIVATE_SHARE,
    private_seed: int | None = PRIVATE_SEED,
    workers: int = typer.Option(2, help="Processes reading images (and indexing Hub shards)."),
    overwrite: bool = OVERWRITE,
) -> None:
    """Build the ImageNet C-OOD benchmark (ImageNet-1K val vs. ImageNet-21K) from folders, the release tars or Hub
    shards; rerun to resume an interrupted build."""
    from dataset_builder.imagenet import build_imagenet, removal_lines
    from dataset_builder.manifest import load_manifest

    on_interrupt(lambda: _kept_for_resuming(out))
    sha = build_imagenet(
        out,
        imagenet21k,
        val,
        val_labels=val_labels,
        pool=pool,
        rule_sets=() if no_rule_sets else rule_set,
        min_images=min_images,
        images_per_class=images_per_class,
        test_fraction=test_fraction,
        seed=seed,
        id_classes=id_classes,
        num_levels=levels,
        workers=workers,
        overwrite=overwrite,
        train=train,
        fit_per_class=fit_per_class,
        private_share=private_share,
        private_seed=private_seed,
    )
    _summary(out, sha)
    for line in removal_lines(load_manifest(out)[0]):
        typer.echo(line)


@app.command()
def folder(
    out: Path = typer.Argument(..., help="Output folder."),
    id_dir: Path = typer.Option(..., "--id", help="ID test images: <class>/<image>."),
    ood_dir: Path = typer.Option(..., "--ood", help="OOD candidate classes: <class>/<image>."),
    name: str = typer.Option("custom", help="Benchmark id."),
    version: str = typer.Option("1.0.0", help="Benchmark version (the publish tag)."),
    exclude: Path | None = typer.Option(None, help="CSV ood_class,id_class,why of OOD classes to remove."),
    min_images: int = MIN_IMAGES,
    images_per_class: int = IMAGES_PER_CLASS,
    test_fraction: float = TEST_FRACTION,
    image_ext: str = typer.Option("jpg", help="The image field of every sample (bytes are stored as they are)."),
    seed: int = SEED,
    train: Path | None = typer.Option(
        None, "--train", help="ID training images in <class>/ folders: a seeded id_fit split for detectors that fit."
    ),
    fit_per_class: int = FIT_PER_CLASS,
    private_share: float = PRIVATE_SHARE,
    private_seed: int | None = PRIVATE_SEED,
    workers: int = typer.Option(2, help="Processes reading images."),
    overwrite: bool = OVERWRITE,
    license: str | None = typer.Option(
        None, help="The images' licence: a Hub licence id such as cc-by-4.0, or a URL (unknown when not given)."
    ),
) -> None:
    """Build a C-OOD benchmark from any pair of image folders; rerun to resume an interrupted build."""
    from dataset_builder.folder import build_folder, read_exclusions
    from dataset_builder.imagenet import n_test_of
    from dataset_builder.images import ImageSettings

    on_interrupt(lambda: _kept_for_resuming(out))
    settings = ImageSettings(
        seed=seed,
        images_per_class=images_per_class,
        n_test=n_test_of(images_per_class, test_fraction),
        min_images=min_images,
        image_ext=image_ext,
        fit_per_class=fit_per_class,
        private_share=private_share,
        private_seed=private_seed,
    )
    sha = build_folder(
        out,
        id_dir,
        ood_dir,
        name=name,
        version=version,
        exclusions=read_exclusions(exclude) if exclude else None,
        settings=settings,
        workers=workers,
        overwrite=overwrite,
        license=license,
        train=train,
    )
    _summary(out, sha)


@app.command()
def levels(
    benchmark: Path = typer.Argument(..., help="Benchmark folder."),
    level_file: Path = typer.Argument(
        ..., help="A level manifest written by the harness (levels/<model>__<kappa>.parquet)."
    ),
    model: str = typer.Option(..., help="Model name."),
    kappa: str = typer.Option(..., help="Confidence function."),
    reference: bool = typer.Option(True, help="Give the pair a config of its own in the dataset card."),
) -> None:
    """Add a (model, kappa) severity-level manifest to a benchmark and rewrite its dataset card; print the
    datasets.load_dataset call that loads a level, locally and once published."""
    from dataset_builder.card import add_levels, level_calls

    typer.echo(add_levels(benchmark, level_file, model, kappa, reference=reference))
    typer.echo("\n".join(level_calls(benchmark, model, kappa, reference=reference)))


@app.command()
def card(benchmark: Path = typer.Argument(..., help="Benchmark folder.")) -> None:
    """(Re)write the dataset card README.md of a benchmark folder."""
    from dataset_builder.card import write_card

    typer.echo(write_card(benchmark))


@app.command()
def publish(
    benchmark: Path = typer.Argument(..., help="Benchmark folder."),
    repo_id: str = typer.Argument(..., help="Hub dataset repo, namespace/name."),
    tag: str | None = typer.Option(None, show_default="the benchmark version", help="Tag."),
    private: bool = typer.Option(False, help="Create the repo private."),
) -> None:
    """Upload a benchmark folder to the Hub (resumable: rerun after an interruption) and tag it."""
    from dataset_builder.manifest import load_manifest
    from dataset_builder.publish import publish as publish_folder

    tag = tag or load_manifest(benchmark)[0]["benchmark"]["version"]
    on_interrupt("what was uploaded is kept: rerun the same command to finish publishing")
    sha = publish_folder(benchmark, repo_id, tag=tag, private=private)
    typer.echo(f"{repo_id}: tag {tag} = commit {sha}")


def _kept_for_resuming(out: Path) -> str:
    """What an interrupted image build leaves: its finished blocks, which the same command resumes from."""
    from dataset_builder.assemble import partial_of

    partial = partial_of(out)
    if not partial.is_dir():
        return NOTHING_WRITTEN
    return f"the finished part of the build is kept in {partial}: rerun the same command to resume"


def _summary(out: Path, sha: str) -> None:
    from dataset_builder.manifest import load_manifest

    manifest, _ = load_manifest(out)
    skipped = manifest.get("skipped_images", {}).get("count", 0)
    private = manifest.get("private")
    typer.echo(
        f"{out}: {manifest['classes']['id']} ID classes, {manifest['classes']['ood']} OOD classes, "
        f"{skipped} unreadable or oversized images skipped, {len(manifest['shards'])} shards, revision {sha}"
        + (f"; {sum(private['num_images'].values())} test images held back in {out / 'private'}" if private else "")
    )


def main() -> None:
    run_app(app)
