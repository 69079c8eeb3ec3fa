"""Loading what a run evaluates: a submission file (in its sandbox, unless trusted), a zoo target or an in-memory
model, checked by a trial forward pass, and the kappas it is scored with."""

from __future__ import annotations

import time

import torch

from dataset_builder.benchmark import Benchmark
from dataset_builder.console import plural
from harness import phases
from harness.adapters import ClassCountMismatch, load_target
from harness.config import EvalConfig
from harness.errors import HarnessError
from harness.kappa_names import check_requested, own_kappa_names, split_request
from harness.kappas import DEFAULT_KAPPAS, DEFAULT_ODIN_PRESET, MC_DROPOUT_PASSES, registry, resolve_kappas
from harness.kappas.features import require_exposed
from harness.options import is_zoo_target, misplaced_revision, misplaced_weights
from harness.runtime.execution import Execution
from harness.runtime.inference import KappaSpec, LocalForward, gives_features
from harness.runtime.isolation import ChildForward, load_isolated
from harness.submission import ClassSubset, Submission, in_memory

IMAGENET_1K_CLASSES = 1000


def model_kappa_options(kappas: list[str] | None, odin_preset: str | None, mc_passes: int | None) -> tuple[str, int]:
    """The ODIN preset and MC-dropout passes with their defaults filled in; each is refused when given without its
    kappa (which the default kappas never include)."""
    requested = {split_request(k)[0] for k in kappas or ()}
    if odin_preset is not None and "odin" not in requested:
        raise HarnessError("--odin-preset applies to the odin kappa, which is not requested (-k odin)")
    if mc_passes is not None and "mc_dropout" not in requested:
        raise HarnessError("--mc-passes applies to the mc_dropout kappa, which is not requested (-k mc_dropout)")
    return (
        DEFAULT_ODIN_PRESET if odin_preset is None else odin_preset,
        MC_DROPOUT_PASSES if mc_passes is None else mc_passes,
    )


def kappas_before_loading(config: EvalConfig, target) -> tuple[str, int]:
    """The ODIN preset and MC-dropout passes (:func:`model_kappa_options`), and a kappa that is neither registered nor
    the target's own (where its source shows them: :func:`harness.kappa_names.own_kappa_names`) refused, before the
    target loads."""
    options = model_kappa_options(config.kappas, config.odin_preset, config.mc_passes)
    if config.kappas:
        check_requested(config.kappas, registry().parameters(), own_kappa_names(target))
    return options


def _loading_line(target, trust_submission: bool) -> str:
    """The line that opens the loading phase: what is loaded, and where it runs."""
    if isinstance(target, torch.nn.Module):
        return f"checking the model {type(target).__name__} with a trial forward pass"
    if is_zoo_target(target):
        return f"loading {target}"
    return f"loading {target} " + ("in this process (--trust-submission)" if trust_submission else "in its sandbox")


def class_subset(bench: Benchmark | None) -> ClassSubset | None:
    """The label space a benchmark's ID classes were drawn from, when they are a subset of it: an ImageNet benchmark
    of fewer than 1,000 ID classes (``--id-classes``), whose ``classes/id.parquet`` keeps each one's ImageNet-1K
    ``index``; else None."""
    if bench is None or bench.manifest.get("source", {}).get("kind") != "imagenet":
        return None
    if len(bench.id_classes) >= IMAGENET_1K_CLASSES:
        return None
    return ClassSubset("ImageNet-1K", IMAGENET_1K_CLASSES, tuple(int(i) for i in bench.id_classes["index"]))


def _load(
    target, transform, config: EvalConfig, num_id: int, execution: Execution, subset: ClassSubset | None
) -> tuple[Submission, LocalForward | ChildForward]:
    """The submission and its forward pass, checked by a trial forward pass: a submission file in a child process
    (unless trusted); a zoo target (our code) or an in-memory model (the caller's own) in this one. A model of
    ``subset.total`` outputs is restricted to the ID classes' columns."""
    if isinstance(target, torch.nn.Module):
        if config.weights is not None:
            raise HarnessError(misplaced_weights("a module", "weights="))
        if config.revision is not None:
            raise HarnessError(misplaced_revision("revision="))
        submission = in_memory(
            target, transform, name=config.name, channels=config.channels, num_classes=num_id, subset=subset
        )
    elif transform is not None:
        raise HarnessError("transform= applies to an in-memory model; a target brings its own preprocessing")
    elif is_zoo_target(target) or config.trust_submission:
        submission = load_target(
            str(target),
            weights=None if config.weights is None else str(config.weights),
            num_classes_expected=num_id,
            revision=config.revision,
            subset=subset,
        )
    elif config.weights is not None:
        raise HarnessError(misplaced_weights(f"the file {target}"))
    elif config.revision is not None:
        raise HarnessError(misplaced_revision("revision="))
    else:
        submission, forward = load_isolated(target, execution, num_id, config.limits, subset)
    if config.name is not None:
        submission.name = config.name
    if submission.model is None:
        return submission, forward
    used = subset if submission.class_subset is not None else None
    return submission, LocalForward(execution.prepare(submission.model), execution, num_id, used)


def load_submission(
    model, transform, config: EvalConfig, execution: Execution, num_id: int, bench: Benchmark | None
) -> tuple[Submission, LocalForward | ChildForward]:
    """The loading phase: the submission and its forward pass (see :func:`_load`) between its two phase lines."""
    loading = time.perf_counter()
    phases.say(_loading_line(model, config.trust_submission))
    try:
        submission, forward = _load(model, transform, config, num_id, execution, class_subset(bench))
    except ClassCountMismatch as exc:
        raise exc.on(
            str(config.benchmark) if bench is None else bench.manifest.get("id", str(config.benchmark))
        ) from exc
    subset = submission.class_subset
    phases.say(
        f"loaded {submission.name}: {plural(num_id, 'class')}"
        + (f" (of its {subset['model_outputs']:,} {subset['source']} outputs)" if subset else "")
        + (f", {submission.num_parameters:,} parameters" if submission.num_parameters else "")
        + f" ({time.perf_counter() - loading:.1f} s)"
    )
    return submission, forward


def kappa_specs(
    config: EvalConfig, submission: Submission, forward: LocalForward | ChildForward, odin_preset: str, mc_passes: int
) -> list[KappaSpec]:
    """The requested kappas (default: the default kappas, then the submission's own), refused unless the model exposes
    what they need."""
    kappas = [*DEFAULT_KAPPAS, *submission.user_kappas] if config.kappas is None else config.kappas
    specs = resolve_kappas(kappas, submission.user_kappas, odin_preset=odin_preset, mc_passes=mc_passes)
    require_exposed(specs, forward.head, lambda: gives_features(forward, submission.transform, submission.channels))
    return specs
