"""What every kappa is: a declaration (:class:`KappaDef`), a resolved instance (:class:`KappaSpec`), and the outputs
of a forward pass it reads (:class:`Outputs`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

NEEDS = {
    "logits": "the logits",
    "features": "the features that feed the last layer",
    "head": "the last layer's weight and bias",
    "fit": "a fit on ID data (features and labels of the fit split)",
    "model": "extra passes through the model",
    "layers": "outputs of intermediate layers (named by its layers parameter), from a pass over the fit split",
}
SOURCES = ("paper", "built-in", "pytorch-ood", "plugin", "submission")


@dataclass(frozen=True)
class Outputs:
    """One pass's outputs for a kappa: logits (float64), features, the last layer ``(weight, bias)``, labels (a fit)."""

    logits: np.ndarray
    features: np.ndarray | None = None
    head: tuple[np.ndarray, np.ndarray] | None = None
    labels: np.ndarray | None = None


@dataclass(frozen=True)
class KappaDef:
    """A registered kappa.

    ``make(params)`` returns its implementation: an object with ``score(outputs) -> (scores, confidences)``, or, when
    it needs the model, ``score_model(model, images, seed) -> (scores, confidences)`` (tensors); and ``fit(outputs)``
    when it needs a fit. Scores are higher = more in-distribution; the confidence is the value reported (a monotone
    map of the score). A sample's score must not depend on the samples scored beside it (the harness scores batches,
    and shards from kept logits, of any size); a stochastic kappa declares ``seeded``: its values then depend on the
    run's seed and on the batches, which the harness fixes by the manifest and the batch size, the same rule for every
    split, and its cache entries are keyed on both."""

    name: str
    summary: str
    source: str
    needs: frozenset
    defaults: dict
    make: Callable[[dict], object]
    reference: str = ""
    seeded: bool = False  # its values depend on the run's seed and on how samples are batched (MC-dropout's masks)
    from_options: Callable[[dict], dict] | None = None  # the harness's options (odin_preset, mc_passes) -> parameters

    def __post_init__(self):
        if self.source not in SOURCES:
            raise ValueError(f"kappa '{self.name}': source must be one of {', '.join(SOURCES)}, got '{self.source}'")
        unknown = set(self.needs) - set(NEEDS)
        if unknown:
            raise ValueError(f"kappa '{self.name}': unknown needs {sorted(unknown)}; known: {', '.join(NEEDS)}")


@dataclass(frozen=True)
class KappaSpec:
    """A kappa resolved for a run: its name, the parameters that define its values, its implementation and needs."""

    name: str
    params: dict = field(default_factory=dict)
    impl: object = None
    needs: frozenset = frozenset({"logits"})
    source: str = "paper"
    seeded: bool = False

    @property
    def in_model(self) -> bool:
        """Computed where the model runs: it needs the model, or it is the submission's own code."""
        return "model" in self.needs or self.source == "submission"
