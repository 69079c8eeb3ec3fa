"""The project's error base and the one way its command lines report a failure: one line on stderr, or with
``COOD_DEBUG=1`` the full traceback (causes included) instead; and how they end on Ctrl-C: one line saying what the
interruption left, exit status 130."""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NoReturn

INTERRUPTED = 130  # the status a shell gives a command ended by Ctrl-C (128 + SIGINT)
NOTHING_WRITTEN = "nothing was written"
EXIT_GRACE_S = 5.0  # an interrupted command that has not exited this long after its line is ended at once
_note: str | Callable[[], str] = NOTHING_WRITTEN


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


def on_interrupt(note: str | Callable[[], str]) -> None:
    """What an interruption of the running command leaves, for its last line: ``note``, or what ``note()`` says when
    the interruption comes (e.g. what is kept for resuming). The default is :data:`NOTHING_WRITTEN`."""
    global _note
    _note = note


@contextmanager
def interruptions() -> Iterator[Callable[[], bool]]:
    """Run a command's body: Ctrl-C raises :class:`KeyboardInterrupt` as always, and is remembered, so that an error
    it caused on its way out (a worker or a child process ended by the same Ctrl-C) still ends as an interruption.
    Yields whether one came. Where Ctrl-C is ignored (a background job) or handled by the caller, nothing changes."""
    received = []

    def handler(signum, frame):
        received.append(signum)
        raise KeyboardInterrupt

    ours = threading.current_thread() is threading.main_thread() and (
        signal.getsignal(signal.SIGINT) is signal.default_int_handler
    )
    if ours:
        signal.signal(signal.SIGINT, handler)
    try:
        yield lambda: bool(received)
    finally:
        if ours and signal.getsignal(signal.SIGINT) is handler:
            signal.signal(signal.SIGINT, signal.default_int_handler)


def exit_interrupted(exc: BaseException | None = None) -> NoReturn:
    """End an interrupted command: one line on stderr, ``interrupted; <what it left>`` (:func:`on_interrupt`), and
    exit status 130. With ``COOD_DEBUG=1`` the traceback of ``exc`` comes first (where it was stopped). The exit
    handlers run (a sandbox's copy and a pool's workers are removed), then the process ends without the interpreter's
    slow teardown (seconds with torch loaded); a second Ctrl-C from here on, or handlers that take over
    :data:`EXIT_GRACE_S`, end it at once."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, lambda *_: os._exit(INTERRUPTED))
    if debugging() and exc is not None:
        traceback.print_exception(exc)
    try:
        note = _note() if callable(_note) else _note
    except Exception:  # what was kept could not be told: say no more than that it stopped
        note = ""
    watchdog = threading.Timer(EXIT_GRACE_S, os._exit, (INTERRUPTED,))
    watchdog.daemon = True
    watchdog.start()
    for stream, text in ((sys.stdout, ""), (sys.stderr, "interrupted" + (f"; {note}" if note else "") + "\n")):
        try:
            stream.write(text)
            stream.flush()
        except (OSError, ValueError, AttributeError):  # closed: the status still tells
            pass
    getattr(atexit, "_run_exitfuncs", lambda: None)()
    os._exit(INTERRUPTED)
