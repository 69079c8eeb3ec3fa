"""Glyph benchmarks for the tests: a tiny one (seconds) and the embedded default one (what the demo uses)."""

import os
import shutil
from pathlib import Path

import pytest

from dataset_builder.glyphs.build import build

TINY = dict(seed=0, pool_size=48, images_per_class=24, n_test=8, id_test_per_class=8, id_train_per_class=0)


@pytest.fixture(scope="session")
def benchmark_cache(tmp_path_factory) -> Path:
    """A fresh cache folder for embedded benchmarks, also seen by CLI subprocesses."""
    folder = tmp_path_factory.mktemp("cood-cache")
    os.environ["COOD_BENCH_CACHE"] = str(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_glyphs(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tiny") / "glyphs"
    build(folder, progress=False, **TINY)
    return folder


@pytest.fixture(scope="session")
def default_glyphs(benchmark_cache) -> Path:
    from dataset_builder.embedded import embedded_benchmark

    return embedded_benchmark("glyphs", progress=False)


CNN = Path(__file__).resolve().parents[1] / "examples" / "glyph_cnn.py"


def load_example(path: Path):
    """An example submission file as a module (its model, DATA_CONFIG, KAPPAS)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
CNN_PREAMBLE = f"""
import importlib.util
import numpy as np
import torch
from harness.submission import user_kappa
from pathlib import Path
spec = importlib.util.spec_from_file_location("cnn", Path(__file__).with_name("glyph_cnn.py"))
cnn = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cnn)
DATA_CONFIG = cnn.DATA_CONFIG


def variant(cls):
    \"\"\"An instance of ``cls`` (a GlyphCNN subclass) with the example's trained weights.\"\"\"
    model = cls()
    model.load_state_dict(cnn.build_model().state_dict())
    return model
"""


def cnn_variant(path: Path, body: str) -> Path:
    """Write a submission file at ``path``: the example CNN loaded as ``cnn`` (with ``variant``), then ``body``. The
    example and its weights are copied beside it, into its bundle (a sandboxed file reads only its own folder)."""
    if not (path.parent / CNN.name).exists():
        shutil.copy(CNN, path.parent / CNN.name)
        (path.parent / "weights").mkdir(exist_ok=True)
        shutil.copy(CNN.parent / "weights" / "glyph_cnn.safetensors", path.parent / "weights")
    path.write_text(CNN_PREAMBLE + body)
    return path
