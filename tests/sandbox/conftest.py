"""The sandbox tests' fixture: one honest sandboxed run of the example CNN on the tiny benchmark."""

import pytest

from attacks import KAPPAS, ORDER_SEED
from glyph_fixtures import cnn_variant
from harness import evaluate


@pytest.fixture(scope="session")
def honest(tiny_glyphs, tmp_path_factory):
    """The honest run's records (sandboxed)."""
    path = cnn_variant(
        tmp_path_factory.mktemp("honest") / "honest.py", "build_model = cnn.build_model\nNAME = 'glyph_cnn'\n"
    )
    return evaluate(path, benchmark=tiny_glyphs, kappas=KAPPAS, progress=False, order_seed=ORDER_SEED).records
