"""The paper's kappas (docs/method.md section 5) and a submission's own, as registry entries."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from harness.errors import HarnessError
from harness.kappas.base import FeaturesKappa, KappaDef, LogitsKappa, ModelKappa, Outputs, register_kappa
from harness.kappas.logit import BUILTIN_LOGIT_KAPPAS, LogitFunction
from harness.kappas.model import DEFAULT_ODIN_PRESET, MC_DROPOUT_PASSES, ODIN_PRESETS, mc_dropout, odin

PAPER = "Galil, Dabbah & El-Yaniv, ICLR 2023"


class FromLogits(LogitsKappa):
    """A :class:`LogitFunction` as an implementation: scores from the logits (and features, if it wants them), with
    ``params`` passed to its score function where they differ from the kappa's defaults."""

    kappa: LogitFunction

    def __init__(self, params: dict):
        super().__init__(params)
        if params != self.kappa.params:
            self.kappa = replace(self.kappa, score=partial(self.kappa.score, **params), params=params)

    def score(self, outputs: Outputs):
        return self.kappa(outputs.logits, outputs.features)


def from_logits(kappa: LogitFunction) -> type[FromLogits]:
    """The implementation of ``kappa`` (a kind that reads the features too, if it wants them)."""
    kinds = (FromLogits, FeaturesKappa) if kappa.wants_features else (FromLogits,)
    return type(f"FromLogits_{kappa.name}", kinds, {"kappa": kappa})


SUMMARIES = {
    "softmax": "max softmax probability (ranked by the max log-softmax)",
    "entropy": "minus the softmax entropy",
    "max_logit": "max logit",
    "energy": "T * logsumexp(logits / T)",
}
for name, kappa in BUILTIN_LOGIT_KAPPAS.items():
    register_kappa(
        name, SUMMARIES[name], defaults=kappa.params, reference=PAPER, source="paper", probability=kappa.probability
    )(from_logits(kappa))


def _odin_options(options: dict) -> dict:
    preset = options.get("odin_preset", DEFAULT_ODIN_PRESET)
    if preset not in ODIN_PRESETS:
        raise HarnessError(f"--odin-preset '{preset}' is unknown; known: {', '.join(ODIN_PRESETS)}")
    return {"preset": preset, **ODIN_PRESETS[preset]}


def _mc_options(options: dict) -> dict:
    passes = options.get("mc_passes", MC_DROPOUT_PASSES)
    if passes < 1:
        raise HarnessError(f"--mc-passes must be at least 1, got {passes}")
    return {"passes": passes}


@register_kappa(
    "odin",
    "max softmax(f(x')/T) at an input perturbed against the top class",
    source="paper",
    defaults={"preset": "paper", **ODIN_PRESETS["paper"]},
    reference="Liang et al., ICLR 2018",
    from_options=_odin_options,
    probability=True,  # reports max softmax(f(x')/T): a probability, T-scaled
)
class Odin(ModelKappa):
    def score_model(self, model, images, seed):
        return odin(model, images, self.params["temperature"], self.params["epsilon"])


@register_kappa(
    "mc_dropout",
    "minus the entropy of the mean softmax over stochastic dropout passes",
    source="paper",
    defaults={"passes": MC_DROPOUT_PASSES},
    reference="Gal & Ghahramani, ICML 2016",
    seeded=True,
    from_options=_mc_options,
)
class McDropout(ModelKappa):
    def score_model(self, model, images, seed):
        score = mc_dropout(model, images, self.params["passes"], seed)
        return score, score


def submission_kappa(kappa: LogitFunction) -> KappaDef:
    """A submission's own kappa (its code runs beside the model, in the submission's process)."""
    own = from_logits(kappa)
    return KappaDef(
        kappa.name,
        "the submission's own",
        "submission",
        own.needs(),
        dict(kappa.params),
        own,
        probability=kappa.probability,
    )
