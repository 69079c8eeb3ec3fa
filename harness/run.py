"""``submit``: evaluate one submission on one benchmark, every requested kappa, and write the outputs."""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from dataset_builder.benchmark import Benchmark
from dataset_builder.embedded import EMBEDDED, embedded_benchmark
from dataset_builder.errors import BenchmarkError
from harness import __version__
from harness.data import split_batches
from harness.errors import HarnessError
from harness.evaluate import KappaResult, evaluate_kappa
from harness.inference import SplitScores, resolve_kappas, score_split
from harness.kappas import DEFAULT_KAPPAS
from harness.metrics import AUPR_CONVENTION, AUROC_CONVENTION, FPR_CONVENTION
from harness.model_kappas import MC_DROPOUT_PASSES
from harness.outputs import record, summary_table, write_outputs
from harness.severity import DEFAULT_NUM_LEVELS
from harness.submission import Submission, load_file
from leaderboard.errors import LeaderboardError
from leaderboard.store import add_records

EVAL_SPLITS = ("id_test", "ood_estimation", "ood_test")


@dataclass
class RunResult:
    submission: Submission
    benchmark: Benchmark
    results: list[KappaResult]
    records: list[dict]
    paths: dict

    @property
    def table(self) -> str:
        return summary_table(self.results)


def open_benchmark(spec: str | Path, progress: bool = True) -> Benchmark:
    """An embedded benchmark by name (built on first use) or a benchmark folder."""
    path = embedded_benchmark(str(spec), progress=progress) if str(spec) in EMBEDDED else Path(spec)
    return Benchmark.open(path)


def score_splits(submission: Submission, benchmark: Benchmark, kappas, *, device: torch.device, batch_size: int,
                 workers: int, seed: int, progress: bool) -> tuple[dict[str, SplitScores], dict]:
    """Run the model once over every evaluation split; return the scores and per-split timings."""
    labels = {"id_test": dict(zip(benchmark.id_classes["id"], benchmark.id_classes["index"])),
              "ood_estimation": dict(zip(benchmark.ood_classes["id"], benchmark.ood_classes["index"]))}
    labels["ood_test"] = labels["ood_estimation"]
    scores, timings = {}, {}
    for split in EVAL_SPLITS:
        start = time.perf_counter()
        total = sum(s["num_samples"] for s in benchmark.shards(split))
        batches = split_batches(benchmark, split, submission.transform, submission.channels, labels[split], batch_size, workers)
        scores[split] = score_split(submission.model, batches, len(benchmark.id_classes), kappas, device, seed, total,
                                    desc=split, progress=progress)
        timings[f"{split}_s"] = round(time.perf_counter() - start, 3)
        timings[f"{split}_images"] = len(scores[split].keys)
    return scores, timings


def submit(target: str | Path, *, benchmark: str | Path = "glyphs", kappas=DEFAULT_KAPPAS, out: str | Path | None = None,
           num_levels: int = DEFAULT_NUM_LEVELS, batch_size: int = 256, workers: int = 2, device: str = "cpu", seed: int = 0,
           odin_preset: str = "paper", mc_passes: int = MC_DROPOUT_PASSES, verify: bool = True, progress: bool = True,
           leaderboard: str | Path | None = None) -> RunResult:
    """Evaluate ``target`` (a submission file) on ``benchmark`` and write records, CSV, level manifests and plot to ``out``;
    with ``leaderboard``, also add the records to that local leaderboard folder (created on first use)."""
    started = time.perf_counter()
    created = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
    if num_levels < 2:
        raise HarnessError(f"the number of severity levels must be at least 2, got {num_levels}")
    submission = load_file(target)
    specs = resolve_kappas(kappas, submission.user_kappas, odin_preset, mc_passes)
    try:
        bench = open_benchmark(benchmark, progress)
        bench.verify(EVAL_SPLITS, deep=verify)
    except BenchmarkError as exc:
        raise HarnessError(str(exc)) from None
    try:
        torch_device = torch.device(device)
        submission.model.to(torch_device).eval()
    except (RuntimeError, AssertionError) as exc:
        raise HarnessError(f"cannot use device '{device}': {exc}") from None
    torch.manual_seed(seed)
    scores, timings = score_splits(submission, bench, specs, device=torch_device, batch_size=batch_size,
                                   workers=workers, seed=seed, progress=progress)
    num_id, num_ood = len(bench.id_classes), len(bench.ood_classes)
    results = [evaluate_kappa(spec.name, scores["id_test"], scores["ood_estimation"], scores["ood_test"], num_id, num_ood, num_levels)
               for spec in specs]
    timings["total_s"] = round(time.perf_counter() - started, 3)
    model_info = {"name": submission.name, "source": submission.source, "file_sha256": submission.file_sha256,
                  "weights_sha256": submission.weights_sha256, "num_parameters": submission.num_parameters,
                  "preprocessing": submission.preprocessing}
    definitions = {"ood_auroc": AUROC_CONVENTION, "fpr_at_95_tpr": FPR_CONVENTION, "aupr": AUPR_CONVENTION,
                   "severity_levels": "SPEC.md section 3, integer window starts"}
    records = [record(result, benchmark=bench.identity(), model=model_info, kappa_params=spec.params, seed=seed, version=__version__,
                      created=created, timings={**timings, "device": str(torch_device), "batch_size": batch_size},
                      metric_definitions=definitions)
               for spec, result in zip(specs, results)]
    out = Path(out) if out is not None else Path("cood-results") / submission.name
    paths = write_outputs(out, submission.name, results, records, list(bench.ood_classes["id"]))
    if leaderboard is not None:
        try:
            add_records(Path(leaderboard), records, create=True)
        except LeaderboardError as exc:
            raise HarnessError(f"the run's outputs are in {out}, but the leaderboard refused its records: {exc}") from None
    return RunResult(submission, bench, results, records, paths)
