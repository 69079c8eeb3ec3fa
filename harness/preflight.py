"""What a run checks before torch is imported and before any model loads, beyond its options
(:class:`harness.config.EvalConfig`) and its target (:mod:`harness.options`): the weights file, a benchmark folder's
manifest, the levels the benchmark's classes allow, and the requested kappas' names. Light (the standard library,
numpy, the builder's manifest reader and the embedded benchmarks' settings), so that ``cood-harness submit`` answers
these mistakes in a fraction of a second."""

from __future__ import annotations

from pathlib import Path

from dataset_builder.embedded import EMBEDDED, embedded_num_id_classes, embedded_num_ood_classes
from dataset_builder.errors import BenchmarkError
from dataset_builder.manifest import HUB_PREFIX, load_manifest
from harness.config import EvalConfig
from harness.errors import HarnessError
from harness.kappa_names import check_requested, own_kappa_names, registered_parameters
from harness.method.severity import num_windows


def check_before_loading(target, config: EvalConfig) -> None:
    """Refuse at once a weights file that is not there, a benchmark folder that is not one, a benchmark with too few
    classes for the levels, and a kappa that is neither registered nor the target's own or a registered one's parameter
    that it lacks or of the wrong type (where the names are known)."""
    check_weights(config.weights)
    check_benchmark(config.benchmark, config.num_levels)
    check_requested(config.kappas, registered_parameters(), own_kappa_names(target))


def check_weights(weights: str | Path | None) -> None:
    """A weights file that exists (what it holds is checked when it is read)."""
    if weights is not None and not Path(weights).is_file():
        raise HarnessError(f"weights file {weights} not found")


def check_benchmark(benchmark: str | Path, num_levels: int) -> None:
    """An embedded benchmark's or a benchmark folder's class counts (in its manifest, which this version must read)
    that allow ``num_levels``; a Hub benchmark is checked once opened."""
    if str(benchmark) in EMBEDDED:
        name = str(benchmark)
        check_levels(num_levels, embedded_num_ood_classes(name), embedded_num_id_classes(name), benchmark)
        return
    if str(benchmark).startswith(HUB_PREFIX):
        return
    try:
        manifest, _ = load_manifest(Path(benchmark))
    except BenchmarkError as exc:
        raise HarnessError(str(exc)) from exc
    classes = manifest.get("classes")
    if isinstance(classes, dict) and all(type(classes.get(k)) is int for k in ("id", "ood")):
        check_levels(num_levels, classes["ood"], classes["id"], benchmark)


def check_levels(num_levels: int, num_ood: int, window: int, benchmark) -> None:
    """Refuse more levels than the benchmark has distinct windows of |ID| classes."""
    windows = num_windows(num_ood, window)
    if num_levels > windows:
        raise HarnessError(
            f"--levels {num_levels} is more than the benchmark {benchmark} allows: "
            f"its {num_ood} OOD classes in windows "
            f"of {window} (its ID classes) give {windows} distinct levels at most"
        )
