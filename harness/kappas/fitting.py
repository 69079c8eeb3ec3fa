"""The ID split that kappas needing a fit are fitted on, recorded in every record of a fitted kappa."""

from __future__ import annotations

from dataclasses import replace

from dataset_builder.benchmark import SPLITS, Benchmark
from harness.errors import HarnessError
from harness.kappas.base import KappaSpec

FIT_SPLITS = ("id_fit", "id_train")  # the first the benchmark has; never id_test


def fit_split(bench: Benchmark) -> tuple[str, int]:
    """The benchmark's fit split and its number of images."""
    for split in FIT_SPLITS:
        shards = bench.shards(split) if split in SPLITS else []
        if shards:
            return split, sum(s["num_samples"] for s in shards)
    raise HarnessError(
        f"benchmark {bench.name} has no ID split to fit kappas on ({' or '.join(FIT_SPLITS)}); "
        "rebuild it with ID training images, or choose kappas that need no fit"
    )


def with_fit(specs: list[KappaSpec], bench: Benchmark, seed: int) -> list[KappaSpec]:
    """``specs`` with the fit (split, size, run seed; for ``id_fit`` also the builder's images per class and seed) among
    the parameters of those that need one."""
    if not any(k.needs_fit for k in specs):
        return specs
    split, size = fit_split(bench)
    fit = {"split": split, "size": size, "seed": seed}
    if split == "id_fit":  # how the builder drew it from the training images
        fit["sample"] = {k: bench.manifest["fit"][k] for k in ("per_class", "seed")}
    return [replace(k, params={**k.params, "fit": fit}) if k.needs_fit else k for k in specs]
