"""Confidence functions (kappas): the registry, the paper's kappas, and the bridge to pytorch-ood's detectors.

Higher = more in-distribution, always. ``cood-harness kappas`` lists every registered kappa, what it needs and its
source. A detector is a subclass of one kind (:class:`LogitsKappa`, :class:`FeaturesKappa`, :class:`HeadKappa`,
:class:`FittedKappa`, :class:`ModelKappa`, :class:`FittedModelKappa`, :class:`LayersKappa`) registered with
:func:`register_kappa`; a module in :mod:`harness.kappas.detectors` is registered without another line.
"""

from harness.kappas.base import (
    NEEDS,
    SOURCES,
    FeaturesKappa,
    FittedKappa,
    FittedModelKappa,
    HeadKappa,
    Kappa,
    KappaDef,
    KappaSpec,
    LayersKappa,
    LogitsKappa,
    ModelKappa,
    Outputs,
    OutputsKappa,
    StatefulModelKappa,
    register_kappa,
)
from harness.kappas.logit import BUILTIN_LOGIT_KAPPAS, LogitFunction, check_logits
from harness.kappas.model import (
    DEFAULT_ODIN_PRESET,
    MC_DROPOUT_PASSES,
    ODIN_PRESETS,
    logits_of,
    mc_dropout,
    odin,
    split_output,
)
from harness.kappas.registry import (
    DEFAULT_KAPPAS,
    ENTRY_POINT_GROUP,
    NAME_RULE,
    Registry,
    check_kappa_name,
    rebuild_kappa,
    registry,
    resolve_kappas,
)

__all__ = [
    "NEEDS",
    "SOURCES",
    "FeaturesKappa",
    "FittedKappa",
    "FittedModelKappa",
    "HeadKappa",
    "Kappa",
    "KappaDef",
    "KappaSpec",
    "LayersKappa",
    "LogitsKappa",
    "ModelKappa",
    "Outputs",
    "OutputsKappa",
    "StatefulModelKappa",
    "register_kappa",
    "BUILTIN_LOGIT_KAPPAS",
    "LogitFunction",
    "check_logits",
    "DEFAULT_ODIN_PRESET",
    "MC_DROPOUT_PASSES",
    "ODIN_PRESETS",
    "logits_of",
    "mc_dropout",
    "odin",
    "split_output",
    "DEFAULT_KAPPAS",
    "ENTRY_POINT_GROUP",
    "NAME_RULE",
    "Registry",
    "check_kappa_name",
    "rebuild_kappa",
    "registry",
    "resolve_kappas",
]
