"""Shared fixtures and markers.

Importing this file reserves the local Hub (``hub_server.py``: a port, and every Hugging Face client of the session
pointed at it) before any test module imports ``huggingface_hub`` or ``datasets``; the ``hub_server`` fixture starts
it when a test first asks.
"""

import pytest

import hub_server as _hub

_LOCAL_HUB = _hub.reserve_for_session()


@pytest.fixture(scope="session")
def hub_server() -> str:
    """The local Hub's endpoint URL, e.g. ``HfApi(endpoint=hub_server)``; repos persist for the session."""
    return _LOCAL_HUB.start().url


@pytest.fixture(autouse=True)
def one_secret_order(monkeypatch):
    """Runs in this process draw one order seed, so that two runs in a test stream the same batches and give the same
    bytes (a run draws its own otherwise; tests/sandbox/test_order.py gives its runs theirs)."""
    from harness.runtime import interleave

    monkeypatch.setattr(interleave, "new_order_seed", lambda: 7)


def pytest_collection_modifyitems(items):
    """A test that asks for the local Hub is marked ``hub`` (``-m "not hub"`` leaves them out)."""
    for item in items:
        if "hub_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.hub)


from glyph_fixtures import benchmark_cache, default_glyphs, fit_glyphs, private_glyphs, tiny_glyphs  # noqa: E402,F401
