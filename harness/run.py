"""``evaluate`` one model on one benchmark with every requested kappa (in memory); ``submit`` also writes the
outputs."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

from dataset_builder.console import plural
from harness import phases
from harness.benchmarks import benchmark_before_loading, open_checked
from harness.config import SUBMIT_DEFAULTS, EvalConfig
from harness.drilldown import PerClass, per_class
from harness.loading import kappa_specs, kappas_before_loading, load_submission
from harness.method.evaluation import KappaResult, evaluate_kappa, with_private_check
from harness.method.scores import SplitScores
from harness.outputs import Evaluation, check_out, records_of, save
from harness.per_image import PerImage, per_image
from harness.runtime.distributed import close, init_ranks
from harness.runtime.execution import auto_device
from harness.runtime.scoring import Scorer, fit, make_scorer, resolve_run, score_splits, summed_stats


def evaluate(
    model,
    transform=None,
    config: EvalConfig | None = None,
    *,
    out: str | Path | Callable[[str], Path] | None = None,
    leaderboard: str | Path | None = None,
    **overrides,
) -> Evaluation | None:
    """Evaluate a classifier on a C-OOD benchmark and return the results; nothing is written unless asked.

    ``model`` is an ``nn.Module`` (logits, or ``(logits, features)``) with ``transform`` a callable
    ``PIL.Image -> Tensor`` or a timm data config; a timm model needs no transform (its own config is used). ``model``
    may also be a target string, which needs none (``evaluate(target, config)``): a submission file (run in a
    sandboxed child process) or a zoo target such as ``timm:<name>`` or ``hf:<folder>`` (see :mod:`harness.zoo`).
    The run follows ``config`` (default: :class:`EvalConfig`'s defaults) with ``overrides``, any of its fields by
    keyword (``benchmark=``, ``kappas=``...);
    impossible options and bad model names are refused before any image is read, kappas that need a fit are fitted on
    the benchmark's ID fit split first. ``out`` (a folder, or a function of the model's name giving one) is checked
    before the evaluation and receives records, CSV, level manifests and plot; ``leaderboard`` adds the records to
    that local leaderboard folder.

    Under torchrun every rank scores its share of the shards and rank 0 evaluates and returns the result
    (the other ranks return None).
    """
    started = time.perf_counter()
    created = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
    if isinstance(transform, EvalConfig):  # evaluate(target, config)
        transform, config = None, transform
    config = replace(EvalConfig() if config is None else config, **overrides)
    odin_preset, mc_passes = kappas_before_loading(config, model)
    ranks, device = init_ranks(auto_device(config.device))
    with phases.shown(config.progress and ranks.is_main), ExitStack() as stack:
        stack.callback(close, ranks)
        config, execution = resolve_run(config, device, ranks)
        bench, num_id = benchmark_before_loading(config)
        submission, forward = load_submission(model, transform, config, execution, num_id, bench)
        stack.callback(forward.close)
        specs = kappa_specs(config, submission, forward, odin_preset, mc_passes)
        if callable(out):
            out = out(submission.name)
        if out is not None and ranks.is_main:
            check_out(Path(out))
        if bench is None:
            bench = open_checked(config)
        scorer = make_scorer(config, execution, ranks, forward, submission, bench, specs)
        stack.callback(scorer.close)
        timings = fit(scorer)
        scores, split_timings = score_splits(scorer)
        timings |= split_timings
        stats = summed_stats(scorer, timings)
        if stats is None:  # a torchrun rank other than 0
            return None
        results, drilldown, images = _levels_and_metrics(scorer, scores)
        timings["total_s"] = round(time.perf_counter() - started, 3)
        records = records_of(scorer, submission, results, drilldown, timings, stats, created, images)
        done = Evaluation(submission, bench, results, records, stats, scores, per_class=drilldown, per_image=images)
        if out is not None or leaderboard is not None:
            save(done, out, leaderboard)
        return done


def _levels_and_metrics(scorer: Scorer, scores: dict[str, SplitScores]) -> tuple[list[KappaResult], PerClass, PerImage]:
    """Each kappa's severity levels and metrics, the per-class drill-down and the per-image files."""
    bench, specs = scorer.benchmark, scorer.kappas
    num_id, num_ood = len(bench.id_classes), len(bench.ood_classes)
    phases.say(f"severity levels and metrics of {plural(len(specs), 'kappa')}")
    results = [
        evaluate_kappa(
            spec.name,
            scores["id_test"],
            scores["ood_estimation"],
            scores["ood_test"],
            num_id,
            num_ood,
            scorer.config.num_levels,
            probability=spec.probability,
            rule=scorer.config.severity_rule,
        )
        for spec in specs
    ]
    if "id_test_private" in scores:
        results = [_with_private_check(result, scores, bench.private_sha256) for result in results]
    return results, per_class(results, scores["id_test"], scores["ood_test"], bench), per_image(results, scores, bench)


def _with_private_check(result: KappaResult, scores: dict[str, SplitScores], sha256: str) -> KappaResult:
    """``result`` with its private check (:func:`harness.method.evaluation.with_private_check`), said in one line."""
    checked = with_private_check(result, scores, sha256)
    check = checked.private
    verdict = "reproduced" if check["reproduced"] else "NOT reproduced"
    phases.say(
        f"{result.kappa}: mean ood-auroc {result.mean_ood_auroc:.4f} public, {check['mean_ood_auroc']:.4f} on "
        f"{plural(check['num_id'] + check['num_ood'], 'private image')} (p = {check['p_value']:.3g}: {verdict})"
    )
    return checked


def submit(
    target: str | Path,
    config: EvalConfig | None = None,
    *,
    out: str | Path | None = None,
    leaderboard: str | Path | None = None,
    **overrides,
) -> Evaluation | None:
    """:func:`evaluate` a target (a submission file or a zoo target, see :mod:`harness.adapters`) by ``config`` (default
    :data:`SUBMIT_DEFAULTS`: the resumable score cache on) with ``overrides``, and write its outputs to ``out``
    (default ``cood-results/<model name>``)."""
    return evaluate(
        target,
        replace(SUBMIT_DEFAULTS if config is None else config, **overrides),
        out=out if out is not None else lambda name: Path("cood-results") / name,
        leaderboard=leaderboard,
    )
