"""What every kappa is: an implementation of one kind (:class:`Kappa` and its subclasses), a declaration
(:class:`KappaDef`, made by :func:`register_kappa`), a resolved instance (:class:`KappaSpec`), and the outputs of a
forward pass it reads (:class:`Outputs`).

A kind says which methods the harness calls and what the kappa needs: ``needs`` is the union of what the kinds it
derives from read (a kind may combine with another: a fitted kappa on the features derives from both)."""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

if TYPE_CHECKING:
    import torch

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


class Kappa(ABC):  # noqa: B024 (the kinds below declare the abstract methods)
    """A kappa's implementation, built from its parameters. Scores are higher = more in-distribution; the confidence
    is the value reported (a monotone map of the score). A sample's score must not depend on the samples scored beside
    it (a ``seeded`` kappa's draws come from each sample's own seed: see :class:`KappaDef`)."""

    reads: ClassVar[frozenset] = frozenset()

    def __init__(self, params: dict):
        self.params = params

    @classmethod
    def needs(cls) -> frozenset:
        """What the kappa needs: what every kind it derives from reads."""
        return frozenset().union(*(vars(c).get("reads", ()) for c in cls.__mro__))


class OutputsKappa(Kappa):
    """Scored from one pass's outputs, in the harness (also from kept logits and features, without a pass)."""

    @abstractmethod
    def score(self, outputs: Outputs) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, confidences)`` of the batch, float64, one per sample."""


class LogitsKappa(OutputsKappa):
    """Scored from the logits."""

    reads = frozenset({"logits"})


class FeaturesKappa(OutputsKappa):
    """Scored from the features that feed the last layer (``outputs.features``)."""

    reads = frozenset({"features"})


class HeadKappa(FeaturesKappa):
    """Scored from the features and the last layer's ``(weight, bias)`` (``outputs.head``)."""

    reads = frozenset({"head"})


class FittedKappa(OutputsKappa):
    """Fitted on the fit split's outputs and labels (seeded by the run's seed) before it scores."""

    reads = frozenset({"fit"})

    @abstractmethod
    def fit(self, outputs: Outputs) -> None:
        """Fit on the fit split (``outputs.labels`` set)."""


class ModelKappa(Kappa):
    """Scored by its own passes through the model, in the model's process (a sandboxed submission's, too)."""

    reads = frozenset({"model"})

    @abstractmethod
    def score_model(
        self, model: torch.nn.Module, images: torch.Tensor, seed: np.ndarray
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(scores, confidences)`` of a batch of images (tensors, one per sample); ``seed``: each image's seed (int64,
        one per image), for a ``seeded`` kappa's random draws."""


class StatefulModelKappa(ModelKappa):
    """Fitted in the harness, scored through the model: its fit travels to the model's process as arrays."""

    reads = frozenset({"fit"})

    @abstractmethod
    def state(self) -> dict:
        """The fit, as numpy arrays and numbers."""

    @abstractmethod
    def load(self, state: dict) -> None:
        """Take the fit that :meth:`state` gave (in the model's process)."""


class FittedModelKappa(StatefulModelKappa):
    """Fitted on the fit split's kept features, then scored through the model."""

    reads = frozenset({"features"})

    @abstractmethod
    def fit(self, outputs: Outputs) -> None:
        """Fit on the fit split's features and labels."""


class LayersKappa(StatefulModelKappa):
    """Reads intermediate layers: a pass over the fit split in the model's process extracts what its fit needs."""

    reads = frozenset({"layers"})

    @abstractmethod
    def extract(self, model: torch.nn.Module, images: torch.Tensor) -> dict:
        """What the fit needs of a batch of the fit split, as numpy arrays."""

    @abstractmethod
    def fit_extracted(self, parts: list[dict], labels: np.ndarray) -> None:
        """Fit on the extracted parts (one per batch, in the order of ``labels``)."""


class Needs:
    """What a kappa needs, as properties of its ``needs``."""

    needs: frozenset

    @property
    def reads_features(self) -> bool:
        return "features" in self.needs or "head" in self.needs

    @property
    def reads_head(self) -> bool:
        return "head" in self.needs

    @property
    def needs_fit(self) -> bool:
        return "fit" in self.needs

    @property
    def needs_model(self) -> bool:
        return "model" in self.needs

    @property
    def reads_layers(self) -> bool:
        return "layers" in self.needs


@dataclass(frozen=True)
class KappaDef(Needs):
    """A registered kappa.

    ``make(params)`` returns its implementation (a :class:`Kappa`: the kind gives its methods and its needs). A
    stochastic kappa declares ``seeded``: it draws each sample's randomness from that sample's own seed (given per
    image, from the run's secret order seed and the sample's key), so its values depend on the run's seeds but never
    on the batches, and its cache entries are keyed on the seeds. A kappa whose reported confidence is the probability
    that the prediction is right (the max softmax probability) declares ``probability``: its records then hold the
    calibration metrics (ECE, NLL, Brier)."""

    name: str
    summary: str
    source: str
    needs: frozenset
    defaults: dict
    make: Callable[[dict], Kappa]
    reference: str = ""
    seeded: bool = False  # its values depend on each sample's seed (MC-dropout's masks), never on its batch
    from_options: Callable[[dict], dict] | None = None  # the harness's options (odin_preset, mc_passes) -> parameters
    probability: bool = False  # its reported confidence is a probability in [0, 1] that the prediction is right

    def __post_init__(self):
        if self.source not in SOURCES:
            raise ValueError(f"kappa '{self.name}': source must be one of {', '.join(SOURCES)}, got '{self.source}'")
        unknown = set(self.needs) - set(NEEDS)
        if unknown:
            raise ValueError(f"kappa '{self.name}': unknown needs {sorted(unknown)}; known: {', '.join(NEEDS)}")


DECLARED: list[KappaDef] = []  # what register_kappa declared, in order; the registry reads it


def register_kappa(
    name: str,
    summary: str = "",
    *,
    defaults: dict | None = None,
    reference: str = "",
    source: str = "built-in",
    seeded: bool = False,
    from_options: Callable[[dict], dict] | None = None,
    probability: bool = False,
) -> Callable[[type[Kappa]], type[Kappa]]:
    """Class decorator: register the :class:`Kappa` subclass as kappa ``name`` (its summary: the first line of its
    docstring unless given; its needs: its kinds'; ``probability``: see :class:`KappaDef`)."""

    def register(cls: type[Kappa]) -> type[Kappa]:
        if not (inspect.isclass(cls) and issubclass(cls, Kappa)) or inspect.isabstract(cls):
            raise TypeError(
                f"kappa '{name}': register a Kappa subclass that implements its kind's methods, got {cls!r}"
            )
        text = summary or (inspect.getdoc(cls) or "").split("\n")[0]
        DECLARED.append(
            KappaDef(
                name, text, source, cls.needs(), dict(defaults or {}), cls, reference, seeded, from_options, probability
            )
        )
        return cls

    return register


@dataclass(frozen=True)
class KappaSpec(Needs):
    """A kappa resolved for a run: its name, the parameters that define its values, its implementation and needs."""

    name: str
    params: dict
    impl: Kappa
    needs: frozenset
    source: str
    seeded: bool = False
    probability: bool = False  # its reported confidence is a probability that the prediction is right

    @property
    def in_model(self) -> bool:
        """Computed where the model runs: it needs the model, or it is the submission's own code."""
        return self.needs_model or self.source == "submission"
