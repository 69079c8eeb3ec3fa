"""The paper's kappas (docs/method.md section 5) and a submission's own, as registry entries."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from harness.errors import HarnessError
from harness.kappas.base import KappaDef, Outputs
from harness.kappas.logit import BUILTIN_LOGIT_KAPPAS, LogitKappa
from harness.kappas.model import DEFAULT_ODIN_PRESET, MC_DROPOUT_PASSES, ODIN_PRESETS, mc_dropout, odin

PAPER = "Galil, Dabbah & El-Yaniv, ICLR 2023"


class FromLogits:
    """A :class:`LogitKappa` as an implementation: scores from the logits (and features, if it wants them), with
    ``params`` passed to its score function where they differ from the kappa's defaults."""

    def __init__(self, kappa: LogitKappa, params: dict | None = None):
        if params is not None and params != kappa.params:
            kappa = replace(kappa, score=partial(kappa.score, **params), params=params)
        self.kappa = kappa

    def score(self, outputs: Outputs):
        return self.kappa(outputs.logits, outputs.features)


class Odin:
    def __init__(self, params: dict):
        self.temperature, self.epsilon = params["temperature"], params["epsilon"]

    def score_model(self, model, images, seed: int):
        return odin(model, images, self.temperature, self.epsilon)


class McDropout:
    def __init__(self, params: dict):
        self.passes = params["passes"]

    def score_model(self, model, images, seed: int):
        score = mc_dropout(model, images, self.passes, seed)
        return score, score


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


SUMMARIES = {"softmax": "max softmax probability (ranked by the max log-softmax)", "entropy": "minus the softmax entropy",
             "max_logit": "max logit", "energy": "T * logsumexp(logits / T)"}


def paper_kappas() -> list[KappaDef]:
    """softmax, entropy, max_logit, energy (from the logits), ODIN and MC-dropout (extra passes through the model)."""
    defs = [KappaDef(name, SUMMARIES[name], "paper", frozenset({"logits"}), dict(kappa.params),
                     lambda params, kappa=kappa: FromLogits(kappa, params), PAPER)
            for name, kappa in BUILTIN_LOGIT_KAPPAS.items()]
    defs.append(KappaDef("odin", "max softmax(f(x')/T) at an input perturbed against the top class", "paper",
                         frozenset({"model"}), {"preset": "paper", **ODIN_PRESETS["paper"]}, Odin,
                         "Liang et al., ICLR 2018",
                         from_options=_odin_options))
    defs.append(KappaDef("mc_dropout", "minus the entropy of the mean softmax over stochastic dropout passes", "paper",
                         frozenset({"model"}), {"passes": MC_DROPOUT_PASSES}, McDropout,
                         "Gal & Ghahramani, ICML 2016", seeded=True, from_options=_mc_options))
    return defs


def submission_kappa(kappa: LogitKappa) -> KappaDef:
    """A submission's own kappa (its code runs beside the model, in the submission's process)."""
    needs = frozenset({"logits", "features"} if kappa.wants_features else {"logits"})
    return KappaDef(kappa.name, "the submission's own", "submission", needs, dict(kappa.params), lambda params: FromLogits(kappa))
