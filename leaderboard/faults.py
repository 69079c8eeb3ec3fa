"""Named fault points, for tests that interrupt a command at a chosen step; off unless ``COOD_FAULT`` is set.

``COOD_FAULT=<point>`` ends the process at that point as ``kill -9`` would (exit status 137, no
cleanup); ``COOD_FAULT=<point>=<ERRNO>`` (e.g. ``add:before-commit=ENOSPC``) raises that
:class:`OSError` there instead, as a full disk or a refused write would.
"""

from __future__ import annotations

import errno
import os

ENV = "COOD_FAULT"


def point(name: str, path: object = None) -> None:
    """Fault point ``name`` (about to touch ``path``): does nothing unless ``$COOD_FAULT`` names it."""
    where, _, error = os.environ.get(ENV, "").partition("=")
    if where != name:
        return
    if not error:
        os._exit(137)
    code = getattr(errno, error)
    raise OSError(code, os.strerror(code), None if path is None else str(path))
