"""CSV that a spreadsheet opens as data: the one writer of every CSV file the project writes (the leaderboard's
``table.csv``, the site's ``downloads/leaderboard.csv``, the harness's ``per_level.csv``).

Model and kappa names come from submitters; a cell such as ``=HYPERLINK(...)`` or ``@SUM(...)`` would run as a formula
when the file is opened in a spreadsheet. Following OWASP's rule for CSV injection, a text cell that starts with ``=``,
``+``, ``-``, ``@``, a tab or a carriage return gets a single quote in front. Only text is changed: numbers (negative
ones too) stay numbers.
"""

from __future__ import annotations

import pandas as pd

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(value):
    """``value`` as a CSV cell may hold it: a text starting with one of :data:`FORMULA_STARTS` quoted with ``'``."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def csv_bytes(frame: pd.DataFrame) -> bytes:
    """``frame`` as CSV (UTF-8, no index), every text cell and column name through :func:`safe_cell`."""
    safe = frame.rename(columns=safe_cell)
    for index in range(safe.shape[1]):
        column = safe.iloc[:, index]
        if column.dtype == object or pd.api.types.is_string_dtype(column.dtype):
            safe.isetitem(index, column.map(safe_cell))
    return safe.to_csv(index=False).encode("utf-8")
