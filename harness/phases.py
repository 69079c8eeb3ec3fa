"""The run's phase lines: one line on stderr as each long phase starts or ends (loading the submission, building the
benchmark, fitting each detector, scoring each split, writing the outputs), through the ``cood`` logger.

The command line shows them unless ``--quiet`` (``--no-progress`` turns off only the bars, which are drawn on a
terminal only: a log gets these lines alone); the Python API shows them
while ``progress`` is on, and otherwise leaves them to the caller's logging configuration."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager

log = logging.getLogger("cood")


class _Lines(logging.Handler):
    """Writes each record as one line on the current ``sys.stderr``, above any progress bar."""

    def emit(self, record: logging.LogRecord) -> None:
        from tqdm import tqdm  # here: the command line shows its first line before the heavy imports

        try:
            tqdm.write(self.format(record), file=sys.stderr)
            sys.stderr.flush()
        except Exception:
            self.handleError(record)


def say(message: str) -> None:
    """One phase line."""
    log.info(message)


@contextmanager
def shown(enabled: bool) -> Iterator[None]:
    """Show the phase lines on stderr while the block runs (the command line unless ``--quiet``, the Python API with
    ``progress`` on); a no-op when ``enabled`` is False or they are shown already."""
    if not enabled or any(isinstance(h, _Lines) for h in log.handlers):
        yield
        return
    handler, level = _Lines(), log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
