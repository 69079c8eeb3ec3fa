"""Named points where a test can stop a build, so that interruptions are tested where they matter, not by timing.

Off unless ``COOD_FAULT`` is set: ``COOD_FAULT=<point>`` ends the process at that point as a kill would
(exit 137, no cleanup, no ``finally``); ``COOD_FAULT=<point>:oserror`` raises an OSError there instead
(as a full disk would).
"""

from __future__ import annotations

import errno
import os

POINTS = ("shard-done", "block-done", "swap-before", "swap-aside", "swap-in")


def point(name: str) -> None:
    """Stop here if ``COOD_FAULT`` names this point."""
    wanted, _, how = os.environ.get("COOD_FAULT", "").partition(":")
    if wanted not in ("", *POINTS):
        raise ValueError(f"COOD_FAULT names an unknown point {wanted!r}; known: {', '.join(POINTS)}")
    if wanted != name:
        return
    if how == "oserror":
        raise OSError(errno.ENOSPC, f"injected fault at {name}")
    os._exit(137)
