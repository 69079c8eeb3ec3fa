"""``cood-dataset``: build benchmarks (thin command line over the builder's Python API)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from dataset_builder.console import run_app

from dataset_builder.errors import BenchmarkError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Build C-OOD benchmarks as WebDataset shards.")


@app.callback()
def _main() -> None:
    """Build C-OOD benchmarks as WebDataset shards."""


@app.command()
def glyphs(
    out: Optional[Path] = typer.Argument(None, help="Output folder [default: the embedded benchmark's cache folder]."),
    seed: int = typer.Option(0, help="Seed of the split, the pool sampling and the image styles."),
    pool_size: int = typer.Option(400, help="OOD classes to keep (seeded sample of the survivors); 0 keeps all."),
    images_per_class: int = typer.Option(200, help="Images per OOD class."),
    n_test: int = typer.Option(50, help="Test images per OOD class (the rest estimate the class)."),
    id_test_per_class: int = typer.Option(50, help="ID test images per ID class."),
    id_train_per_class: int = typer.Option(300, help="ID training images per ID class (for training example models)."),
    visually_ambiguous: bool = typer.Option(True, help="Remove characters that draw like an ID character."),
    workers: int = typer.Option(2, help="Rendering processes."),
) -> None:
    """Build the embedded glyph benchmark (byte-identical for the same options)."""
    from dataset_builder.embedded import embedded_benchmark
    from dataset_builder.glyphs.build import build
    from dataset_builder.manifest import load_manifest

    options = dict(seed=seed, pool_size=pool_size or None, images_per_class=images_per_class, n_test=n_test,
                   id_test_per_class=id_test_per_class, id_train_per_class=id_train_per_class)
    rule_sets = {"visually_ambiguous": visually_ambiguous}
    if out is None:
        out = embedded_benchmark("glyphs", rule_sets=rule_sets, workers=workers, **options)
    else:
        build(out, rule_sets=rule_sets, workers=workers, **options)
    manifest, sha = load_manifest(out)
    typer.echo(f"{out}: {manifest['classes']['id']} ID classes, {manifest['classes']['ood']} OOD classes, "
               f"{len(manifest['shards'])} shards, revision {sha}")


def main() -> None:
    run_app(app, (BenchmarkError,))
