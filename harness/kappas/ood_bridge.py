"""pytorch-ood's post-hoc detectors as kappas, registered from pytorch-ood's own classes.

What a detector reads follows from its base class: a ``LogitsDetector`` reads the logits, a ``FeaturesDetector`` the
features (and the last layer, when its constructor takes ``head`` or ``w``/``b``), and the activation-shaping
``FeatureMapsDetector`` s (ReAct, ASH, SCALE, VRA) the penultimate activations as
:math:`B \\times D \\times 1 \\times 1` maps followed by the last layer, as their papers apply them.
``requires_fit`` adds a fit on the fit split's features
(or logits) and labels. Each is registered as a kappa of the matching kinds (:mod:`harness.kappas.base`). Parameters
are the constructor's scalar parameters with its defaults. pytorch-ood scores are larger = more OOD; a kappa is the
negated score (higher = more in-distribution). Detectors compute in float32, as pytorch-ood expects. A sample's score
never depends on the samples scored beside it: OpenMax, whose pytorch-ood prediction does, is predicted per sample
(see :mod:`harness.kappas.openmax`).

The gradient detectors GradNorm and GradUncertainty need the model: they take their own passes, as ODIN does, on the
model's logits. MahalanobisODIN, MultiMahalanobis, Gram, NACUE, RankFeat and MCM score through the model in ways of
their own: each is a module of :mod:`harness.kappas.detectors` (:data:`IN_DETECTORS`), registered with
:func:`register_pytorch_ood`. Every other pytorch-ood detector is accounted for in :data:`NOT_BRIDGED` with the reason.
"""

from __future__ import annotations

import inspect

import numpy as np
import torch
from pytorch_ood import detector as pod
from pytorch_ood.api import FeatureMapsDetector, FeaturesDetector, LogitsDetector

from harness.errors import HarnessError
from harness.kappas import openmax
from harness.kappas.base import (
    FeaturesKappa,
    FittedKappa,
    HeadKappa,
    LogitsKappa,
    ModelKappa,
    Outputs,
    OutputsKappa,
    register_kappa,
)
from harness.kappas.model import LogitsOnly

SAME_AS_PAPER_KAPPA = {
    "MaxSoftmax": "softmax",
    "EnergyBased": "energy",
    "Entropy": "entropy",
    "MaxLogit": "max_logit",
    "ODIN": "odin",
    "MCD": "mc_dropout",
}
# every other pytorch-ood detector, and why it is not a kappa here
NOT_BRIDGED = {
    "WeightedEBO": "needs per-class energy weights learned in training",
}
# the gradient detectors: their parameters are the papers' choices (GradNorm: the last layer's weights only)
GRADIENT_DETECTORS = {
    "GradNorm": {"temperature": 1.0, "parameters": "last_layer"},
    "GradUncertainty": {"parameters": "all"},
}
# implemented in harness.kappas.detectors, one module each (they score through the model in ways of their own)
IN_DETECTORS = ("MahalanobisODIN", "MultiMahalanobis", "Gram", "NACUE", "RankFeat", "MCM")
# the detectors whose kappa (minus pytorch-ood's score) is a probability that the prediction is right: the max softmax
# probability of temperature-scaled logits
PROBABILITIES = ("TemperatureScaling",)
# pytorch-ood's class name -> the kappa registered for it, here or in harness.kappas.detectors
KAPPA_OF: dict[str, str] = {}
NAMES = {"KLMatching": "kl_matching", "TemperatureScaling": "temperature_scaling"}
INPUTS = ("model", "encoder", "backbone", "head", "w", "b", "detector", "criterion")
# parameters without a default in pytorch-ood: ViM's principal dimension (None: half the feature dimension, about
# the papers' choice of 1000 for 2048-dimensional and 512 for 768-dimensional features) and DICE's sparsity (the
# paper's ImageNet value)
MISSING_DEFAULTS = {"ViM": {"d": None}, "DICE": {"p": 0.7}}


def _kind(cls) -> str | None:
    if issubclass(cls, LogitsDetector):
        return "logits"
    if issubclass(cls, FeaturesDetector):
        return "features"
    if issubclass(cls, FeatureMapsDetector) and {"backbone", "head"} <= set(inspect.signature(cls.__init__).parameters):
        return "maps"
    return None


def _defaults(cls) -> dict:
    params = {}
    for name, p in inspect.signature(cls.__init__).parameters.items():
        if name == "self" or name in INPUTS or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        params[name] = MISSING_DEFAULTS.get(cls.__name__, {}).get(name, p.default)
    return params


def _kinds(cls, kind: str) -> tuple[type, ...]:
    """The kinds of kappa the detector is: what it reads, and whether it is fitted."""
    takes = set(inspect.signature(cls.__init__).parameters)
    if kind == "logits":
        reads = LogitsKappa
    else:
        reads = HeadKappa if kind == "maps" or takes & {"head", "w"} else FeaturesKappa
    return (FittedKappa, reads) if cls.requires_fit else (reads,)


class Bridged(OutputsKappa):
    """A pytorch-ood detector built from the last layer and parameters, fitted and scored on one pass's outputs."""

    cls: type
    kind: str

    def __init__(self, params: dict):
        super().__init__(params)
        self.detector = None

    def _build(self, outputs: Outputs):
        kwargs = dict(self.params)
        takes = inspect.signature(self.cls.__init__).parameters
        if self.cls is pod.ViM and kwargs["d"] is None:
            kwargs["d"] = outputs.features.shape[1] // 2
        linear = None
        if outputs.head is not None:
            weight, bias = (torch.from_numpy(np.asarray(a, dtype=np.float32)) for a in outputs.head)
            linear = torch.nn.Linear(weight.shape[1], weight.shape[0]).requires_grad_(False)
            linear.weight.copy_(weight)
            linear.bias.copy_(bias)
        for name in ("model", "encoder", "backbone"):
            if name in takes:
                kwargs[name] = None
        if "head" in takes:
            kwargs["head"] = torch.nn.Sequential(torch.nn.Flatten(), linear) if self.kind == "maps" else linear
        if "w" in takes:
            kwargs["w"], kwargs["b"] = linear.weight, linear.bias
        return self.cls(**kwargs)

    def _input(self, outputs: Outputs) -> torch.Tensor:
        if self.kind == "logits":
            return torch.from_numpy(np.asarray(outputs.logits, dtype=np.float32))
        features = torch.from_numpy(np.asarray(outputs.features, dtype=np.float32))
        return features[:, :, None, None] if self.kind == "maps" else features

    def fit(self, outputs: Outputs) -> None:
        self.detector = self._build(outputs)
        fit = getattr(
            self.detector, {"logits": "fit_logits", "features": "fit_features", "maps": "fit_feature_maps"}[self.kind]
        )
        fit(self._input(outputs), torch.from_numpy(np.asarray(outputs.labels, dtype=np.int64)))

    def score(self, outputs: Outputs) -> tuple[np.ndarray, np.ndarray]:
        if self.detector is None:
            self.detector = self._build(outputs)
        if self.cls is pod.OpenMax:  # pytorch-ood's predict makes a sample's score depend on the others in the call
            scores = -openmax.unknown_probability(self.detector, self._input(outputs).numpy())
            return scores, scores
        predict = getattr(
            self.detector,
            {"logits": "predict_logits", "features": "predict_features", "maps": "predict_feature_maps"}[self.kind],
        )
        with torch.no_grad():
            scores = -predict(self._input(outputs)).detach().double().cpu().numpy()
        return scores, scores


class GradientBridged(ModelKappa):
    """A pytorch-ood gradient detector on the model itself, its own passes per batch."""

    cls: type

    def score_model(self, model: torch.nn.Module, images: torch.Tensor, seed):
        wrapped = LogitsOnly(model)
        kwargs = {k: v for k, v in self.params.items() if k != "parameters"}
        if self.params["parameters"] == "last_layer":
            last = [name for name, m in wrapped.named_modules() if isinstance(m, torch.nn.Linear)]
            if not last:
                raise HarnessError(
                    f"kappa '{self.cls.__name__.lower()}' with parameters=last_layer needs a model that "
                    "ends with a torch.nn.Linear; use parameters=all"
                )
            kwargs["param_filter"] = lambda name, prefix=f"{last[-1]}.": name == prefix + "weight"
        elif self.params["parameters"] != "all":
            raise HarnessError(f"parameters must be last_layer or all, got '{self.params['parameters']}'")
        scores = -self.cls(wrapped, **kwargs).predict(images).double()
        return scores, scores


def _summary(cls) -> str:
    if cls.info is not None and cls.info.paper is not None:
        return cls.info.paper.title
    return (inspect.getdoc(cls) or cls.__name__).splitlines()[0].removeprefix("Implements ").rstrip(".")


def _reference(cls) -> str:
    paper = cls.info.paper if cls.info is not None else None
    where = f"{paper.venue} {paper.year}, {paper.url}; " if paper is not None else ""
    return f"{where}pytorch_ood.detector.{cls.__name__}"


def bridged_classes() -> dict[str, type]:
    """Our name -> pytorch-ood class, for every detector bridged here."""
    classes = {}
    for name in pod.__all__:
        cls = getattr(pod, name)
        if (
            not inspect.isclass(cls)
            or name in SAME_AS_PAPER_KAPPA
            or name in NOT_BRIDGED
            or name in IN_DETECTORS
            or _kind(cls) is None
        ):
            continue
        classes[NAMES.get(name, name.lower())] = cls
    return classes


def register_pytorch_ood(cls, name: str, defaults: dict):
    """Class decorator: register an implementation of pytorch-ood's ``cls`` as kappa ``name``, with the title and
    venue of the class's paper as its summary and reference."""
    KAPPA_OF[cls.__name__] = name
    return register_kappa(
        name,
        _summary(cls),
        defaults=defaults,
        reference=_reference(cls),
        source="pytorch-ood",
        probability=cls.__name__ in PROBABILITIES,
    )


def _bridged(base: type, cls, *kinds: type, **attributes) -> type:
    """The implementation of pytorch-ood's ``cls``: ``base`` for it, of ``kinds``."""
    return type(f"{base.__name__}_{cls.__name__}", (base, *kinds), {"cls": cls, **attributes})


def _register_all() -> None:
    """Every bridged detector, in pytorch-ood's order, then the gradient detectors."""
    for name, cls in bridged_classes().items():
        kind = _kind(cls)
        register_pytorch_ood(cls, name, _defaults(cls))(_bridged(Bridged, cls, *_kinds(cls, kind), kind=kind))
    for cls_name, defaults in GRADIENT_DETECTORS.items():
        cls = getattr(pod, cls_name)
        register_pytorch_ood(cls, cls_name.lower(), defaults)(_bridged(GradientBridged, cls))


_register_all()
