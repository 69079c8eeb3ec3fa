"""One pass of the model over a split: every requested kappa per sample, from the same forward pass."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image
from tqdm import tqdm

from dataset_builder.console import plural
from harness import phases
from harness.config import EvalConfig
from harness.errors import HarnessError
from harness.kappas import KappaSpec, Outputs, check_logits, split_output
from harness.kappas.features import FeatureTap, check_features, check_head
from harness.method.scores import SplitScores
from harness.runtime.execution import Execution
from harness.submission import ClassSubset


def outputs_for(
    spec: KappaSpec, logits: np.ndarray, features: np.ndarray | None, head, labels: np.ndarray | None = None
) -> Outputs:
    """What ``spec`` reads of a pass, checked against what it declares it needs."""
    if spec.reads_features:
        features = check_features(spec.name, features)
    if spec.reads_head:
        head = check_head(spec.name, logits, features, head)
    return Outputs(np.asarray(logits, dtype=np.float64), features, head, labels)


def kappa_scores(logits: np.ndarray, features: np.ndarray | None, head, kappas: list[KappaSpec]) -> tuple[dict, dict]:
    """Scores and confidences of ``kappas`` (none of them needing the model) from one pass's outputs."""
    scores, confs = {}, {}
    for spec in kappas:
        scores[spec.name], confs[spec.name] = spec.impl.score(outputs_for(spec, logits, features, head))
    return scores, confs


def from_outputs(cached: SplitScores, kappas: list[KappaSpec], head) -> SplitScores:
    """Kappas computed from kept logits and features: no pass over the images."""
    scores, confs = kappa_scores(cached.logits.astype(np.float64), cached.features, head, kappas)
    return SplitScores(cached.keys, cached.labels, cached.preds, scores, confs, cached.logits, cached.features)


def fit_kappas(kappas: list[KappaSpec], data: SplitScores, head, seed: int) -> None:
    """Fit every kappa that needs a fit on the fit split's logits, features and labels, seeded (those that read
    intermediate layers: :func:`fit_on_layers`)."""
    for spec in kappas:
        if not spec.needs_fit or spec.reads_layers:
            continue
        phases.say(f"fitting {spec.name} on {len(data):,} images")
        _seeded_fit(spec, seed, spec.impl.fit, outputs_for(spec, data.logits, data.features, head, data.labels))


def fit_on_layers(kappas: list[KappaSpec], parts: dict[str, list[dict]], labels: np.ndarray, seed: int) -> None:
    """Fit the kappas that read intermediate layers on what the model's process extracted from the fit split
    (``parts``: per kappa, one dict of arrays per batch, in the order of ``labels``), seeded."""
    for spec in kappas:
        phases.say(f"fitting {spec.name} on {len(labels):,} images")
        _seeded_fit(spec, seed, spec.impl.fit_extracted, parts[spec.name], labels)


def _seeded_fit(spec: KappaSpec, seed: int, fit, *args) -> None:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            fit(*args)
        except HarnessError:
            raise
        except Exception as exc:  # a detector's own checks (too few samples for k, a singular covariance)
            raise HarnessError(f"fitting kappa '{spec.name}' failed: {type(exc).__name__}: {exc}") from exc


@dataclass
class ModelOutput:
    """One batch through the model: logits, features (or None), and the kappas computed beside the model."""

    logits: np.ndarray
    features: np.ndarray | None
    scores: dict[str, np.ndarray]
    confs: dict[str, np.ndarray]


class LocalForward:
    """The model's forward pass (logits and features), and the kappas computed beside the model
    (:attr:`KappaSpec.in_model`), in this process. A batch comes with pixels and its rows' seeds for the seeded kappas
    (MC-dropout's masks), nothing else: no key, class or split."""

    isolation = {"mode": "in-process"}

    def __init__(
        self, model: torch.nn.Module, execution: Execution, num_classes: int, subset: ClassSubset | None = None
    ):
        self.model, self.execution, self.num_classes, self.subset = model, execution, num_classes, subset
        self.tap = FeatureTap(model, num_classes if subset is None else subset.total)

    @property
    def head(self):
        """The model's last layer ``(weight, bias)``, float64, or None; for a model restricted to a subset of its
        classes (``subset``), the rows of the ID classes."""
        return self.tap.head if self.subset is None else self.subset.head(self.tap.head)

    def __call__(self, images: torch.Tensor, seeds: np.ndarray, kappas: list[KappaSpec]) -> ModelOutput:
        return self.launch(images, seeds, kappas).result()

    def launch(self, images: torch.Tensor, seeds: np.ndarray, kappas: list[KappaSpec]) -> Pending:
        """A batch's forward pass and the passes of the kappas that need the model; its logits and features on their
        way to the host (from a GPU, copied asynchronously into pinned memory: :meth:`Pending.result` waits)."""
        images = self.execution.inputs(images)
        try:
            with torch.inference_mode(), self.execution.autocast():
                output = self.model(images)
        except torch.cuda.OutOfMemoryError:
            raise
        except Exception as exc:  # the model's code: any failure is reported in one line
            raise HarnessError(f"the model's forward pass failed: {type(exc).__name__}: {exc}") from exc
        logits, features = split_output(output)
        tapped = self.tap.take()
        features = tapped if features is None else features
        host = [None if t is None else _to_host(t.float()) for t in (logits, features)]
        ready = None
        if self.execution.device.type == "cuda":
            ready = torch.cuda.Event()
            ready.record(torch.cuda.current_stream(self.execution.device))
        scores, confs = {}, {}
        for spec in kappas:
            if not spec.needs_model:
                continue
            try:
                with self.execution.autocast():
                    score, conf = spec.impl.score_model(self.model, images, seeds)
                scores[spec.name], confs[spec.name] = score.cpu().numpy(), conf.cpu().numpy()
            except HarnessError:
                raise
            except Exception as exc:  # the model's code
                raise HarnessError(f"kappa '{spec.name}' failed: {type(exc).__name__}: {exc}") from exc
        self.tap.clear()  # drop what the kappas' own passes captured
        return Pending(host, ready, scores, confs, [k for k in kappas if not k.needs_model], self.num_classes)

    def extract(self, images: torch.Tensor, kappas: list[KappaSpec]) -> dict[str, dict]:
        """What the kappas that read intermediate layers need of a batch of the fit split, per kappa."""
        images = self.execution.inputs(images)
        extracted = {}
        for spec in kappas:
            try:
                with self.execution.autocast():
                    extracted[spec.name] = spec.impl.extract(self.model, images)
            except HarnessError:
                raise
            except Exception as exc:  # the model's code, or a layer that does not fit the detector
                raise HarnessError(f"kappa '{spec.name}' failed: {type(exc).__name__}: {exc}") from exc
        self.tap.clear()
        return extracted

    def load_states(self, kappas: list[KappaSpec]) -> None:
        """The fitted kappas are the ones scored here: nothing to carry."""

    def close(self) -> None:
        pass


def _to_host(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` on the host: from a GPU, an asynchronous copy into pinned memory (valid once the stream gets
    there)."""
    if tensor.device.type != "cuda":
        return tensor.cpu()
    host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
    return host.copy_(tensor, non_blocking=True)


class Pending:
    """A launched batch's outputs: :meth:`result` waits for its copies to the host, checks the logits and computes
    the submission's own kappas (in this process)."""

    def __init__(self, host: list, ready, scores: dict, confs: dict, own: list[KappaSpec], num_classes: int):
        self.host, self.ready, self.scores, self.confs, self.own, self.num_classes = (
            host,
            ready,
            scores,
            confs,
            own,
            num_classes,
        )

    def result(self) -> ModelOutput:
        if self.ready is not None:
            self.ready.synchronize()
        logits = check_logits(self.host[0].numpy(), self.num_classes)
        features = None if self.host[1] is None else self.host[1].numpy()
        scores, confs = dict(self.scores), dict(self.confs)
        for spec in self.own:
            try:
                own = kappa_scores(logits, features, None, [spec])
            except HarnessError:
                raise
            except Exception as exc:  # the submitter's code
                raise HarnessError(f"kappa '{spec.name}' failed: {type(exc).__name__}: {exc}") from exc
            scores |= own[0]
            confs |= own[1]
        return ModelOutput(logits, features, scores, confs)


class Done:
    """Outputs already on the host (a forward pass without :meth:`LocalForward.launch`, as a sandboxed model's)."""

    def __init__(self, output: ModelOutput):
        self.output = output

    def result(self) -> ModelOutput:
        return self.output


def gives_features(forward, transform, channels: int) -> bool:
    """Whether the model returns features of its own: one trial pass on a blank image (no image of the benchmark)."""
    image = transform(Image.new("L" if channels == 1 else "RGB", (320, 240)))
    return forward(image[None], 0, []).features is not None


def _launch(forward, images: torch.Tensor, seeds: np.ndarray, kappas: list[KappaSpec]):
    """``forward``'s pass over a batch, launched (:class:`Pending`) where it can be, else done (:class:`Done`)."""
    in_model = [k for k in kappas if k.in_model]
    if hasattr(forward, "launch"):
        return forward.launch(images, seeds, in_model)
    return Done(forward(images, seeds, in_model))


def _finish(
    forward,
    out: ModelOutput,
    keys: list[str],
    labels: np.ndarray,
    num_classes: int,
    kappas: list[KappaSpec],
    keep_logits: bool,
    feature_dtype: str,
) -> SplitScores:
    """The batch's scores from its model outputs: every kappa not computed beside the model, from the logits and the
    features (rounded to ``feature_dtype`` first, so that kappas read the same values now as from the cache later);
    ``keep_logits`` keeps logits and features."""
    logits = check_logits(out.logits, num_classes)
    features = None if out.features is None else out.features.astype(feature_dtype).astype(np.float32)
    scores, confs = kappa_scores(logits, features, forward.head, [k for k in kappas if not k.in_model])
    for spec in kappas:
        if spec.name not in scores:
            scores[spec.name], confs[spec.name] = out.scores[spec.name], out.confs[spec.name]
        for values in (scores[spec.name], confs[spec.name]):
            if np.shape(values) != (len(keys),):
                raise HarnessError(f"kappa '{spec.name}' returned shape {np.shape(values)}, expected ({len(keys)},)")
            if not np.all(np.isfinite(values)):
                raise HarnessError(f"kappa '{spec.name}' produced NaN or infinite scores")
    return SplitScores(
        np.asarray(keys),
        labels,
        logits.argmax(axis=1),
        scores,
        confs,
        logits if keep_logits else None,
        features if keep_logits else None,
    )


def score_batch_adaptive(
    forward,
    batch: dict,
    num_classes: int,
    kappas: list[KappaSpec],
    keep_logits: bool = False,
    feature_dtype: str = EvalConfig.feature_dtype,
) -> SplitScores:
    """All kappas of one batch from one forward pass (plus the passes of the kappas that need the model, seeded by the
    batch's rows' ``"seeds"``), halving the batch on CUDA out-of-memory until it fits (a single image must fit)."""
    return launch_adaptive(forward, batch, num_classes, kappas, keep_logits, feature_dtype)()


def launch_adaptive(
    forward,
    batch: dict,
    num_classes: int,
    kappas: list[KappaSpec],
    keep_logits: bool = False,
    feature_dtype: str = EvalConfig.feature_dtype,
) -> Callable[[], SplitScores]:
    """:func:`score_batch_adaptive` launched: the forward pass now, the rest when the returned function is called
    (after the next batch's launch, so that the device and the host work at once). The results are in the batch's
    order; the seeded kappas take the batch's rows' ``"seeds"`` (its halves, theirs). Out of memory at the
    launch or in the answer (a sandboxed model's comes with its answer) halves the batch."""
    keys, labels = batch["keys"], batch["labels"].numpy()
    try:
        pending = _launch(forward, batch["images"], _seeds(batch), kappas)
    except torch.cuda.OutOfMemoryError as exc:
        scored = _halved(forward, batch, num_classes, kappas, keep_logits, feature_dtype, exc)
        return lambda: scored

    def collected() -> SplitScores:
        try:
            out = pending.result()
        except torch.cuda.OutOfMemoryError as exc:
            return _halved(forward, batch, num_classes, kappas, keep_logits, feature_dtype, exc)
        return _finish(forward, out, keys, labels, num_classes, kappas, keep_logits, feature_dtype)

    return collected


def _halved(forward, batch: dict, num_classes: int, kappas, keep_logits: bool, feature_dtype: str, exc) -> SplitScores:
    """A batch that ran out of memory, scored in two halves (each halved again as it needs), in the batch's order."""
    keys, seeds = batch["keys"], _seeds(batch)
    if len(keys) == 1:
        raise HarnessError("out of memory on a single image; use a smaller model, --amp, or another device") from exc
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    half = len(keys) // 2
    halves = [
        {"keys": keys[part], "images": batch["images"][part], "labels": batch["labels"][part], "seeds": seeds[part]}
        for part in (slice(0, half), slice(half, None))
    ]
    joined = SplitScores.concat(
        [score_batch_adaptive(forward, h, num_classes, kappas, keep_logits, feature_dtype) for h in halves]
    )
    return joined.take(np.searchsorted(joined.keys, np.asarray(keys)))  # back in the batch's order


def _seeds(batch: dict) -> np.ndarray:
    """A batch's rows' seeds for the seeded kappas (see :func:`harness.runtime.interleave.row_seeds`; zeros where a
    batch has none)."""
    return np.asarray(batch["seeds"], dtype=np.int64) if "seeds" in batch else np.zeros(len(batch["keys"]), np.int64)


def named(batch: dict) -> str:
    """A batch's shards in a few words, for a one-line error: its first shard, and how many more."""
    paths = list(dict.fromkeys(batch.get("rows", []))) or [batch["shard"]]
    more = len(paths) - 1
    return paths[0] + (f" (and {plural(more, 'more shard')} in its batch)" if more else "")


def score_mixed(
    forward,
    batches: Iterable[dict],
    shard_sizes: dict[str, int],
    num_classes: int,
    kappas: list[KappaSpec],
    progress: tqdm | None = None,
    feature_dtype: str = EvalConfig.feature_dtype,
    answered: Callable[[dict, SplitScores], None] | None = None,
) -> Iterator[tuple[str, SplitScores]]:
    """Score mixed batches (:class:`harness.runtime.interleave.Mixer`: each row names its shard under ``"rows"``)
    and yield ``(shard path, its scores)``, sorted by key, logits and features kept, as soon as a shard's every row is
    scored. ``answered(batch, scores)`` sees each batch's scores (the re-check's first answers). The next batch is
    launched before the last is collected; an error names the first shard of the batch that failed."""
    pending: dict[str, list[SplitScores]] = {}
    done: dict[str, int] = {}

    def collected(batch: dict, launched: Callable[[], SplitScores]) -> Iterator[tuple[str, SplitScores]]:
        try:
            scored = launched()
        except HarnessError as exc:
            raise HarnessError(f"shard {named(batch)}: {exc}") from exc
        if answered is not None:
            answered(batch, scored)
        if progress is not None:
            progress.update(len(batch["keys"]))
        paths, rows = np.unique(batch["rows"], return_inverse=True)
        for i, path in enumerate(paths.tolist()):
            mine = np.flatnonzero(rows == i)
            pending.setdefault(path, []).append(scored.take(mine))
            done[path] = done.get(path, 0) + len(mine)
            if done[path] == shard_sizes[path]:
                yield path, SplitScores.concat(pending.pop(path))

    in_flight = None  # the batch launched last, collected once the next one is launched
    for batch in batches:
        failure, launched = batch.get("error"), None
        if failure is None:
            try:
                launched = launch_adaptive(forward, batch, num_classes, kappas, True, feature_dtype)
            except HarnessError as exc:
                failure = f"shard {named(batch)}: {exc}"
        if in_flight is not None:  # the batch before is collected (its shards cached) even when this one failed
            yield from collected(*in_flight)
        if failure is not None:
            raise HarnessError(failure)
        in_flight = batch, launched
    if in_flight is not None:
        yield from collected(*in_flight)
    if pending:
        shard = next(iter(pending))
        raise HarnessError(f"shard {shard} yielded {done[shard]} samples, the manifest says {shard_sizes[shard]}")
