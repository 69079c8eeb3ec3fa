"""The project's error base and the one way its command lines report a failure: one line on stderr, or with
``COOD_DEBUG=1`` the full traceback (causes included) instead."""

from __future__ import annotations

import os
import sys
import traceback
from typing import NoReturn


class CoodError(Exception):
    """A user-facing problem with a one-line message; each package raises its own subclass."""


class BenchmarkError(CoodError):
    """A user-facing problem of the dataset builder (corrupt shard, bad manifest, bad input folder)."""


def one_line(exc: BaseException) -> str:
    """``<ExceptionType>: <first line of its message>``, for reporting a library's failure on one line."""
    return f"{type(exc).__name__}: {(str(exc) or '-').splitlines()[0]}"


def describe_os_error(exc: OSError) -> str:
    """``<file>: <reason>`` for a failed system call (disk full, permission denied), on one line."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    files = [str(name) for name in (exc.filename, exc.filename2) if name is not None]
    return " ".join(f"{' -> '.join(files)}: {reason}".split() if files else reason.split())


def debugging() -> bool:
    """Whether ``COOD_DEBUG`` asks for tracebacks (set, and not ``0``)."""
    return os.environ.get("COOD_DEBUG", "") not in ("", "0")


def fail(exc: BaseException, line: str, status: int) -> NoReturn:
    """Exit with ``status`` after ``line`` on stderr, or after the traceback of ``exc`` when :func:`debugging`."""
    if debugging():
        traceback.print_exception(exc)
    else:
        print(line, file=sys.stderr, flush=True)
    sys.exit(status)
