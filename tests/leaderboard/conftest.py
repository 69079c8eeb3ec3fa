"""Fixtures: a valid harness record factory, malformed records (``rejection``), and the paper's table imported once
per session."""

from __future__ import annotations

import pytest

from lb_records import REJECTIONS, record, set_field
from leaderboard.paper import paper_records, read_paper_table
from leaderboard.store import add_records


def pytest_generate_tests(metafunc):
    """A test that asks for ``rejection`` runs once per (path, value, message) of :data:`lb_records.REJECTIONS`."""
    if "rejection" in metafunc.fixturenames:
        metafunc.parametrize("rejection", REJECTIONS, ids=[f"{p}={v!r}" for p, v, _ in REJECTIONS])


@pytest.fixture
def make_record():
    return record


@pytest.fixture(name="set_field")
def set_field_fixture():
    return set_field


@pytest.fixture(scope="session")
def paper_table():
    return read_paper_table()  # the copy shipped inside the package


@pytest.fixture(scope="session")
def paper_board(paper_table, tmp_path_factory):
    """A leaderboard holding the paper's 1,848 entries (shared: tests must not write to it)."""
    directory = tmp_path_factory.mktemp("paper") / "board"
    add_records(directory, paper_records(paper_table), create=True)
    return directory
