"""The one error type the harness raises for bad input (the CLI prints it as one line), and how text from a
submission's process is shown in it."""

from dataset_builder.errors import CoodError


class HarnessError(CoodError):
    """A user-facing problem (bad submission, bad scores, bad benchmark) with a one-line message."""


def escaped(text: str, limit: int) -> str:
    """``text`` that came from a submission (its messages, its output, names) as at most ``limit`` characters of one
    line a terminal cannot act on: every unprintable character (controls, an ANSI escape sequence's ESC, line
    separators, direction overrides) written as its Python escape."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[:limit])[:limit]
