"""Named points where a test can stop a command, so that interruptions are tested where they matter, not by timing.

Off unless ``COOD_FAULT`` is set: ``COOD_FAULT=<point>`` ends the process at that point as ``kill -9`` would (exit
status 137, no cleanup, no ``finally``); ``COOD_FAULT=<point>=<ERRNO>`` (e.g. ``swap-aside=ENOSPC``) raises that
:class:`OSError` there instead, as a full disk or a refused write would; ``COOD_FAULT=<point>=stop`` stops the process
there (``SIGSTOP``, as a debugger would), so that a test can send it a signal at exactly that point and then continue
it (``SIGCONT``).
"""

from __future__ import annotations

import errno
import os
import signal

ENV = "COOD_FAULT"
POINTS = (
    "shard-done",
    "block-done",
    "swap-before",
    "swap-aside",
    "swap-in",  # the builder
    "add:after-stage",
    "add:before-commit",
    "add:after-commit",
    "table:after-csv",  # the leaderboard
    "publish:after-upload",
    "publish:after-tag",
    "publish:after-space-upload",
    "publish:after-space-tag",
    "map-answer",  # the harness, mapping a sandboxed submission's answer
)


def point(name: str, path: object = None) -> None:
    """Fault point ``name`` (about to touch ``path``): does nothing unless ``$COOD_FAULT`` names it."""
    wanted, _, error = os.environ.get(ENV, "").partition("=")
    if wanted not in ("", *POINTS):
        raise ValueError(f"{ENV} names an unknown point {wanted!r}; known: {', '.join(POINTS)}")
    if wanted != name:
        return
    if not error:
        os._exit(137)
    if error == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
        return
    code = getattr(errno, error, None)
    if not isinstance(code, int):
        raise ValueError(f"{ENV} names an unknown error {error!r}; use a name of the errno module, e.g. ENOSPC")
    raise OSError(code, os.strerror(code), None if path is None else str(path))
