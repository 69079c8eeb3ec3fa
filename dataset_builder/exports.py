"""A package's exports loaded on first use, so that importing the package imports none of its heavy modules (torch,
pandas): one ``__getattr__`` for the three packages."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module


def lazy_exports(package: str, exports: dict[str, str]) -> Callable[[str], object]:
    """The module ``__getattr__`` of ``package`` that loads ``exports`` (a name -> ``"module"``, or ``"module:attr"``
    where the attribute is named otherwise) when first asked for."""

    def __getattr__(name: str):
        if name not in exports:
            raise AttributeError(f"module '{package}' has no attribute '{name}'")
        module, _, attr = exports[name].partition(":")
        return getattr(import_module(module), attr or name)

    return __getattr__
