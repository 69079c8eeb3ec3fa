"""Per-sample results of a split: keys, labels, predictions, and every kappa's ranking score and reported value."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.errors import HarnessError


@dataclass
class SplitScores:
    """Per-sample results (of a shard or a whole split), sorted by sample key; logits and features only when kept."""

    keys: np.ndarray
    labels: np.ndarray
    preds: np.ndarray
    scores: dict[str, np.ndarray]
    confs: dict[str, np.ndarray]
    logits: np.ndarray | None = None
    features: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.keys)

    @classmethod
    def concat(cls, parts: list[SplitScores]) -> SplitScores:
        """All parts in one, sorted by key; a key seen twice is an error (every sample is scored once)."""
        if not parts:
            raise HarnessError("a split produced no samples")
        keys = np.concatenate([p.keys for p in parts])
        order = np.argsort(keys, kind="stable")
        if len(np.unique(keys)) != len(keys):
            raise HarnessError("a sample was scored twice (a sample key occurs twice)")
        pick = lambda arrays: np.concatenate(arrays)[order]  # noqa: E731
        kappas = parts[0].scores.keys()
        logits = pick([p.logits for p in parts]) if all(p.logits is not None for p in parts) else None
        features = pick([p.features for p in parts]) if all(p.features is not None for p in parts) else None
        return cls(
            keys[order],
            pick([p.labels for p in parts]),
            pick([p.preds for p in parts]),
            {k: pick([p.scores[k] for p in parts]) for k in kappas},
            {k: pick([p.confs[k] for p in parts]) for k in kappas},
            logits,
            features,
        )

    def pieces(self, counts: list[int]) -> list[SplitScores]:
        """The results of consecutive runs of ``counts`` rows (a batch's shards), each sorted by key as :meth:`concat`
        sorts it, with one sort and one gather for all of them; a key seen twice in a run is an error."""
        runs = np.repeat(np.arange(len(counts)), counts)
        order = np.lexsort((self.keys, runs))
        keys, runs = self.keys[order], runs[order]
        if np.any((keys[1:] == keys[:-1]) & (runs[1:] == runs[:-1])):
            raise HarnessError("a sample was scored twice (a sample key occurs twice)")
        whole = self.take(order)
        ends = np.cumsum(counts)
        return [whole.take(slice(end - count, end)) for count, end in zip(counts, ends.tolist())]

    def take(self, rows: slice | np.ndarray) -> SplitScores:
        """The results of ``rows`` (a slice or an index array, in its order)."""
        cut = lambda array: None if array is None else array[rows]  # noqa: E731
        return SplitScores(
            self.keys[rows],
            self.labels[rows],
            self.preds[rows],
            {k: v[rows] for k, v in self.scores.items()},
            {k: v[rows] for k, v in self.confs.items()},
            cut(self.logits),
            cut(self.features),
        )

    def with_kappas(self, other: SplitScores) -> SplitScores:
        """These results plus the kappas of ``other`` (same samples)."""
        if not np.array_equal(self.keys, other.keys):
            raise HarnessError("cannot merge scores of different samples")
        logits = self.logits if self.logits is not None else other.logits
        features = self.features if self.features is not None else other.features
        return SplitScores(
            self.keys,
            self.labels,
            self.preds,
            {**self.scores, **other.scores},
            {**self.confs, **other.confs},
            logits,
            features,
        )

    def only(self, kappas: list[str], keep_logits: bool) -> SplitScores:
        """These results restricted to ``kappas``; logits and features only when ``keep_logits``."""
        return SplitScores(
            self.keys,
            self.labels,
            self.preds,
            {k: self.scores[k] for k in kappas},
            {k: self.confs[k] for k in kappas},
            self.logits if keep_logits else None,
            self.features if keep_logits else None,
        )
