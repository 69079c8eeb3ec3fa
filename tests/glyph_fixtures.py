"""Glyph benchmarks for the tests: a tiny one (seconds) and the embedded default one (what the demo uses)."""

import os
import shutil
from pathlib import Path

import pytest
from filelock import FileLock

from dataset_builder.glyphs.build import build
from dataset_builder.manifest import MANIFEST

TINY = dict(seed=0, pool_size=48, images_per_class=24, n_test=8, id_test_per_class=8, id_train_per_class=0)


def session_folder(tmp_path_factory) -> Path:
    """A folder of this test session shared by its xdist workers: the parent of a worker's temporary folder (the
    controller's, fresh for each session), or the session's own temporary folder without xdist."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once(folder: Path, build_into) -> Path:
    """``folder``, built by ``build_into(folder)`` by the first worker that asks; the others wait for it, then read
    it."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder) + ".lock"):
        if not (folder / MANIFEST).is_file():
            build_into(folder)
    return folder


@pytest.fixture(scope="session", autouse=True)
def benchmark_cache(tmp_path_factory) -> Path:
    """A fresh cache folder for embedded benchmarks and scores, set for the whole session (also seen by CLI
    subprocesses) and shared by its xdist workers: the embedded benchmark is built once, under its lock."""
    folder = session_folder(tmp_path_factory) / "cood-cache"
    folder.mkdir(exist_ok=True)
    os.environ["COOD_BENCH_CACHE"] = str(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_glyphs(tmp_path_factory) -> Path:
    """The tiny glyph benchmark, built once per session (shared by the xdist workers; tests must not write to it)."""
    return built_once(
        session_folder(tmp_path_factory) / "tiny" / "glyphs", lambda folder: build(folder, progress=False, **TINY)
    )


FIT_PER_CLASS = 30
PRIVATE = dict(n_test=16, id_test_per_class=16, private_share=0.25, private_seed=5)  # 144 + 192 private test images


@pytest.fixture(scope="session")
def private_glyphs(tmp_path_factory) -> Path:
    """The tiny glyph benchmark with twice the test images and a quarter of them held back in its private part."""
    return built_once(
        session_folder(tmp_path_factory) / "private" / "glyphs",
        lambda folder: build(folder, progress=False, **{**TINY, **PRIVATE}),
    )


@pytest.fixture(scope="session")
def fit_glyphs(tmp_path_factory) -> Path:
    """The tiny glyph benchmark with an ID training split to fit on, built once per session."""
    return built_once(
        session_folder(tmp_path_factory) / "fit" / "glyphs",
        lambda folder: build(folder, progress=False, **{**TINY, "id_train_per_class": FIT_PER_CLASS}),
    )


@pytest.fixture(scope="session")
def default_glyphs(benchmark_cache) -> Path:
    from dataset_builder.embedded import embedded_benchmark

    return embedded_benchmark("glyphs", progress=False)


CNN = Path(__file__).resolve().parents[1] / "examples" / "glyph_cnn.py"


def load_example(path: Path):
    """A Python file as a module: an example submission (its model, DATA_CONFIG, KAPPAS) or a benchmark script."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CNN_PREAMBLE = """
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


NEGATED = """
NAME = 'glyph_cnn'
class M(cnn.GlyphCNN):
    def forward(self, x):
        return -super().forward(x)
def build_model():
    return variant(M)
"""


def negated_cnn(folder: Path) -> Path:
    """Other code with the example CNN's weights and name: its logits negated, in a bundle of its own in ``folder``."""
    folder.mkdir()
    return cnn_variant(folder / f"{folder.name}.py", NEGATED)
