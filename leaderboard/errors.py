"""The one error type the leaderboard raises for bad input; the CLI prints it as one line."""

from __future__ import annotations


class LeaderboardError(Exception):
    """A user-facing problem (bad record, duplicate entry, missing release) with a one-line message."""


def one_line(exc: BaseException) -> str:
    """``<ExceptionType>: <first line of its message>``, for reporting a library's failure on one line."""
    return f"{type(exc).__name__}: {(str(exc) or '-').splitlines()[0]}"


def describe_os_error(exc: OSError) -> str:
    """``<file>: <reason>`` for a failed system call (disk full, permission denied), on one line."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    files = [str(name) for name in (exc.filename, exc.filename2) if name is not None]
    return " ".join(f"{' -> '.join(files)}: {reason}".split() if files else reason.split())
