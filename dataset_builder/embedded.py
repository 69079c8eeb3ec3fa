"""The embedded benchmark, built on first use into a cache folder."""

from __future__ import annotations

import os
from pathlib import Path

from dataset_builder.glyphs import build as glyph_build

EMBEDDED = {"glyphs": glyph_build}


def cache_root() -> Path:
    """``$COOD_BENCH_CACHE``, else ``~/.cache/cood-bench``."""
    return Path(os.environ.get("COOD_BENCH_CACHE", Path.home() / ".cache" / "cood-bench"))


def embedded_benchmark(name: str = "glyphs", *, progress: bool = True, **options) -> Path:
    """The folder of an embedded benchmark with the given build options, building it if it is not there yet."""
    builder = EMBEDDED[name]
    settings = {**builder.DEFAULTS, **options}
    tag = "-".join(f"{k}{v}" for k, v in sorted(settings.items()) if v != builder.DEFAULTS.get(k))
    folder = cache_root() / f"{name}-{builder.BENCHMARK_VERSION}" / (tag or "default")
    if not (folder / "manifest.json").is_file():
        builder.build(folder, progress=progress, **settings)
    return folder
