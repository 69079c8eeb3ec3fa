"""Reading JSON that may come from anyone: bounded size and nesting, one-line errors naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from leaderboard.errors import LeaderboardError

MAX_BYTES = 1 << 20  # a record is a few KiB; a file over 1 MiB is not a record
MAX_DEPTH = 16  # a record nests 4 deep; deeper input is refused before the recursive parser sees it


def too_large(source: object) -> LeaderboardError:
    """The error for input ``source`` of more than :data:`MAX_BYTES` bytes."""
    return LeaderboardError(f"{source}: over the size limit of {MAX_BYTES:,} bytes")


def read_limited(path: Path) -> bytes:
    """The bytes of ``path``; a one-line error when it cannot be read or holds more than :data:`MAX_BYTES`."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise LeaderboardError(f"{path}: cannot read: {exc.strerror}") from exc
    if len(data) > MAX_BYTES:
        raise too_large(path)
    return data


def nesting(data: bytes) -> int:
    """How deep ``[`` and ``{`` nest in JSON text; brackets inside strings do not count (linear time)."""
    text = np.frombuffer(data, dtype=np.uint8)
    index = np.arange(len(text))
    run = index - np.maximum.accumulate(np.where(text == ord("\\"), -1, index))  # backslashes ending at i
    quotes = np.flatnonzero(text == ord('"'))
    escaped = np.concatenate(([0], run[:-1]))[quotes] % 2 == 1
    toggles = np.zeros(len(text), np.int64)
    toggles[quotes[~escaped]] = 1
    outside = np.cumsum(toggles) % 2 == 0  # a closing quote counts as outside, harmlessly
    steps = np.isin(text, (ord("["), ord("{"))).astype(np.int64) - np.isin(text, (ord("]"), ord("}")))
    return int(np.cumsum(steps * outside).max(initial=0))


def parse(data: bytes, source: str) -> object:
    """The JSON value in ``data``; a one-line error naming ``source`` when it is too large, too deep or not JSON."""
    if len(data) > MAX_BYTES:
        raise too_large(source)
    if nesting(data) > MAX_DEPTH:
        raise LeaderboardError(f"{source}: JSON nested deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(data)
    except ValueError as exc:  # not JSON, not UTF-8, or an integer of more digits than Python converts
        raise LeaderboardError(f"{source}: malformed JSON: {exc}") from exc


def load(path: Path) -> object:
    """The JSON value in file ``path``, read and parsed within the limits."""
    return parse(read_limited(path), str(path))


def too_deep(value: object) -> bool:
    """Whether dicts and lists nest deeper than :data:`MAX_DEPTH` in ``value`` (checked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list, tuple)):
            if depth > MAX_DEPTH:
                return True
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return False
