"""Shared fixtures.

Importing this file starts the local Hub (``hub_server.py``) and points every Hugging Face client
of the session at it, before any test module imports ``huggingface_hub`` or ``datasets``.
"""

import hub_server as _hub
import pytest

_LOCAL_HUB = _hub.start_for_session()


@pytest.fixture(scope="session")
def hub_server() -> str:
    """The local Hub's endpoint URL, e.g. ``HfApi(endpoint=hub_server)``; repos persist for the session."""
    return _LOCAL_HUB.url

from glyph_fixtures import benchmark_cache, default_glyphs, tiny_glyphs  # noqa: E402,F401
