"""``submit``: evaluate one model on one benchmark, every requested kappa, and write the outputs."""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from dataset_builder.benchmark import Benchmark
from dataset_builder.embedded import EMBEDDED, cache_root, embedded_benchmark
from dataset_builder.errors import BenchmarkError
from harness import __version__
from harness.data import shard_batches
from harness.distributed import Ranks, close, init_ranks
from harness.errors import HarnessError
from harness.evaluate import KappaResult, evaluate_kappa
from harness.execution import Execution
from harness.inference import KappaSpec, SplitScores, from_logits, resolve_kappas, score_shards
from harness.kappas import DEFAULT_KAPPAS
from harness.metrics import AUPR_CONVENTION, AUROC_CONVENTION, FPR_CONVENTION
from harness.model_kappas import MC_DROPOUT_PASSES
from harness.outputs import record, summary_table, write_outputs
from harness.score_cache import ScoreCache, kappa_id, run_key
from harness.severity import DEFAULT_NUM_LEVELS
from harness.adapters import load_target
from harness.submission import Submission
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
    stats: dict = field(default_factory=dict)

    @property
    def table(self) -> str:
        return summary_table(self.results)


def open_benchmark(spec: str | Path, progress: bool = True) -> Benchmark:
    """An embedded benchmark by name (built on first use), a benchmark folder, or ``hf://datasets/<repo>@<revision>``."""
    path = embedded_benchmark(str(spec), progress=progress) if str(spec) in EMBEDDED else spec
    return Benchmark.open(path)


@dataclass
class Scorer:
    """Scores the evaluation splits of one benchmark with one model, shard by shard, through the cache."""

    submission: Submission
    model: torch.nn.Module
    benchmark: Benchmark
    kappas: list[KappaSpec]
    execution: Execution
    cache: ScoreCache | None
    ranks: Ranks
    batch_size: int
    workers: int
    seed: int
    keep_logits: bool
    verify: bool
    progress: bool
    stats: dict = field(default_factory=lambda: dict.fromkeys(
        ["images_forwarded", "shards_scored", "shards_from_cache", "shards_from_logits"], 0))

    def labels(self, split: str) -> dict[str, int]:
        classes = self.benchmark.id_classes if split.startswith("id") else self.benchmark.ood_classes
        return dict(zip(classes["id"], classes["index"]))

    def _from_cache(self, split: str, shard: dict) -> tuple[SplitScores | None, list[KappaSpec]]:
        """Cached scores of a shard (completed from kept logits when possible) and the kappas still missing."""
        hit = self.cache.load(split, shard["path"]) if self.cache else None
        if hit is None:
            return None, self.kappas
        cached, present = hit
        missing = [k for k in self.kappas if k.name not in present]
        if missing and cached.logits is not None and all(k.logit is not None and not k.logit.wants_features for k in missing):
            cached = cached.with_kappas(from_logits(cached, missing))
            self.cache.save(split, shard["path"], cached)
            self.stats["shards_from_logits"] += 1
            return cached, []
        if not missing:
            self.stats["shards_from_cache"] += 1
        return cached, missing

    def split(self, split: str) -> SplitScores:
        names = [k.name for k in self.kappas]
        shards = self.benchmark.shards(split)
        parts, hits, todo = [], {}, []
        for shard in self.ranks.mine(shards):
            cached, missing = self._from_cache(split, shard)
            if missing:
                hits[shard["path"]] = cached
                todo.append((shard, missing))
            else:
                parts.append(cached.only(names, keep_logits=False))
        needed = {k.name for _, missing in todo for k in missing}
        kappas = [k for k in self.kappas if k.name in needed]
        total = sum(shard["num_samples"] for shard, _ in todo)
        sub = self.submission
        batches = shard_batches(self.benchmark, [s for s, _ in todo], sub.transform, sub.channels, self.labels(split),
                                self.batch_size, self.workers, self.verify, pin_memory=self.execution.device.type == "cuda")
        sizes = {shard["path"]: shard["num_samples"] for shard, _ in todo}
        with tqdm(total=total, desc=f"{split} (rank {self.ranks.rank})" if self.ranks.world > 1 else split, unit="img",
                  disable=not self.progress or not total, leave=False) as bar:
            for path, scored in score_shards(self.model, batches, sizes, len(self.benchmark.id_classes), kappas, self.execution,
                                             self.seed, self.keep_logits, bar):
                merged = scored if hits[path] is None else hits[path].with_kappas(scored)
                if self.cache:
                    self.cache.save(split, path, merged)
                parts.append(merged.only(names, keep_logits=False))
                self.stats["images_forwarded"] += len(scored)
                self.stats["shards_scored"] += 1
        everyone = SplitScores.concat(self.ranks.gather(parts))
        expected = sum(s["num_samples"] for s in shards)
        if len(everyone) != expected:
            raise HarnessError(f"{split}: {len(everyone)} samples were scored, the manifest lists {expected}")
        return everyone


def submit(target: str | Path, *, benchmark: str | Path = "glyphs", kappas=DEFAULT_KAPPAS, out: str | Path | None = None,
           num_levels: int = DEFAULT_NUM_LEVELS, batch_size: int = 256, workers: int = 2, device: str = "cpu", amp: str = "auto",
           channels_last: bool | None = None, compile: bool = False, seed: int = 0, odin_preset: str = "paper",
           mc_passes: int = MC_DROPOUT_PASSES, verify: bool = True, cache: bool = True, cache_dir: str | Path | None = None,
           keep_logits: bool = False, progress: bool = True, leaderboard: str | Path | None = None,
           weights: str | Path | None = None) -> RunResult | None:
    """Evaluate ``target`` (a submission file, ``timm:<name>``, ``torchvision:<name>``, ``open_clip:<arch>/<tag>`` or
    ``hf:<folder>``, see :mod:`harness.adapters`; ``weights`` for the first three) on ``benchmark`` and write records, CSV, level manifests and plot to ``out``; with
    ``leaderboard``, also add the records to that local leaderboard folder (created on first use).

    Under torchrun every rank scores its share of the shards and rank 0 evaluates, writes and returns
    the result (the other ranks return None).
    """
    started = time.perf_counter()
    created = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
    if num_levels < 2:
        raise HarnessError(f"the number of severity levels must be at least 2, got {num_levels}")
    if batch_size < 1:
        raise HarnessError(f"the batch size must be positive, got {batch_size}")
    ranks, device = init_ranks(device)
    try:
        execution = Execution.resolve(device, amp, channels_last, compile)
        execution.share_cpu(workers)
        try:
            bench = open_benchmark(benchmark, progress and ranks.is_main)
        except BenchmarkError as exc:
            raise HarnessError(str(exc)) from None
        submission = load_target(str(target), weights=None if weights is None else str(weights),
                                 num_classes_expected=len(bench.id_classes))
        specs = resolve_kappas(kappas, submission.user_kappas, odin_preset, mc_passes)
        weights = submission.weights_sha256
        score_cache = None
        if cache:
            key = run_key(bench.sha256, weights, submission.preprocessing, execution.numerics())
            folder = Path(cache_dir) if cache_dir is not None else cache_root() / "scores"
            score_cache = ScoreCache(folder / key, {k.name: kappa_id(k, seed, batch_size) for k in specs})
        torch.manual_seed(seed)
        scorer = Scorer(submission, execution.prepare(submission.model), bench, specs, execution, score_cache, ranks,
                        batch_size, workers, seed, keep_logits, verify, progress and ranks.is_main)
        scores = {}
        timings = {}
        for split in EVAL_SPLITS:
            split_start = time.perf_counter()
            scores[split] = scorer.split(split)
            timings[f"{split}_s"] = round(time.perf_counter() - split_start, 3)
            timings[f"{split}_images"] = len(scores[split])
        per_rank = ranks.gather([scorer.stats])
        if not ranks.is_main:
            return None
        stats = {k: sum(r[k] for r in per_rank) for k in scorer.stats}
        if ranks.world > 1:
            stats["images_forwarded_per_rank"] = [r["images_forwarded"] for r in per_rank]
        num_id, num_ood = len(bench.id_classes), len(bench.ood_classes)
        results = [evaluate_kappa(spec.name, scores["id_test"], scores["ood_estimation"], scores["ood_test"], num_id, num_ood, num_levels)
                   for spec in specs]
        timings["total_s"] = round(time.perf_counter() - started, 3)
        run_info = {**timings, **stats, **execution.describe(), "batch_size": batch_size, "world_size": ranks.world}
        model_info = {"name": submission.name, "source": submission.source, "file_sha256": submission.file_sha256,
                      "weights_sha256": weights, "num_parameters": submission.num_parameters,
                      "preprocessing": submission.preprocessing}
        definitions = {"ood_auroc": AUROC_CONVENTION, "fpr_at_95_tpr": FPR_CONVENTION, "aupr": AUPR_CONVENTION,
                       "severity_levels": "SPEC.md section 3, integer window starts"}
        records = [record(result, benchmark=bench.identity(), model=model_info, kappa_params=spec.params, seed=seed,
                          version=__version__, created=created, timings=run_info, metric_definitions=definitions)
                   for spec, result in zip(specs, results)]
        out = Path(out) if out is not None else Path("cood-results") / submission.name
        paths = write_outputs(out, submission.name, results, records, list(bench.ood_classes["id"]))
        if leaderboard is not None:
            try:
                add_records(Path(leaderboard), records, create=True)
            except LeaderboardError as exc:
                raise HarnessError(f"the run's outputs are in {out}, but the leaderboard refused its records: {exc}") from None
        return RunResult(submission, bench, results, records, paths, stats)
    finally:
        close(ranks)
