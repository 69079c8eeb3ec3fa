"""Fixtures: a valid harness record factory, and the paper's table imported once per session."""

from __future__ import annotations

import pytest

from leaderboard.paper import paper_records, read_paper_table
from leaderboard.store import add_records

from lb_records import record


@pytest.fixture
def make_record():
    return record


@pytest.fixture(scope="session")
def paper_table():
    return read_paper_table()  # the copy shipped inside the package


@pytest.fixture(scope="session")
def paper_board(paper_table, tmp_path_factory):
    """A leaderboard holding the paper's 1,848 entries (shared: tests must not write to it)."""
    directory = tmp_path_factory.mktemp("paper") / "board"
    add_records(directory, paper_records(paper_table), create=True)
    return directory
