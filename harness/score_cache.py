"""Per-shard score cache: a killed run resumes where it stopped, and a new kappa needs no new pass over the
images when the logits and features were kept.

Layout: ``<root>/<run key>/<split>/<shard path with / as __>.npz``. The run key hashes what fixes the
scores' bits: benchmark revision, model weights, preprocessing, numerics (device type, autocast,
memory format) and the harness version. Inside a file every kappa is stored under an id that hashes its parameters (and,
for MC-dropout, the seed and batch size; a submission's kappa has its code's hash among its parameters). Files are
written to a temporary name and renamed, so a kill leaves whole files or none.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from harness import __version__
from harness.inference import KappaSpec
from harness.method.scores import SplitScores


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def run_key(benchmark_sha256: str, weights_sha256: str, preprocessing: dict, numerics: dict) -> str:
    """The cache folder of a run; the harness version is part of it, so a fixed harness never reuses old scores."""
    return _digest([benchmark_sha256, weights_sha256, preprocessing, numerics, __version__])[:24]


def kappa_id(spec: KappaSpec, seed: int, batch_size: int) -> str:
    """The cache id of a kappa: its name and a hash of everything that defines its values."""
    defining = {"params": spec.params}  # a submission's kappa carries its code's sha256 among them
    if spec.seeded:  # stochastic passes: the values depend on the seed and the batches
        defining.update(seed=seed, batch_size=batch_size)
    return f"{spec.name}-{_digest(defining)[:12]}"


class ScoreCache:
    """Reads and writes per-shard :class:`SplitScores` under one run key, by kappa id."""

    def __init__(self, folder: Path, ids: dict[str, str]):
        self.folder, self.ids = folder, ids  # ids: kappa name -> kappa id

    def _path(self, split: str, shard: str) -> Path:
        return self.folder / split / (shard.replace("/", "__") + ".npz")

    def load(self, split: str, shard: str) -> tuple[SplitScores, set[str]] | None:
        """The cached scores of a shard (only the kappas of this run that are there) and the names of those kappas."""
        path = self._path(split, shard)
        if not path.is_file():
            return None
        with np.load(path, allow_pickle=False) as data:
            present = {name for name, kid in self.ids.items() if f"score:{kid}" in data}
            scores = SplitScores(data["keys"], data["labels"], data["preds"],
                                 {n: data[f"score:{self.ids[n]}"] for n in present}, {n: data[f"conf:{self.ids[n]}"] for n in present},
                                 data["logits"] if "logits" in data else None,
                                 data["features"] if "features" in data else None)
        return scores, present

    def save(self, split: str, shard: str, scores: SplitScores) -> None:
        """Store a shard's scores, keeping kappas stored earlier for it."""
        path = self._path(split, shard)
        arrays = {}
        if path.is_file():
            with np.load(path, allow_pickle=False) as old:
                arrays = {k: old[k] for k in old.files}
        arrays.update(keys=scores.keys.astype(str), labels=scores.labels, preds=scores.preds)
        for name in scores.scores:
            arrays[f"score:{self.ids[name]}"] = scores.scores[name]
            arrays[f"conf:{self.ids[name]}"] = scores.confs[name]
        if scores.logits is not None:
            arrays["logits"] = scores.logits
        if scores.features is not None:
            arrays["features"] = scores.features.astype(np.float32)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + f".{os.getpid()}.partial")
        with open(partial, "wb") as f:
            np.savez(f, **arrays)
        os.replace(partial, path)
