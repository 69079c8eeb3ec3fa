"""The benchmark a run reads: an embedded one by name (built on first use), a folder or a Hub dataset, opened, its
number of levels checked against its classes, and its private part where it is scored."""

from __future__ import annotations

from pathlib import Path

from dataset_builder.benchmark import Benchmark
from dataset_builder.embedded import EMBEDDED, embedded_benchmark, embedded_num_id_classes, embedded_num_ood_classes
from dataset_builder.errors import BenchmarkError
from dataset_builder.manifest import MANIFEST
from dataset_builder.private import FOLDER as PRIVATE_FOLDER
from harness.config import EvalConfig
from harness.errors import HarnessError
from harness.preflight import check_levels


def open_benchmark(spec: str | Path, progress: bool = True) -> Benchmark:
    """An embedded benchmark by name (built on first use), a benchmark folder, or ``hf://datasets/<repo>@<revision>``."""
    path = embedded_benchmark(str(spec), progress=progress) if str(spec) in EMBEDDED else spec
    return Benchmark.open(path)


def open_checked(config: EvalConfig) -> Benchmark:
    """The config's benchmark, refused when it has fewer distinct windows of |ID| classes than its number of levels,
    with its private part's splits as :func:`with_private` gives them."""
    try:
        bench = open_benchmark(config.benchmark, config.progress)
    except BenchmarkError as exc:
        raise HarnessError(str(exc)) from exc
    check_levels(config.num_levels, len(bench.ood_classes), len(bench.id_classes), config.benchmark)
    return with_private(bench, config.private, config.private_part)


def with_private(bench: Benchmark, private: bool | None, folder: str | Path | None = None) -> Benchmark:
    """``bench`` with its private part's test splits (:meth:`Benchmark.with_private`, from ``folder``, by default
    ``<root>/private``): when ``private`` or ``folder`` is given, or when ``private`` is None and the manifest names a
    private part whose folder is there; one line when it is asked for and cannot be."""
    there = bench.has_private_part and (bench.root / PRIVATE_FOLDER / MANIFEST).is_file()
    if private is False or (private is None and folder is None and not there):
        return bench
    try:
        return bench.with_private(folder)
    except BenchmarkError as exc:
        raise HarnessError(str(exc)) from exc


def benchmark_before_loading(config: EvalConfig) -> tuple[Benchmark | None, int]:
    """The benchmark (None for an embedded one, built only once everything that can fail fast has: a minute on first
    use) and its number of ID classes, its levels checked either way."""
    if str(config.benchmark) not in EMBEDDED:
        bench = open_checked(config)
        return bench, len(bench.id_classes)
    num_id = embedded_num_id_classes(str(config.benchmark))
    check_levels(config.num_levels, embedded_num_ood_classes(str(config.benchmark)), num_id, config.benchmark)
    return None, num_id
