"""One pass of the model over a split: every requested kappa per sample, from the same forward pass."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Iterable, Iterator

import numpy as np
import torch
from tqdm import tqdm

from harness.errors import HarnessError
from harness.method.scores import SplitScores
from harness.kappas import BUILTIN_LOGIT_KAPPAS, MODEL_KAPPAS, LogitKappa, check_logits
from harness.execution import Execution
from harness.model_kappas import MC_DROPOUT_PASSES, ODIN_PRESETS, mc_dropout, odin, split_output

DEFAULT_ODIN_PRESET = "paper"


@dataclass(frozen=True)
class KappaSpec:
    """A requested kappa: its name, the parameters that define it, and how it is computed."""

    name: str
    params: dict = field(default_factory=dict)
    logit: LogitKappa | None = None


def resolve_kappas(names: Iterable[str], user_kappas: dict[str, LogitKappa] | None = None, odin_preset: str = DEFAULT_ODIN_PRESET,
                   mc_passes: int = MC_DROPOUT_PASSES) -> list[KappaSpec]:
    """Turn kappa names into specs; unknown names are an error that lists the known ones."""
    user_kappas = user_kappas or {}
    specs = []
    for name in dict.fromkeys(names):
        if name in BUILTIN_LOGIT_KAPPAS:
            specs.append(KappaSpec(name, dict(BUILTIN_LOGIT_KAPPAS[name].params), BUILTIN_LOGIT_KAPPAS[name]))
        elif name in user_kappas:
            specs.append(KappaSpec(name, dict(user_kappas[name].params), user_kappas[name]))
        elif name == "odin":
            if odin_preset not in ODIN_PRESETS:
                raise HarnessError(f"--odin-preset '{odin_preset}' is unknown; known: {', '.join(ODIN_PRESETS)}")
            specs.append(KappaSpec(name, {"preset": odin_preset, **ODIN_PRESETS[odin_preset]}))
        elif name == "mc_dropout":
            if mc_passes < 1:
                raise HarnessError(f"--mc-passes must be at least 1, got {mc_passes}")
            specs.append(KappaSpec(name, {"passes": mc_passes}))
        else:
            known = [*BUILTIN_LOGIT_KAPPAS, *MODEL_KAPPAS, *user_kappas]
            raise HarnessError(f"unknown kappa '{name}'; known: {', '.join(known)}")
    if not specs:
        raise HarnessError("no kappa requested")
    return specs


def logit_kappa_scores(logits: np.ndarray, features: np.ndarray | None, kappas: list[KappaSpec]) -> tuple[dict, dict]:
    """Scores and confidences of the logit kappas among ``kappas``."""
    scores, confs = {}, {}
    for spec in kappas:
        if spec.logit is None:
            continue
        if spec.logit.wants_features and features is None:
            raise HarnessError(f"kappa '{spec.name}' needs features, but the model returns logits only (or they were not kept)")
        scores[spec.name], confs[spec.name] = spec.logit(logits, features)
    return scores, confs


def from_logits(cached: SplitScores, kappas: list[KappaSpec]) -> SplitScores:
    """Logit kappas computed from kept logits: no pass over the images."""
    scores, confs = logit_kappa_scores(cached.logits.astype(np.float64), None, kappas)
    return SplitScores(cached.keys, cached.labels, cached.preds, scores, confs, cached.logits)


def _batch_seed(seed: int, first_key: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}/{first_key}".encode()).digest()[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF


def owned_by_model(spec: KappaSpec) -> bool:
    """A kappa computed where the model runs: it needs the model (ODIN, MC-dropout) or is the submitter's own code."""
    return spec.logit is None or spec.params.get("source") == "submission"


@dataclass
class ModelOutput:
    """One batch through the model: logits, features (or None), and the kappas computed beside the model."""

    logits: np.ndarray
    features: np.ndarray | None
    scores: dict[str, np.ndarray]
    confs: dict[str, np.ndarray]


class LocalForward:
    """The model's forward pass, and the kappas owned by the model (:func:`owned_by_model`), in this process."""

    isolation = {"mode": "in-process"}

    def __init__(self, model: torch.nn.Module, execution: Execution, num_classes: int, seed: int):
        self.model, self.execution, self.num_classes, self.seed = model, execution, num_classes, seed

    def __call__(self, images: torch.Tensor, keys: list[str], kappas: list[KappaSpec]) -> ModelOutput:
        images = self.execution.inputs(images)
        try:
            with torch.inference_mode(), self.execution.autocast():
                output = self.model(images)
        except torch.cuda.OutOfMemoryError:
            raise
        except Exception as exc:  # the model's code: any failure is reported in one line
            raise HarnessError(f"the model's forward pass failed: {type(exc).__name__}: {exc}") from None
        logits, features = split_output(output)
        logits = check_logits(logits.float().cpu().numpy(), self.num_classes)
        features = None if features is None else features.float().cpu().numpy()
        scores, confs = {}, {}
        for spec in kappas:
            if spec.logit is not None:  # the submission's own kappa
                try:
                    own = logit_kappa_scores(logits, features, [spec])
                except HarnessError:
                    raise
                except Exception as exc:  # the submitter's code
                    raise HarnessError(f"kappa '{spec.name}' failed: {type(exc).__name__}: {exc}") from None
                scores |= own[0]
                confs |= own[1]
            elif spec.name == "odin":
                with self.execution.autocast():
                    score, conf = odin(self.model, images, spec.params["temperature"], spec.params["epsilon"])
                scores[spec.name], confs[spec.name] = score.cpu().numpy(), conf.cpu().numpy()
            elif spec.name == "mc_dropout":
                with self.execution.autocast():
                    score = mc_dropout(self.model, images, spec.params["passes"], _batch_seed(self.seed, keys[0]))
                scores[spec.name] = confs[spec.name] = score.cpu().numpy()
        return ModelOutput(logits, features, scores, confs)

    def close(self) -> None:
        pass


def score_batch(forward, images: torch.Tensor, keys: list[str], labels: np.ndarray, num_classes: int,
                kappas: list[KappaSpec], keep_logits: bool = False) -> SplitScores:
    """All kappas of one batch: one forward pass for every logit kappa, plus ODIN's and MC-dropout's own passes.

    ``forward`` (:class:`LocalForward`, or a model in a child process) returns the logits and the kappas owned
    by the model; the built-in logit kappas are computed here, from the logits.
    """
    out = forward(images, keys, [k for k in kappas if owned_by_model(k)])
    logits = check_logits(out.logits, num_classes)
    scores, confs = logit_kappa_scores(logits, out.features, [k for k in kappas if not owned_by_model(k)])
    for spec in kappas:
        if spec.name not in scores:
            scores[spec.name], confs[spec.name] = out.scores[spec.name], out.confs[spec.name]
        for values in (scores[spec.name], confs[spec.name]):
            if np.shape(values) != (len(keys),):
                raise HarnessError(f"kappa '{spec.name}' returned shape {np.shape(values)}, expected ({len(keys)},)")
            if not np.all(np.isfinite(values)):
                raise HarnessError(f"kappa '{spec.name}' produced NaN or infinite scores")
    return SplitScores(np.asarray(keys), labels, logits.argmax(axis=1), scores, confs, logits if keep_logits else None)


def score_batch_adaptive(forward, batch: dict, num_classes: int, kappas: list[KappaSpec], keep_logits: bool = False) -> SplitScores:
    """:func:`score_batch`, halving the batch on CUDA out-of-memory until it fits (a single image must fit)."""
    try:
        return score_batch(forward, batch["images"], batch["keys"], batch["labels"].numpy(), num_classes, kappas, keep_logits)
    except torch.cuda.OutOfMemoryError:
        if len(batch["keys"]) == 1:
            raise HarnessError("out of memory on a single image; use a smaller model, --amp, or another device") from None
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    half = len(batch["keys"]) // 2
    halves = [{"keys": batch["keys"][part], "images": batch["images"][part], "labels": batch["labels"][part]}
              for part in (slice(0, half), slice(half, None))]
    return SplitScores.concat([score_batch_adaptive(forward, h, num_classes, kappas, keep_logits) for h in halves])


def score_shards(forward, batches: Iterable[dict], shard_sizes: dict[str, int], num_classes: int, kappas: list[KappaSpec],
                 keep_logits: bool = False, progress: tqdm | None = None) -> Iterator[tuple[str, SplitScores]]:
    """Score streamed batches and yield ``(shard path, its scores)`` as soon as a shard is complete; an error names
    the shard of the batch that failed."""
    pending: dict[str, list[SplitScores]] = {}
    for batch in batches:
        if "error" in batch:
            raise HarnessError(batch["error"])
        shard = batch["shard"]
        try:
            scored = score_batch_adaptive(forward, batch, num_classes, kappas, keep_logits)
        except HarnessError as exc:
            raise HarnessError(f"shard {shard}: {exc}") from None
        pending.setdefault(shard, []).append(scored)
        if progress is not None:
            progress.update(len(batch["keys"]))
        done = sum(len(part) for part in pending[shard])
        if done == shard_sizes[shard]:
            yield shard, SplitScores.concat(pending.pop(shard))
    if pending:
        shard = next(iter(pending))
        raise HarnessError(f"shard {shard} yielded {sum(len(p) for p in pending[shard])} samples, the manifest says {shard_sizes[shard]}")
