"""Confidence functions (kappas): the registry, the paper's kappas, and the bridge to pytorch-ood's detectors.

Higher = more in-distribution, always. ``cood-harness kappas`` lists every registered kappa, what it needs and its
source.
"""

from harness.kappas.base import NEEDS, SOURCES, KappaDef, KappaSpec, Outputs
from harness.kappas.logit import BUILTIN_LOGIT_KAPPAS, LogitKappa, check_logits
from harness.kappas.model import DEFAULT_ODIN_PRESET, MC_DROPOUT_PASSES, ODIN_PRESETS, logits_of, mc_dropout, odin, split_output
from harness.kappas.registry import DEFAULT_KAPPAS, ENTRY_POINT_GROUP, Registry, rebuild_kappa, registry, resolve_kappas

__all__ = ["NEEDS", "SOURCES", "KappaDef", "KappaSpec", "Outputs", "BUILTIN_LOGIT_KAPPAS", "LogitKappa", "check_logits",
           "DEFAULT_ODIN_PRESET", "MC_DROPOUT_PASSES", "ODIN_PRESETS", "logits_of", "mc_dropout", "odin", "split_output", "DEFAULT_KAPPAS",
           "ENTRY_POINT_GROUP", "Registry", "rebuild_kappa", "registry", "resolve_kappas"]
