"""One pass of the model over a split: every requested kappa per sample, from the same forward pass."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import torch
from tqdm import tqdm

from harness.errors import HarnessError
from harness.kappas import BUILTIN_LOGIT_KAPPAS, MODEL_KAPPAS, LogitKappa, check_logits
from harness.model_kappas import MC_DROPOUT_PASSES, ODIN_PRESETS, logits_of, mc_dropout, odin


@dataclass(frozen=True)
class KappaSpec:
    """A requested kappa: its name, the parameters that define it, and how it is computed."""

    name: str
    params: dict = field(default_factory=dict)
    logit: LogitKappa | None = None


def resolve_kappas(names: Iterable[str], user_kappas: dict[str, LogitKappa] | None = None, odin_preset: str = "paper",
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
                raise HarnessError(f"unknown ODIN preset '{odin_preset}'; known: {', '.join(ODIN_PRESETS)}")
            specs.append(KappaSpec(name, {"preset": odin_preset, **ODIN_PRESETS[odin_preset]}))
        elif name == "mc_dropout":
            if mc_passes < 1:
                raise HarnessError(f"mc_dropout needs at least one pass, got {mc_passes}")
            specs.append(KappaSpec(name, {"passes": mc_passes}))
        else:
            known = [*BUILTIN_LOGIT_KAPPAS, *MODEL_KAPPAS, *user_kappas]
            raise HarnessError(f"unknown kappa '{name}'; known: {', '.join(known)}")
    if not specs:
        raise HarnessError("no kappa requested")
    return specs


@dataclass
class SplitScores:
    """Per-sample results of one split, sorted by sample key."""

    keys: np.ndarray
    labels: np.ndarray
    preds: np.ndarray
    scores: dict[str, np.ndarray]
    confs: dict[str, np.ndarray]

    @classmethod
    def concat(cls, parts: list["SplitScores"], kappas: list[str]) -> "SplitScores":
        if not parts:
            raise HarnessError("a split produced no samples")
        keys = np.concatenate([p.keys for p in parts])
        order = np.argsort(keys, kind="stable")
        if len(np.unique(keys)) != len(keys):
            raise HarnessError("a sample key occurs twice in the benchmark")
        pick = lambda arrays: np.concatenate(arrays)[order]  # noqa: E731
        return cls(keys[order], pick([p.labels for p in parts]), pick([p.preds for p in parts]),
                   {k: pick([p.scores[k] for p in parts]) for k in kappas},
                   {k: pick([p.confs[k] for p in parts]) for k in kappas})


def _batch_seed(seed: int, first_key: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}/{first_key}".encode()).digest()[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF


def score_batch(model: torch.nn.Module, batch: dict, num_classes: int, kappas: list[KappaSpec], device: torch.device,
                seed: int) -> SplitScores:
    """All kappas of one batch: one forward pass for every logit kappa, plus ODIN's and MC-dropout's own passes."""
    images = batch["images"].to(device, non_blocking=True)
    with torch.inference_mode():
        output = model(images)
    logits = check_logits(logits_of(output).float().cpu().numpy(), num_classes)
    features = output[1].float().cpu().numpy() if isinstance(output, (tuple, list)) and len(output) > 1 else None
    scores, confs = {}, {}
    for spec in kappas:
        if spec.logit is not None:
            if spec.logit.wants_features and features is None:
                raise HarnessError(f"kappa '{spec.name}' needs features, but the model returns logits only")
            scores[spec.name], confs[spec.name] = spec.logit(logits, features)
        elif spec.name == "odin":
            score, conf = odin(model, images, spec.params["temperature"], spec.params["epsilon"])
            scores[spec.name], confs[spec.name] = score.cpu().numpy(), conf.cpu().numpy()
        else:
            score = mc_dropout(model, images, spec.params["passes"], _batch_seed(seed, batch["keys"][0]))
            scores[spec.name] = confs[spec.name] = score.cpu().numpy()
        if not np.all(np.isfinite(scores[spec.name])):
            raise HarnessError(f"kappa '{spec.name}' produced NaN or infinite scores")
    return SplitScores(np.asarray(batch["keys"]), batch["labels"].numpy(), logits.argmax(axis=1), scores, confs)


def score_split(model: torch.nn.Module, batches: Iterable[dict], num_classes: int, kappas: list[KappaSpec],
                device: torch.device, seed: int, total: int | None = None, desc: str = "", progress: bool = True) -> SplitScores:
    """Score every batch of a split; the result is sorted by sample key (independent of loading order)."""
    parts = []
    with tqdm(total=total, desc=desc, unit="img", disable=not progress, leave=False) as bar:
        for batch in batches:
            parts.append(score_batch(model, batch, num_classes, kappas, device, seed))
            bar.update(len(batch["keys"]))
    return SplitScores.concat(parts, [k.name for k in kappas])
