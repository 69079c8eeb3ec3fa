"""Confidence functions (kappa) of docs/method.md section 5 that are functions of the logits.

Higher = more in-distribution. All of them come from one forward pass. Each kappa gives a
ranking score (used for AUROC and levels) and, where they differ, the reported confidence:
``softmax`` ranks by the max log-softmax (no saturation at 1.0) and reports the max softmax
probability, which orders samples the same way. ODIN and MC-dropout need the model and live in
:mod:`harness.kappas.model`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scipy.special import log_softmax, logsumexp

from harness.errors import HarnessError


def _max_log_softmax(logits: np.ndarray) -> np.ndarray:
    top = logits.argmax(axis=1)
    rows = np.arange(len(logits))
    others = np.exp(logits - logits[rows, top][:, None])
    others[rows, top] = 0.0
    # log p_max = -log(1 + sum of the others): exact however close p_max is to 1.0.
    return -np.log1p(others.sum(axis=1))


def _neg_entropy(logits: np.ndarray) -> np.ndarray:
    logp = log_softmax(logits, axis=1)
    return np.sum(np.exp(logp) * logp, axis=1)


def _energy(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    return temperature * logsumexp(logits / temperature, axis=1)


@dataclass(frozen=True)
class LogitFunction:
    """A kappa as a function of the logits (a submission's own may read the features too): the paper's logit kappas
    and a submission's ``KAPPAS``; :class:`~harness.kappas.builtin.FromLogits` makes it a kappa of the kind
    :class:`~harness.kappas.base.LogitsKappa`."""

    name: str
    score: Callable[..., np.ndarray]
    confidence: Callable[[np.ndarray], np.ndarray] | None = None  # monotone map: score -> reported value
    params: dict = field(default_factory=dict)
    wants_features: bool = False
    probability: bool = False  # the reported value is a probability that the prediction is right

    def __call__(self, logits: np.ndarray, features: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Return (ranking scores, reported confidences), float64, one per sample."""
        logits = np.asarray(logits, dtype=np.float64)
        raw = self.score(logits, features) if self.wants_features else self.score(logits)
        scores = np.asarray(raw, dtype=np.float64)
        if scores.shape != (len(logits),):
            raise HarnessError(f"kappa '{self.name}' returned shape {scores.shape}, expected ({len(logits)},)")
        if not np.all(np.isfinite(scores)):
            raise HarnessError(
                f"kappa '{self.name}' produced {int(np.sum(~np.isfinite(scores)))} NaN or infinite scores"
            )
        return scores, (scores if self.confidence is None else self.confidence(scores))


BUILTIN_LOGIT_KAPPAS: dict[str, LogitFunction] = {
    "softmax": LogitFunction("softmax", _max_log_softmax, confidence=np.exp, probability=True),
    "entropy": LogitFunction("entropy", _neg_entropy),
    "max_logit": LogitFunction("max_logit", lambda logits: logits.max(axis=1)),
    "energy": LogitFunction("energy", _energy, params={"temperature": 1.0}),
}


def check_logits(logits: np.ndarray, num_classes: int) -> np.ndarray:
    """Validate a batch of logits: 2-D, ``num_classes`` wide, finite."""
    logits = np.asarray(logits)
    if logits.ndim != 2 or logits.shape[1] != num_classes:
        raise HarnessError(
            f"the model returned logits of shape {tuple(logits.shape)}, expected (batch, {num_classes}) "
            f"for {num_classes} ID classes"
        )
    if not np.all(np.isfinite(logits)):
        raise HarnessError(f"the model returned {int(np.sum(~np.isfinite(logits)))} NaN or infinite logits")
    return logits
