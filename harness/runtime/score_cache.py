"""Per-shard score cache: a killed run resumes where it stopped, and a new kappa needs no new pass over the
images when the logits and features were kept.

Layout: ``<root>/<run key>/<split>/<shard path with / as __>.<its sha256, 16 digits>.scores``. The run key hashes
what fixes the scores' bits: benchmark revision (its public manifest: a private part's shards are told apart by
their sha256 in the name), model weights, the code that turns them into logits (a submission file's bundle
hash, else the target), preprocessing, numerics (device type, autocast,
memory format) and the harness version. Inside a file every kappa is stored under an id that hashes its parameters (and,
for MC-dropout, the seed and the order seed; a submission's kappa has its code's hash among its parameters).

An entry is one line with the sha256 of the rest, then the arrays as an ``.npz``; it also names its split and shard.
It is written to a temporary name and renamed, so a kill leaves whole files or none; it is not flushed to disk, since a
file torn by a crash of the machine fails its checksum. An entry that fails its checksum, belongs to another shard or
holds another number of samples than the manifest lists is reported in one warning line, discarded and scored again;
a cache that cannot be written is still read, and the run goes on without writing it.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from dataset_builder.files import write_atomic
from harness import __version__
from harness.bundle import tag_cache
from harness.config import EvalConfig
from harness.method.scores import SplitScores
from harness.runtime.inference import KappaSpec


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def run_key(benchmark_sha256: str, weights_sha256: str, code: str, preprocessing: dict, numerics: dict) -> str:
    """The cache folder of a run; the harness version is part of it, so a fixed harness never reuses old scores, and
    so is ``code``, so that other code with the same weights never shares them."""
    return _digest([benchmark_sha256, weights_sha256, code, preprocessing, numerics, __version__])[:24]


def kappa_id(spec: KappaSpec, seed: int, order_seed: int) -> str:
    """The cache id of a kappa: its name and a hash of everything that defines its values."""
    defining = {"params": spec.params}  # a submission's kappa carries its code's sha256 among them
    if spec.seeded:  # stochastic passes: the values depend on the rows' seeds, which the order seed draws
        defining.update(seed=seed, order_seed=order_seed)
    return f"{spec.name}-{_digest(defining)[:12]}"


def warn(message: str) -> None:
    """One warning line on stderr."""
    print(f"warning: {message}", file=sys.stderr, flush=True)


class Damaged(Exception):
    """A cache entry that cannot be trusted; the message says why."""


def encode(arrays: dict[str, np.ndarray]) -> bytes:
    """An entry's bytes: the sha256 of the ``.npz`` of ``arrays``, a newline, then that ``.npz``."""
    body = io.BytesIO()
    np.savez(body, **arrays)
    body = body.getvalue()
    return hashlib.sha256(body).hexdigest().encode() + b"\n" + body


def decode(data: bytes) -> dict[str, np.ndarray]:
    """The arrays of an entry's bytes, once its checksum matches."""
    digest, _, body = data.partition(b"\n")
    if hashlib.sha256(body).hexdigest().encode() != digest:
        raise Damaged(f"its checksum does not match its {len(data)} bytes")
    with np.load(io.BytesIO(body), allow_pickle=False) as npz:
        return {name: npz[name] for name in npz.files}


class ScoreCache:
    """Reads and writes per-shard :class:`SplitScores` under one run key, by kappa id."""

    def __init__(self, folder: Path, ids: dict[str, str], feature_dtype: str = EvalConfig.feature_dtype):
        self.folder, self.ids, self.feature_dtype = folder, ids, feature_dtype  # ids: kappa name -> kappa id
        self.writable = True

    def _path(self, split: str, shard: dict) -> Path:
        """A shard's entry, named by its path and its bytes' sha256: a private part drawn anew under the same public
        benchmark (the same run key) has shards of the same paths and other images, whose scores are not these."""
        return self.folder / split / f"{shard['path'].replace('/', '__')}.{shard['sha256'][:16]}.scores"

    def _read(self, split: str, shard: dict) -> dict[str, np.ndarray] | None:
        """The arrays stored for a shard, or None when there are none (a damaged entry is reported and removed)."""

        def check(arrays: dict) -> None:
            if str(arrays["shard"]) != f"{split}/{shard['path']}":
                raise Damaged(f"it holds the scores of {arrays['shard']}")
            if len(arrays["keys"]) != shard["num_samples"]:
                raise Damaged(f"it holds {len(arrays['keys'])} samples, the manifest lists {shard['num_samples']}")

        return read_entry(self._path(split, shard), check, "score cache", "scored")

    def load(self, split: str, shard: dict) -> tuple[SplitScores, set[str]] | None:
        """The cached scores of a shard (a manifest entry: only the kappas of this run that are there) and the names
        of those kappas."""
        arrays = self._read(split, shard)
        if arrays is None:
            return None
        present = {name for name, kid in self.ids.items() if f"score:{kid}" in arrays}
        scores = SplitScores(
            arrays["keys"],
            arrays["labels"],
            arrays["preds"],
            {n: arrays[f"score:{self.ids[n]}"] for n in present},
            {n: arrays[f"conf:{self.ids[n]}"] for n in present},
            arrays.get("logits"),
            None if arrays.get("features") is None else arrays["features"].astype(np.float32),
        )
        return scores, present

    def save(self, split: str, shard: dict, scores: SplitScores) -> None:
        """Store a shard's scores, keeping kappas stored earlier for it; when the cache cannot be written, say so once
        and stop writing it."""
        if not self.writable:
            return
        arrays = self._read(split, shard) or {}
        arrays.update(
            shard=np.array(f"{split}/{shard['path']}"),
            keys=scores.keys.astype(str),
            labels=scores.labels,
            preds=scores.preds,
        )
        for name in scores.scores:
            arrays[f"score:{self.ids[name]}"] = scores.scores[name]
            arrays[f"conf:{self.ids[name]}"] = scores.confs[name]
        if scores.logits is not None:
            arrays["logits"] = scores.logits
        if scores.features is not None:
            arrays["features"] = scores.features.astype(self.feature_dtype)
        try:
            tag_cache(self.folder.parent)
            path = self._path(split, shard)
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, encode(arrays), durable=False)
        except OSError as exc:
            self.writable = False
            warn(
                f"cannot write the score cache in {self.folder} ({exc.strerror or exc}); "
                "the run goes on without caching"
            )

    def drop(self) -> None:
        """Remove every entry of this run key: a model that failed its re-check leaves none to be served again."""
        shutil.rmtree(self.folder, ignore_errors=True)


def read_entry(path: Path, check: Callable[[dict], None], cache: str, again: str) -> dict[str, np.ndarray] | None:
    """The arrays of a cache entry that passes its checksum and ``check`` (which raises :class:`Damaged`), or None:
    none there, or a damaged one, reported in one line and removed (its shard is then ``again``, e.g. "scored")."""
    if not path.is_file():
        return None
    try:
        arrays = decode(path.read_bytes())
        check(arrays)
    except (Damaged, OSError, ValueError, KeyError) as exc:
        warn(
            f"{cache} entry {path} is unusable ({exc.strerror if isinstance(exc, OSError) else exc}); "
            f"it is discarded and its shard {again} again"
        )
        with contextlib.suppress(OSError):  # a read-only cache keeps it
            path.unlink()
        return None
    return arrays
