"""The kappas' names and parameters as known before torch is imported, so that a typo in ``-k`` is refused at once:
the registry builds from pytorch-ood's classes (torch), so ``python -m harness.kappas`` writes its names and
parameters to :data:`NAMES_FILE`, with the pytorch-ood version and the detector modules it built them from
(tests/test_fast_errors.py checks that the file is current). With another pytorch-ood, other detector modules or a
kappa plugin installed, they are known only once the registry is built, and a submission file's own kappas once it is
loaded unless its source shows them plainly.

A request is written as the leaderboard prints a kappa, ``energy(temperature=1)``, or ``energy:temperature=1``; a
parameter may go by its short name (``T``, ``eps``). Light: the standard library and the error type."""

from __future__ import annotations

import ast
import difflib
import json
import pkgutil
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from importlib.metadata import PackageNotFoundError, entry_points, version
from pathlib import Path

from harness.errors import HarnessError

ENTRY_POINT_GROUP = "cood_bench.kappas"
NAMES_FILE = Path(__file__).with_name("kappa_names.json")  # written by ``python -m harness.kappas``
ALIASES = {"T": "temperature", "eps": "epsilon", "\u03b5": "epsilon"}  # short names, for a kappa without that name
LABEL_FORM = re.compile(r"([^:(]*)\((.*)\)")  # NAME(KEY=VALUE,...), as the leaderboard prints a kappa
MAX_SOURCE_BYTES = 1 << 20  # a submission file read for its kappas' names; a larger one is left to its loading


def unknown_kappa(name: str, known: list[str]) -> str:
    """The error for a kappa that is not among ``known``: the closest name, then every known one."""
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return f"unknown kappa '{name}'; {hint}known: {', '.join(known)} (see cood-harness kappas)"


def unknown_parameter(kappa: str, key: str, defaults: Mapping[str, object]) -> str:
    """The error for a parameter ``key`` that kappa ``kappa`` (of parameters ``defaults``) does not have."""
    close = difflib.get_close_matches(key, list(defaults), n=1, cutoff=0.5)
    hint = f"did you mean '{close[0]}'? " if close else ""
    known = ", ".join(f"{k}={v}" for k, v in defaults.items()) or "none"
    return f"kappa '{kappa}' has no parameter {key}; {hint}its parameters: {known}"


def split_request(request: str) -> tuple[str, dict[str, str]]:
    """``"knn:k=200,normalize=false"`` or ``"knn(k=200,normalize=false)"`` -> ``("knn", {"k": "200", "normalize":
    "false"})``; an item without ``=`` continues the previous value (``"gram:layers=layer3,layer4"`` -> ``{"layers":
    "layer3,layer4"}``)."""
    label = LABEL_FORM.fullmatch(request.strip())
    name, rest = label.groups() if label else request.partition(":")[::2]
    overrides = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq and overrides:
            last = next(reversed(overrides))
            overrides[last] = f"{overrides[last]},{item.strip()}"
            continue
        if not eq or not key.strip():
            raise HarnessError(
                f"kappa '{request}': parameters are written NAME(KEY=VALUE,...) or NAME:KEY=VALUE[,KEY=VALUE...], "
                f"got '{item}'"
            )
        overrides[key.strip()] = value.strip()
    return name.strip(), overrides


def typed(kappa: str, key: str, value: str, default):
    """``value`` as the type of the parameter's default (a default of None: ``None``, else int, else float, else the
    string)."""
    try:
        if isinstance(default, bool):
            if value.lower() not in ("true", "false", "1", "0"):
                raise ValueError
            return value.lower() in ("true", "1")
        if isinstance(default, (int, float)):
            return type(default)(value)
        if default is None:
            if value == "None":
                return None
            for kind in (int, float):
                try:
                    return kind(value)
                except ValueError:
                    pass
        return value
    except ValueError as exc:
        raise HarnessError(f"kappa '{kappa}': parameter {key} takes a {type(default).__name__}, got '{value}'") from exc


def checked_parameters(kappa: str, defaults: Mapping[str, object], overrides: Mapping[str, str]) -> dict:
    """``overrides`` typed as the defaults of kappa ``kappa``, each under its parameter's name (``T`` ->
    ``temperature`` where the kappa has no ``T``); an unknown parameter is refused with the closest one."""
    params = {}
    for key, value in overrides.items():
        name = key if key in defaults else ALIASES.get(key, key)
        if name not in defaults:
            raise HarnessError(unknown_parameter(kappa, key, defaults))
        if name in params:
            raise HarnessError(f"kappa '{kappa}': parameter {name} is given twice")
        params[name] = typed(kappa, name, value, defaults[name])
    return params


def detector_modules() -> list[str]:
    """The modules of :mod:`harness.kappas.detectors`, in name order, read from its folder (nothing is imported)."""
    return sorted(m.name for m in pkgutil.iter_modules([str(Path(__file__).parent / "kappas" / "detectors")]))


@cache
def written_names() -> dict:
    """:data:`NAMES_FILE`: ``pytorch_ood`` (its version), ``detector_modules`` and ``kappas`` (name -> parameters'
    defaults, in the registry's order), as the registry wrote them."""
    return json.loads(NAMES_FILE.read_text(encoding="utf-8"))


def registered_parameters() -> dict[str, dict] | None:
    """The registry's kappas with their parameters' defaults: its own where it is imported already (torch is, then),
    else those :func:`written_names` holds, or None where they may differ: another pytorch-ood (or none), other
    detector modules, or a plugin."""
    loaded = sys.modules.get("harness.kappas.registry")
    if loaded is not None:
        return loaded.registry().parameters()
    try:
        installed = version("pytorch-ood")
    except PackageNotFoundError:
        return None
    written = written_names()
    same = installed == written["pytorch_ood"] and detector_modules() == written["detector_modules"]
    return written["kappas"] if same and not entry_points(group=ENTRY_POINT_GROUP) else None


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


def check_requested(
    requests: Iterable[str] | None, known: Mapping[str, Mapping] | None, own: Sequence[str] | None
) -> None:
    """Refuse a requested kappa (``NAME``, ``NAME(KEY=VALUE,...)`` or ``NAME:KEY=VALUE,...``) that is neither among
    the ``known`` ones (name -> parameters' defaults) nor the target's ``own``, or that gives a ``known`` kappa a
    parameter it lacks or a value of another type, in the registry's words; nothing is refused while either is
    unknown (None). An own kappa's parameters are checked once it is loaded."""
    if known is None or own is None:
        return
    for request in requests or ():
        name, overrides = split_request(request)
        if name in own:
            continue
        if name not in known:
            raise HarnessError(unknown_kappa(name, [*known, *own]))
        checked_parameters(name, known[name], overrides)
