"""The builders' worker processes: one pool that Ctrl-C stops at once.

Ctrl-C in a terminal reaches every process of the command. The workers leave it to the main process: they start with
it blocked (their start-up imports cannot be interrupted half way) and then ignore it, so an interruption prints no
traceback per worker; the main process, interrupted, ends them at once (``terminate``) rather than waiting for their
tasks, and says so in one line (:func:`dataset_builder.errors.exit_interrupted`).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.pool
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing import resource_tracker


@contextmanager
def worker_pool(processes: int, initializer: Callable | None = None, initargs: tuple = ()) -> Iterator:
    """A :class:`multiprocessing.pool.Pool` of ``processes`` spawned workers, each running ``initializer(*initargs)``
    first. Leaving the block normally waits for the workers; leaving it by an error or an interruption ends them at
    once."""
    pool = None
    try:
        with _sigint_held():  # a Ctrl-C held while the workers start comes as the block ends, the pool made
            pool = multiprocessing.get_context("spawn").Pool(processes, _start_worker, (initializer, initargs))
        yield pool
    except BaseException:
        if pool is not None:
            pool.terminate()
        raise
    else:
        pool.close()
    finally:
        if pool is not None:
            pool.join()


def _start_worker(initializer: Callable | None, initargs: tuple) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if initializer is not None:
        initializer(*initargs)


@contextmanager
def _sigint_held() -> Iterator[None]:
    """While the workers are started: Ctrl-C blocked in this thread, so that they inherit it blocked, and kept here
    until the pool exists; then it is handled as it would have been (a :class:`KeyboardInterrupt`)."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(previous):
        yield  # ignored (the workers inherit that) or not ours to change
        return
    resource_tracker.ensure_running()  # started now, as it would be by the pool, it would unblock SIGINT here
    held = []
    signal.signal(signal.SIGINT, lambda signum, frame: held.append(frame))
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # a Ctrl-C that came meanwhile is held now
        signal.signal(signal.SIGINT, previous)
        if held:
            previous(signal.SIGINT, held[0])
