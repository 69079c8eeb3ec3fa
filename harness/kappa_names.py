"""The kappas' names as known before torch is imported, so that a typo in ``-k`` is refused at once: the registry
builds from pytorch-ood's classes (torch), so its names are also written here, as the registry builds them with
pytorch-ood ``PYTORCH_OOD`` and the detector modules ``DETECTOR_MODULES`` (tests/test_fast_errors.py checks that they
are the registry's). With another pytorch-ood, other detector modules or a kappa plugin installed, the names are known
only once the registry is built, and a submission file's own kappas once it is loaded unless its source shows them
plainly. Light: the standard library and the error type."""

from __future__ import annotations

import ast
import difflib
import pkgutil
import sys
from collections.abc import Iterable, Sequence
from importlib.metadata import PackageNotFoundError, entry_points, version
from pathlib import Path

from harness.errors import HarnessError

ENTRY_POINT_GROUP = "cood_bench.kappas"
PYTORCH_OOD = "0.4.0"
DETECTOR_MODULES = ("gram", "mahalanobis_odin", "mcm", "multi_mahalanobis", "nacue", "rankfeat")
REGISTERED = (  # in the registry's order
    *("softmax", "entropy", "max_logit", "energy", "odin", "mc_dropout"),
    *("ash", "dice", "fdbd", "gen", "gmm", "kl_matching", "knn", "lts", "mahalanobis", "nci", "nnguide", "openmax"),
    *("pnml", "rmd", "react", "scale", "she", "temperature_scaling", "vim", "vra", "gradnorm", "graduncertainty"),
    *DETECTOR_MODULES,
)
MAX_SOURCE_BYTES = 1 << 20  # a submission file read for its kappas' names; a larger one is left to its loading


def unknown_kappa(name: str, known: list[str]) -> str:
    """The error for a kappa that is not among ``known``: the closest name, then every known one."""
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return f"unknown kappa '{name}'; {hint}known: {', '.join(known)} (see cood-harness kappas)"


def registered_names() -> tuple[str, ...] | None:
    """The registry's names: its own where it is imported already (torch is, then), else :data:`REGISTERED`, or None
    where they may differ: another pytorch-ood (or none), other detector modules, or a plugin."""
    loaded = sys.modules.get("harness.kappas.registry")
    if loaded is not None:
        return tuple(loaded.registry().defs)
    try:
        installed = version("pytorch-ood")
    except PackageNotFoundError:
        return None
    detectors = Path(__file__).parent / "kappas" / "detectors"
    modules = tuple(sorted(m.name for m in pkgutil.iter_modules([str(detectors)])))
    if installed != PYTORCH_OOD or modules != DETECTOR_MODULES or entry_points(group=ENTRY_POINT_GROUP):
        return None
    return REGISTERED


def own_kappa_names(target) -> tuple[str, ...] | None:
    """The names of the target's own kappas: none for a zoo target or a model (``KIND:NAME`` is no file); a
    submission file's where its source shows them plainly, else None. Plainly: it never mentions ``KAPPAS`` (none),
    or mentions it once, in a top-level ``KAPPAS = {...}`` whose keys are strings; and it has no ``import *``."""
    path = Path(target) if isinstance(target, (str, Path)) else None
    if path is None or not path.is_file():
        return ()
    try:
        if path.stat().st_size > MAX_SOURCE_BYTES:
            return None
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None  # its loading says what is wrong with it
    if any(isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names) for n in ast.walk(tree)):
        return None
    mentions = source.count("KAPPAS")
    if mentions == 0:
        return ()
    found = [
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and [getattr(t, "id", None) for t in node.targets] == ["KAPPAS"]
        and isinstance(node.value, ast.Dict)
    ]
    if mentions != 1 or len(found) != 1:
        return None
    keys = found[0].keys
    if not all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in keys):
        return None
    return tuple(dict.fromkeys(k.value for k in keys))


def check_requested(requests: Iterable[str] | None, known: Sequence[str] | None, own: Sequence[str] | None) -> None:
    """Refuse a requested kappa (``NAME`` or ``NAME:KEY=VALUE,...``) that is neither among the ``known`` names nor the
    target's ``own``, in the registry's words; nothing is refused while either is unknown (None)."""
    if known is None or own is None:
        return
    for request in requests or ():
        name = request.partition(":")[0].strip()
        if name not in known and name not in own:
            raise HarnessError(unknown_kappa(name, [*known, *own]))
