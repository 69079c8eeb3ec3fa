"""The kappa registry: the paper's kappas, pytorch-ood's post-hoc detectors, the detectors of
:mod:`harness.kappas.detectors` and plugins, all declared the same way.

The built-in kappas register with :func:`~harness.kappas.base.register_kappa` when their module is imported; every
module in :mod:`harness.kappas.detectors` is imported when the registry is built, so a new detector is one file there
(and ``python -m harness.kappas`` writes the names anew for the command line to read before torch is imported,
:mod:`harness.kappa_names`).
A plugin is a package with an entry point in the group ``cood_bench.kappas`` (as timm and lm-eval register models
and tasks) that loads to a :class:`KappaDef`, a list of them, or a function returning either; its kappas are listed
with source ``plugin``. Names are unique across all sources and follow ``NAME_RULE`` (a submission's own kappas too),
since records, file names and log lines carry them; the harness dispatches on what a kappa declares.
"""

from __future__ import annotations

import json
import pkgutil
import re
from collections.abc import Iterable
from dataclasses import replace
from functools import cache
from importlib import import_module
from importlib.metadata import entry_points, version

from harness.errors import HarnessError, escaped
from harness.kappa_names import (
    ENTRY_POINT_GROUP,
    checked_parameters,
    detector_modules,
    split_request,
    unknown_kappa,
)
from harness.kappas import detectors
from harness.kappas.base import DECLARED, KappaDef, KappaSpec
from harness.kappas.builtin import submission_kappa
from harness.kappas.logit import LogitFunction

DEFAULT_KAPPAS = ("softmax", "entropy", "max_logit", "energy")
NAME_RULE = re.compile(r"[a-z][a-z0-9_]{0,63}")


def check_kappa_name(name, what: str) -> None:
    """A kappa name that records, file names and log lines can carry: a lower-case letter, then up to 63 lower-case
    letters, digits and underscores (``NAME_RULE``); anything else is refused in one line naming ``what`` it came
    from."""
    if not (isinstance(name, str) and NAME_RULE.fullmatch(name)):
        shown = repr(name[:60] + "..." if isinstance(name, str) and len(name) > 60 else name)
        raise HarnessError(
            f"{what}: kappa name {escaped(shown, 80)} is not a lower-case letter followed by at most 63 "
            "lower-case letters, digits and '_'"
        )


class Registry:
    """Kappa definitions by unique name."""

    def __init__(self, defs: Iterable[KappaDef] = ()):
        self.defs: dict[str, KappaDef] = {}
        for kdef in defs:
            self.add(kdef)

    def add(self, kdef: KappaDef) -> None:
        check_kappa_name(kdef.name, f"a {kdef.source} kappa")
        if kdef.name in self.defs:
            raise HarnessError(
                f"kappa '{kdef.name}' is registered twice (by {self.defs[kdef.name].source} and by {kdef.source})"
            )
        self.defs[kdef.name] = kdef

    def __contains__(self, name: str) -> bool:
        return name in self.defs

    def get(self, name: str, extra: Iterable[str] = ()) -> KappaDef:
        """The definition of ``name``; an unknown name is an error that suggests the closest and lists the known
        ones."""
        if name not in self.defs:
            raise HarnessError(unknown_kappa(name, [*self.defs, *extra]))
        return self.defs[name]

    def parameters(self) -> dict[str, dict]:
        """Each kappa's parameters with their defaults, by name."""
        return {name: kdef.defaults for name, kdef in self.defs.items()}


def _plugin_defs(entry_point) -> list[KappaDef]:
    try:
        loaded = entry_point.load()
        if callable(loaded) and not isinstance(loaded, KappaDef):
            loaded = loaded()
        defs = [loaded] if isinstance(loaded, KappaDef) else list(loaded)
    except Exception as exc:  # a third party's code: any failure is one line naming the plugin
        raise HarnessError(
            f"kappa plugin '{entry_point.name}' ({entry_point.value}) failed to load: {type(exc).__name__}: {exc}"
        ) from exc
    if not all(isinstance(d, KappaDef) for d in defs):
        raise HarnessError(f"kappa plugin '{entry_point.name}' ({entry_point.value}) must give KappaDef objects")
    return [replace(d, source="plugin") for d in defs]


@cache
def registry() -> Registry:
    """Every registered kappa: the paper's, pytorch-ood's post-hoc detectors, the detectors' modules (in name order),
    then plugins."""
    import_module("harness.kappas.ood_bridge")
    for module in sorted(m.name for m in pkgutil.iter_modules(detectors.__path__, f"{detectors.__name__}.")):
        import_module(module)
    reg = Registry(DECLARED)
    for entry_point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        for kdef in _plugin_defs(entry_point):
            reg.add(kdef)
    return reg


def names_text() -> str:
    """What :data:`~harness.kappa_names.NAMES_FILE` holds: the pytorch-ood version, the detector modules and the
    registry's kappas but plugins' with their parameters' defaults, as JSON."""
    kappas = {name: kdef.defaults for name, kdef in registry().defs.items() if kdef.source != "plugin"}
    written = {"pytorch_ood": version("pytorch-ood"), "detector_modules": detector_modules(), "kappas": kappas}
    return json.dumps(written, indent=1) + "\n"


def _with_overrides(kdef: KappaDef, params: dict, overrides: dict[str, str]) -> dict:
    return {**params, **checked_parameters(kdef.name, kdef.defaults, overrides)}


def resolve_kappas(
    names: Iterable[str], user_kappas: dict[str, LogitFunction] | None = None, **options
) -> list[KappaSpec]:
    """Turn kappa requests (``name``, ``name(key=value,...)`` or ``name:key=value,...``) into specs (a submission's
    own kappas among them); ``options`` (``odin_preset``, ``mc_passes``) set the parameters of the kappas that read
    them. An unknown name or parameter is an error that suggests the closest and lists the known ones."""
    user_kappas = user_kappas or {}
    specs: dict[str, KappaSpec] = {}
    for request in dict.fromkeys(names):
        name, overrides = split_request(request)
        kdef = _definition(name, user_kappas)
        params = {**kdef.defaults, **(kdef.from_options(options) if kdef.from_options else {})}
        spec = _spec(kdef, _with_overrides(kdef, params, overrides))
        if name in specs and specs[name].params != spec.params:
            raise HarnessError(f"kappa '{name}' is requested twice with different parameters")
        specs[name] = spec
    if not specs:
        raise HarnessError("no kappa requested")
    return list(specs.values())


def rebuild_kappa(name: str, params: dict, user_kappas: dict[str, LogitFunction]) -> KappaSpec:
    """A resolved kappa again from its name and parameters (in the submission's process)."""
    return _spec(_definition(name, user_kappas), params)


def _definition(name: str, user_kappas: dict[str, LogitFunction]) -> KappaDef:
    return submission_kappa(user_kappas[name]) if name in user_kappas else registry().get(name, user_kappas)


def _spec(kdef: KappaDef, params: dict) -> KappaSpec:
    return KappaSpec(kdef.name, params, kdef.make(params), kdef.needs, kdef.source, kdef.seeded, kdef.probability)
