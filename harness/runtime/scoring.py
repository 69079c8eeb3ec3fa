"""Scoring a benchmark's splits with one model: the score cache planned against, the loader driven, the evaluation
splits in one pass in the run's secret order and its re-check, the fit split's fits; what :func:`harness.run.evaluate`
runs between loading the model and forming the levels."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from dataset_builder.benchmark import PRIVATE_SPLITS, Benchmark
from dataset_builder.console import bars_off, plural
from dataset_builder.embedded import cache_root
from harness import phases
from harness.config import EvalConfig
from harness.errors import HarnessError
from harness.kappas.fitting import with_fit
from harness.method.scores import SplitScores
from harness.runtime import interleave
from harness.runtime.data import Loader, Reading, default_workers, shard_groups
from harness.runtime.decoded_cache import DecodedCache
from harness.runtime.decoded_cache import cache_key as decoded_key
from harness.runtime.decoding import PilDecoder, TensorDecoder, make_decoder
from harness.runtime.distributed import Ranks
from harness.runtime.execution import Execution
from harness.runtime.inference import (
    KappaSpec,
    LocalForward,
    fit_kappas,
    fit_on_layers,
    from_outputs,
    named,
    score_mixed,
)
from harness.runtime.interleave import derived, row_seeds, secret_order
from harness.runtime.isolation import ChildForward
from harness.runtime.recheck import Recheck, tolerance
from harness.runtime.recheck import asked as recheck_forward
from harness.runtime.score_cache import ScoreCache, kappa_id, run_key
from harness.submission import Submission

EVAL_SPLITS = ("id_test", "ood_estimation", "ood_test")
LOGIT_SPLITS = ("id_test",)  # the splits whose logits every pass keeps: the classifier's multi-class NLL and Brier


@dataclass
class Plan:
    """A pass's shards sorted out by the score cache: per split, the scores it serves whole (``parts``, to which the
    pass adds what it scores); by path, the shards to score with their split (``todo``) and what the cache has of
    them (``hits``); the names of the kappas they lack (``needed``); the shards it serves whole, with all it has of
    them (``served``: the re-check asks a sample of them again)."""

    parts: dict[str, list[SplitScores]]
    todo: dict[str, tuple[str, dict]] = field(default_factory=dict)
    hits: dict[str, SplitScores | None] = field(default_factory=dict)
    needed: set[str] = field(default_factory=set)
    served: list[tuple[dict, SplitScores]] = field(default_factory=list)


def _kept(scores: SplitScores, names: list[str], split: str, outputs: bool) -> SplitScores:
    """A shard's scores as a pass keeps them: ``names``' kappas, with ``outputs`` the logits and features, on a split
    of :data:`LOGIT_SPLITS` the logits at least."""
    kept = scores.only(names, keep_logits=outputs or split in LOGIT_SPLITS)
    return kept if outputs else replace(kept, features=None)


@dataclass(kw_only=True)
class Scorer:
    """Scores the evaluation splits of one benchmark with one model, shard by shard, through the caches, with the
    batch size, workers (a number: see :func:`resolve_run`), seed, progress bars and cached outputs ``config`` gives."""

    forward: LocalForward | ChildForward
    decoder: PilDecoder | TensorDecoder
    benchmark: Benchmark
    kappas: list[KappaSpec]
    execution: Execution
    ranks: Ranks
    config: EvalConfig
    cache: ScoreCache | None = None
    decoded: DecodedCache | None = None
    stats: dict = field(
        default_factory=lambda: dict.fromkeys(
            ["images_forwarded", "shards_scored", "shards_from_cache", "shards_from_logits"], 0
        )
    )
    order_seed: int = 0  # the run's secret order (see :mod:`harness.runtime.interleave`)
    first_batch_s: dict = field(default_factory=dict)  # pass -> seconds until its first batch reached the model
    recheck: dict = field(default_factory=dict)  # the evaluation pass's re-check, as the records give it
    _loader: Loader | None = field(default=None, init=False, repr=False)

    def batches(self, groups: list[list[dict]], label_of: dict[str, int], order_seed: int | None = None):
        """One pass over ``groups`` of shards, by the run's loader (its workers live across passes); with an
        ``order_seed``, merged in the run's secret order (see :meth:`Loader.batches`)."""
        if self._loader is None:
            reading = Reading(
                self.config.batch_size, self.config.workers, self.config.verify, self.execution.device.type == "cuda"
            )
            self._loader = Loader(self.benchmark, self.decoder, reading, self.decoded)
        return self._loader.batches(groups, label_of, order_seed)

    def close(self) -> None:
        """End the loader's worker processes."""
        if self._loader is not None:
            self._loader.close()

    def labels(self, split: str) -> dict[str, int]:
        """Class id -> label: an ID class's place in the benchmark's ID class order (the logits' column; its
        ``index`` where the indices are 0..N-1, not for a subset of ImageNet-1K), an OOD class's index."""
        if split.startswith("id"):
            ids = self.benchmark.id_classes["id"]
            return dict(zip(ids, range(len(ids))))
        return dict(zip(self.benchmark.ood_classes["id"], self.benchmark.ood_classes["index"]))

    def _from_cache(
        self, split: str, shard: dict, kappas: list[KappaSpec], outputs: bool
    ) -> tuple[SplitScores | None, list[KappaSpec] | None]:
        """Cached scores of a shard (completed from kept logits and features when possible) and the kappas still
        missing (None: the shard needs a pass although no kappa is missing, for its logits and features)."""
        hit = self.cache.load(split, shard) if self.cache else None
        if hit is None:
            return None, kappas or None
        cached, present = hit
        missing = [k for k in kappas if k.name not in present]
        kept = cached.logits is not None and (cached.features is not None or not self.wants_features)
        if missing and kept and not any(k.in_model for k in missing):
            cached = cached.with_kappas(from_outputs(cached, missing, self.forward.head))
            self.cache.save(split, shard, cached)
            self.stats["shards_from_logits"] += 1
            return cached, []
        if (outputs and not kept) or (split in LOGIT_SPLITS and cached.logits is None):
            return cached, missing or None
        if not missing:
            self.stats["shards_from_cache"] += 1
        return cached, missing

    @property
    def wants_features(self) -> bool:
        return any(k.reads_features for k in self.kappas)

    def _plan(self, splits: tuple[str, ...], kappas: list[KappaSpec], outputs: bool) -> Plan:
        """This rank's shards of ``splits`` sorted out by the score cache (see :class:`Plan`)."""
        names = [k.name for k in kappas]
        plan = Plan({split: [] for split in splits})
        everything = [(split, shard) for split in splits for shard in self.benchmark.shards(split)]
        for split, shard in self.ranks.mine(everything):
            cached, missing = self._from_cache(split, shard, kappas, outputs)
            if missing is None or missing:
                plan.todo[shard["path"]] = (split, shard)
                plan.hits[shard["path"]] = cached
                plan.needed |= {k.name for k in missing or []}
            else:
                plan.parts[split].append(_kept(cached, names, split, outputs))
                plan.served.append((shard, cached))
        return plan

    def _bar(self, desc: str, total: int) -> tqdm:
        """A pass's progress bar (off without ``progress``, off a terminal, or with nothing to score)."""
        return tqdm(
            total=total,
            desc=f"{desc} (rank {self.ranks.rank})" if self.ranks.world > 1 else desc,
            unit="img",
            disable=bars_off(self.config.progress and bool(total)),
            leave=False,
        )

    def passes(
        self, splits: tuple[str, ...], kappas: list[KappaSpec] | None = None, outputs: bool = False, check: bool = True
    ) -> dict[str, SplitScores]:
        """The scores of ``splits``' ``kappas`` (default: the run's), with ``outputs`` also their logits and features:
        the shards the score cache lacks, of every split at once, through the model in the run's secret order
        (:mod:`harness.runtime.interleave`); with ``check``, a secret sample of the pass's rows and of the rows the
        cache served asked again at the end (:mod:`harness.runtime.recheck`, its account in :attr:`recheck`). A
        failed re-check drops the run's score cache entries."""
        kappas = self.kappas if kappas is None else kappas
        names = [k.name for k in kappas]
        plan = self._plan(splits, kappas, outputs)
        kappas = [k for k in kappas if k.name in plan.needed]
        sizes = {path: shard["num_samples"] for path, (_, shard) in plan.todo.items()}
        seed = derived(self.order_seed, "rank", self.ranks.rank, *splits)
        config = self.config
        recheck = Recheck(config.batch_size, seed, tolerance(self.execution), self.kappas, config.feature_dtype)
        served = recheck.choose(sum(sizes.values()), sum(len(s) for _, s in plan.served)) if check else 0
        shards = secret_order([shard for _, shard in plan.todo.values()], seed)
        mixed = self.batches([[shard] for shard in shards], self._labels_of(splits), seed)
        batches = recheck.kept(self._seeded(" + ".join(splits), mixed))
        with (
            recheck_forward(self.forward) as recheck_asks,
            closing(mixed),
            closing(batches),
            self._bar(" + ".join(splits), sum(sizes.values())) as bar,
        ):
            for path, scored in score_mixed(
                self.forward,
                batches,
                sizes,
                len(self.benchmark.id_classes),
                kappas,
                bar,
                self.config.feature_dtype,
                recheck.answered,
            ):
                self._done(path, scored, plan, names, outputs)
            if check:
                start = time.perf_counter()
                self._add_served(recheck, plan.served, served, splits)
                self._rechecked(recheck, recheck_asks, start)
        return {split: self._gathered(split, plan.parts[split]) for split in splits}

    def _add_served(self, recheck: Recheck, served: list[tuple[dict, SplitScores]], count: int, splits) -> None:
        """Add ``count`` rows of shards the score cache served to the re-check: a few such shards drawn at random,
        read again for their images, the cache's values their first answers (rows picked by their place in their
        shard, whatever order the shards' batches come in)."""
        if not count:
            return
        order = list(range(len(served)))
        recheck.rng.shuffle(order)
        chosen, rows = [], 0
        for at in order:
            chosen.append(served[at])
            rows += len(served[at][1])
            if rows >= count:
                break
        starts = np.cumsum([0] + [len(scores) for _, scores in chosen])
        picked: dict[str, set[int]] = {shard["path"]: set() for shard, _ in chosen}
        for row in recheck.pick(rows, count):
            at = int(np.searchsorted(starts, row, side="right")) - 1
            picked[chosen[at][0]["path"]].add(row - int(starts[at]))
        cached, seen = {shard["path"]: scores for shard, scores in chosen}, dict.fromkeys(picked, 0)
        for batch in self.batches([[shard] for shard, _ in chosen], self._labels_of(splits)):
            if "error" in batch:
                raise HarnessError(batch["error"])
            path = batch["shard"]
            mine = [i for i in range(len(batch["keys"])) if seen[path] + i in picked[path]]
            seen[path] += len(batch["keys"])
            if mine:
                keys = np.asarray(batch["keys"])[mine]
                first = cached[path].take(np.searchsorted(cached[path].keys, keys))
                recheck.add(batch["images"][mine], batch["labels"][mine], row_seeds(self.order_seed, keys), first)

    def _rechecked(self, recheck: Recheck, asks, start: float) -> None:
        """Re-ask the re-check's sample of the model loaded anew (its cost, from ``start``, the load included); a
        failure drops the run's score cache entries."""
        if not recheck.parts:
            return
        try:
            self.recheck = recheck.run(asks.get(self.kappas), len(self.benchmark.id_classes))
        except HarnessError:
            if self.cache is not None:
                self.cache.drop()
            raise
        self.recheck["recheck_s"] = round(time.perf_counter() - start, 3)

    def _seeded(self, what: str, mixed: Iterator[dict]) -> Iterator[dict]:
        """The mixed batches, each with its rows' seeds for the seeded kappas; notes how long the first took to come."""
        start = time.perf_counter()
        for batch in mixed:
            self.first_batch_s.setdefault(what, round(time.perf_counter() - start, 3))
            yield batch if "error" in batch else batch | {"seeds": row_seeds(self.order_seed, batch["keys"])}

    def _labels_of(self, splits: tuple[str, ...]) -> dict[str, int]:
        """The labels of the classes of ``splits``, ID and OOD together (their class ids never meet: refused
        otherwise)."""
        tables = {split.startswith("id"): self.labels(split) for split in splits}
        if len(tables) == 2 and tables[True].keys() & tables[False].keys():
            raise HarnessError("the benchmark's ID and OOD classes share class ids; it cannot be evaluated")
        return {cls: label for table in tables.values() for cls, label in table.items()}

    def _done(self, path: str, scored: SplitScores, plan: Plan, names: list[str], outputs: bool) -> None:
        """A shard scored: merged with what the cache had of it, saved there, and kept for its split."""
        self.stats["images_forwarded"] += len(scored)
        self.stats["shards_scored"] += 1
        (split, shard), hit = plan.todo[path], plan.hits[path]
        merged = scored if hit is None else hit.with_kappas(scored)
        if self.cache:
            self.cache.save(split, shard, _kept(merged, list(merged.scores), split, self.config.keep_logits or outputs))
        plan.parts[split].append(_kept(merged, names, split, outputs))

    def _gathered(self, split: str, parts: list[SplitScores]) -> SplitScores:
        """A split's scores from every rank, checked against the manifest's count."""
        everyone = SplitScores.concat(self.ranks.gather(parts))
        expected = sum(s["num_samples"] for s in self.benchmark.shards(split))
        if len(everyone) != expected:
            raise HarnessError(f"{split}: {len(everyone)} samples were scored, the manifest lists {expected}")
        return everyone

    def fit_on_layers(self, split: str, kappas: list[KappaSpec]) -> np.ndarray:
        """Fit the kappas that read intermediate layers: a pass over the split in the model's process gives what their
        fits need, batch by batch (in key order, on every rank alike); returns the split's labels."""
        groups = self.ranks.mine(shard_groups(self.benchmark.shards(split), self.config.batch_size))
        mine = []
        with (
            closing(self.batches(groups, self.labels(split))) as batches,
            tqdm(
                total=sum(s["num_samples"] for group in groups for s in group),
                desc=f"{split} (layers)",
                unit="img",
                disable=bars_off(self.config.progress),
                leave=False,
            ) as bar,
        ):
            for batch in batches:
                if "error" in batch:
                    raise HarnessError(batch["error"])
                try:
                    mine.append(
                        (batch["keys"][0], self.forward.extract(batch["images"], kappas), batch["labels"].numpy())
                    )
                except HarnessError as exc:
                    raise HarnessError(f"shard {named(batch)}: {exc}") from exc
                self.stats["images_forwarded"] += len(batch["keys"])
                bar.update(len(batch["keys"]))
        everyone = sorted(self.ranks.gather(mine), key=lambda part: part[0])
        labels = np.concatenate([labels for _, _, labels in everyone])
        fit_on_layers(
            kappas, {k.name: [parts[k.name] for _, parts, _ in everyone] for k in kappas}, labels, self.config.seed
        )
        return labels


def cache_cost(cache: ScoreCache, head, images: int) -> str:
    """One line: what the run's cache takes on disk, and the features' share of it per image."""
    on_disk = sum(p.stat().st_size for p in cache.folder.rglob("*.scores"))
    dims = (
        f"{head[0].shape[1]} features in {cache.feature_dtype} "
        f"({head[0].shape[1] * np.dtype(cache.feature_dtype).itemsize:,} "
        "bytes per image) and "
        if head is not None
        else ""
    )
    return f"score cache: {dims}scores of {images:,} images take {on_disk / 1e6:,.1f} MB in {cache.folder}"


def split_line(split: str, stats: dict, seconds: float) -> str:
    """The line that closes a split: images, and where its shards' scores came from."""
    parts = [f"{plural(stats['shards_scored'], 'shard')} forwarded"]
    if stats["shards_from_cache"]:
        parts.append(f"{stats['shards_from_cache']:,} from the score cache")
    if stats["shards_from_logits"]:
        parts.append(f"{stats['shards_from_logits']:,} from cached logits and features")
    return f"{split}: done in {seconds:.1f} s ({', '.join(parts)})"


def preprocessing(submission: Submission, images: PilDecoder | TensorDecoder) -> dict:
    """The submission's preprocessing as records and the score cache's key name it: with the decoder and where it
    runs."""
    return {**submission.preprocessing, "decoder": images.name, "decoded_on": images.device.type}


def make_scorer(
    config: EvalConfig,
    execution: Execution,
    ranks: Ranks,
    forward: LocalForward | ChildForward,
    submission: Submission,
    bench: Benchmark,
    specs: list[KappaSpec],
) -> Scorer:
    """The run's scorer of ``specs`` (those that need a fit given the benchmark's fit split): its decoder, and with
    ``cache`` its score cache and decoded-image cache."""
    specs = with_fit(specs, bench, config.seed)
    try:
        # a sandboxed submission's images cross to its process through shared memory: decoded on the CPU
        on = execution.device if isinstance(forward, LocalForward) else torch.device("cpu")
        images = make_decoder(config.decoder, submission.transform, submission.channels, bench.max_image_pixels, on)
    except ValueError as exc:
        raise HarnessError(str(exc)) from exc
    score_cache, decoded = (
        _caches(config, execution, submission, bench, specs, images) if config.cache else (None, None)
    )
    torch.manual_seed(config.seed)
    return Scorer(
        forward=forward,
        decoder=images,
        benchmark=bench,
        kappas=specs,
        execution=execution,
        ranks=ranks,
        config=config,
        cache=score_cache,
        decoded=decoded,
        order_seed=config.order_seed,
    )


def _caches(
    config: EvalConfig,
    execution: Execution,
    submission: Submission,
    bench: Benchmark,
    specs: list[KappaSpec],
    images,
) -> tuple[ScoreCache, DecodedCache | None]:
    """The run's score cache, and its decoded-image cache where the images are decoded on the CPU."""
    root = Path(config.cache_dir) if config.cache_dir is not None else None
    key = run_key(
        bench.sha256,
        submission.weights_sha256,
        submission.bundle_sha256 or submission.source,
        preprocessing(submission, images),
        {**execution.numerics(), "feature_dtype": config.feature_dtype, "batches": "secret order"},
    )
    scores = ScoreCache(
        (root or cache_root() / "scores") / key,
        {k.name: kappa_id(k, config.seed, config.order_seed) for k in specs},
        config.feature_dtype,
    )
    if config.decoded_cache_gb <= 0 or not isinstance(images, TensorDecoder) or images.device.type != "cpu":
        return scores, None
    decoded = DecodedCache(
        (root or cache_root()) / "decoded",
        decoded_key(bench.sha256, images.plan, submission.channels),
        int(config.decoded_cache_gb * 1e9),
    )
    return scores, decoded


def fit(scorer: Scorer) -> dict:
    """Fit the kappas that need a fit on the benchmark's fit split; the split's timings (none without such a kappa)."""
    fitted = [k for k in scorer.kappas if k.needs_fit]
    if not fitted:
        return {}
    split = fitted[0].params["fit"]["split"]
    split_start = time.perf_counter()
    phases.say(f"reading the fit split {split} for {', '.join(k.name for k in fitted)}")
    on_layers = [k for k in fitted if k.reads_layers]
    if len(on_layers) < len(fitted):
        fit_data = scorer.passes((split,), kappas=[], outputs=True, check=False)[split]
        fit_kappas(fitted, fit_data, scorer.forward.head, scorer.config.seed)
    if on_layers:
        fit_data = scorer.fit_on_layers(split, on_layers)
    scorer.forward.load_states([k for k in fitted if k.in_model])
    return {f"{split}_s": round(time.perf_counter() - split_start, 3), f"{split}_images": len(fit_data)}


def score_splits(scorer: Scorer) -> tuple[dict[str, SplitScores], dict]:
    """The scores of every evaluation split, from one pass in the run's secret order and its re-check, and their
    timings."""
    start, before = time.perf_counter(), dict(scorer.stats)
    splits = EVAL_SPLITS + tuple(split for split in PRIVATE_SPLITS if scorer.benchmark.shards(split))
    sizes = {split: sum(shard["num_samples"] for shard in scorer.benchmark.shards(split)) for split in splits}
    private = sum(sizes.get(split, 0) for split in PRIVATE_SPLITS)
    among = f" (and {plural(private, 'private test image')} among them)" if private else ""
    phases.say(
        f"{', '.join(EVAL_SPLITS)}{among}: {plural(len(scorer.kappas), 'kappa')} on "
        f"{plural(sum(sizes.values()), 'image')}, in one secret order"
    )
    scores = scorer.passes(splits)
    seconds = time.perf_counter() - start
    phases.say(split_line("evaluation", {k: scorer.stats[k] - before[k] for k in before}, seconds))
    check = scorer.recheck
    if check.get("recheck_images"):
        phases.say(_recheck_line(check, seconds))
    timings = {"evaluation_s": round(seconds, 3), **{f"{split}_images": len(scores[split]) for split in splits}}
    timings["evaluation_first_batch_s"] = scorer.first_batch_s.get(" + ".join(splits))
    return scores, timings | check


def _recheck_line(check: dict, seconds: float) -> str:
    """The line that closes the re-check: how many images, what was compared, what it cost."""
    share = check["recheck_s"] / max(seconds - check["recheck_s"], 1e-9)
    return (
        f"re-check: {plural(check['recheck_images'], 'image')} asked again in "
        f"{plural(check['recheck_batches'], 'batch')} by the file loaded anew, logits, features and "
        f"{plural(len(check['recheck_compared']) // 2 - 1, 'kappa')} within the {check['recheck_tolerance']['device']} "
        f"tolerance ({check['recheck_s']:.1f} s, {share:.1%} of the pass)"
    )


def summed_stats(scorer: Scorer, timings: dict) -> dict | None:
    """The scorer's statistics summed over the ranks (None on the ranks other than 0), once the score cache's cost
    line is said."""
    ranks = scorer.ranks
    per_rank = ranks.gather([scorer.stats])
    if not ranks.is_main:
        return None
    stats = {k: sum(r[k] for r in per_rank) for k in scorer.stats}
    if scorer.cache is not None and scorer.config.keep_logits:
        images = sum(v for k, v in timings.items() if k.endswith("_images"))
        phases.say(cache_cost(scorer.cache, scorer.forward.head, images))
    if ranks.world > 1:
        stats["images_forwarded_per_rank"] = [r["images_forwarded"] for r in per_rank]
    return stats


def resolve_run(config: EvalConfig, device: str, ranks: Ranks) -> tuple[EvalConfig, Execution]:
    """The execution on ``device``, and ``config`` with its workers decided and its progress bars on rank 0 only."""
    execution = Execution.resolve(device, config.amp, config.channels_last, config.compile)
    workers = default_workers(execution.device) if config.workers is None else config.workers
    execution.share_cpu(workers)
    phases.say(execution.summary())
    drawn = interleave.new_order_seed() if config.order_seed is None else config.order_seed
    order_seed = ranks.gather([drawn])[0]  # rank 0's, on every rank
    return replace(
        config,
        workers=workers,
        progress=config.progress and ranks.is_main,
        order_seed=order_seed,
        order_seed_drawn=config.order_seed is None,
    ), execution
