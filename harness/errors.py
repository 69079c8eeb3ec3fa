"""The one error type the harness raises for bad input (the CLI prints it as one line), how text from a
submission's process is shown in it, and how a failure of a submission's code is told in one line: where in the user's
files it happened, and its cause (PyTorch's many-line messages shortened; ``COOD_DEBUG=1`` shows them whole)."""

from __future__ import annotations

import re
import traceback
from pathlib import Path

from dataset_builder.errors import CoodError

STATE_DICT = re.compile(r"Error\(s\) in loading state_dict for ([\w.]+):")
KEY_LINE = re.compile(r"(Missing|Unexpected) key\(s\) in state_dict: ([^\n]*)")
SHAPE = re.compile(
    r"size mismatch for ([^\n:]+): copying a param with shape torch\.Size\(\[([^\]]*)\]\) from checkpoint, "
    r"the shape in current model is torch\.Size\(\[([^\]]*)\]\)"
)
KEY_CHARS = 40  # of one key name a line shows
HARNESS = Path(__file__).resolve().parent  # its own frames are never the user's code


class HarnessError(CoodError):
    """A user-facing problem (bad submission, bad scores, bad benchmark) with a one-line message."""


class SubmissionDetail(Exception):
    """The whole text of a failure in a submission's sandboxed process (its traceback), the cause of the one-line
    :class:`HarnessError` the harness raises for it: ``COOD_DEBUG=1`` prints it."""


def escaped(text: str, limit: int) -> str:
    """``text`` that came from a submission (its messages, its output, names) as at most ``limit`` characters of one
    line a terminal cannot act on: every unprintable character (controls, an ANSI escape sequence's ESC, line
    separators, direction overrides) written as its Python escape."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[:limit])[:limit]


def escaped_lines(text: str, limit: int) -> str:
    """``text`` as :func:`escaped` shows it, but its line breaks and tabs kept: a traceback to print whole."""
    return "\n".join("\t".join(escaped(part, limit) for part in line.split("\t")) for line in text[:limit].split("\n"))


def _first(keys: list[str]) -> str:
    """The first of ``keys`` quoted, and how many more there are."""
    more = f" and {len(keys) - 1:,} more" if len(keys) > 1 else ""
    return f"'{escaped(keys[0], KEY_CHARS)}'{more}"


def unfit_weights(missing: list[str], unexpected: list[str], reshaped: list[tuple[str, object, object]] = ()) -> str:
    """What keeps weights from loading into a model, in one line: the first missing key, the first unexpected one and
    the first tensor of another shape (``(key, its shape, the model's)``), each with how many more there are."""
    parts = [
        f"{len(keys):,} {what} key{'s' if len(keys) > 1 else ''} ({_first(keys)})"
        for what, keys in (("missing", missing), ("unexpected", unexpected))
        if keys
    ]
    if reshaped:
        key, got, wanted = reshaped[0]
        more = f" and {len(reshaped) - 1:,} more" if len(reshaped) > 1 else ""
        parts.append(f"'{escaped(key, KEY_CHARS)}' is {got}, the model's is {wanted}{more}")
    return ", ".join(parts)


def state_dict_line(message: str) -> str | None:
    """PyTorch's ``load_state_dict`` error (``Error(s) in loading state_dict for X:`` and a line per kind of problem)
    in one line (:func:`unfit_weights`, the keys in name order as the library targets name them); None for any other
    message."""
    model = STATE_DICT.match(message)
    if model is None:
        return None
    keys = {kind: sorted(re.findall(r'"([^"]*)"', line)) for kind, line in KEY_LINE.findall(message)}
    reshaped = [(key, f"({got})", f"({wanted})") for key, got, wanted in SHAPE.findall(message)]
    found = unfit_weights(keys.get("Missing", []), keys.get("Unexpected", []), reshaped)
    return f"the weights do not fit {model.group(1)}: {found or message.splitlines()[-1].strip()}"


def message_line(exc: BaseException) -> str:
    """``exc``'s message in one line: PyTorch's ``load_state_dict`` error shortened (:func:`state_dict_line`), any
    other's first line (with how many lines were left out)."""
    message = str(exc)
    short = state_dict_line(message)
    if short is not None:
        return short
    lines = [line.strip() for line in message.splitlines() if line.strip()] or ["-"]
    return lines[0] + (f" (and {len(lines) - 1} more lines: COOD_DEBUG=1 shows them)" if len(lines) > 1 else "")


def cause(exc: BaseException, doing: str = "") -> str:
    """``exc`` in one line: a SyntaxError's own message, PyTorch's ``load_state_dict`` error as
    :func:`state_dict_line` tells it (which says what failed), any other as ``doing`` and ``Type: message``
    (:func:`message_line`)."""
    if isinstance(exc, SyntaxError):
        return f"{type(exc).__name__}: {exc.msg}"
    line = message_line(exc)
    return line if STATE_DICT.match(str(exc)) else f"{doing}{type(exc).__name__}: {line}"


def located(exc: BaseException, path: Path) -> str:
    """``path``, with the line of the user's code where ``exc`` was raised: the deepest frame of its traceback in a
    file of ``path``'s folder (a SyntaxError's own line), e.g. ``sub/model.py, line 3`` or ``sub/model.py
    (sub/helpers.py, line 7)``; ``path`` alone when no frame is there."""
    folder = path.resolve().parent
    frames = [(f.filename, f.lineno) for f in traceback.extract_tb(exc.__traceback__)]
    if isinstance(exc, SyntaxError) and exc.filename:
        frames.append((exc.filename, exc.lineno))
    for filename, line in reversed(frames):
        file = Path(filename).resolve()
        if line and not filename.startswith("<") and _users(file, folder):
            if file == path.resolve():
                return f"{path}, line {line}"
            return f"{path} ({path.parent / file.relative_to(folder)}, line {line})"
    return str(path)


def _users(file: Path, folder: Path) -> bool:
    """Whether ``file`` is the user's code in their submission's ``folder``: not the harness's, nor an installed
    package's or a hidden folder's (a virtual environment there), which the bundle leaves out or holds no code of."""
    if not file.is_relative_to(folder) or file.is_relative_to(HARNESS):
        return False
    parts = file.relative_to(folder).parts
    return not any(part.startswith(".") or part == "site-packages" for part in parts)


def detail(exc: BaseException) -> str | None:
    """The whole text of the failure a :class:`HarnessError` reports, its cause's traceback (None without one)."""
    return None if exc.__cause__ is None else "".join(traceback.format_exception(exc.__cause__)).rstrip()
