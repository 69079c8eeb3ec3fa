"""The embedded benchmark, built on first use into a cache folder. Its name, version and settings are known at once;
its builder (whose imports take seconds) is imported only to build it."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from importlib import import_module
from pathlib import Path

from filelock import FileLock

from dataset_builder.manifest import MANIFEST

EMBEDDED = {"glyphs": "dataset_builder.glyphs"}  # name -> its package: .settings (light) and .build
log = logging.getLogger("cood.builder")  # the harness shows these lines among its own (harness.phases)


def cache_root() -> Path:
    """``$COOD_BENCH_CACHE``, else ``~/.cache/cood-bench``."""
    return Path(os.environ.get("COOD_BENCH_CACHE", Path.home() / ".cache" / "cood-bench"))


def embedded_settings(name: str):
    """The settings module of the embedded benchmark ``name``: ``BENCHMARK_VERSION``, ``NUM_ID_CLASSES``,
    ``DEFAULTS``."""
    return import_module(f"{EMBEDDED[name]}.settings")


def embedded_benchmark(name: str = "glyphs", *, progress: bool = True, workers: int = 2, **settings) -> Path:
    """The folder of an embedded benchmark built with ``settings`` (defaults: the builder's), building it on first
    use."""
    known = embedded_settings(name)
    changed = {k: v for k, v in settings.items() if known.DEFAULTS.get(k, object()) != v}
    tag = (
        "default"
        if not changed
        else "custom-" + hashlib.sha256(json.dumps(changed, sort_keys=True).encode()).hexdigest()[:12]
    )
    folder = cache_root() / f"{name}-{known.BENCHMARK_VERSION}" / tag
    if (folder / MANIFEST).is_file():  # built: reading takes no lock, so a read-only cache works
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder) + ".lock"):  # concurrent first uses build it once
        if not (folder / MANIFEST).is_file():
            started = time.perf_counter()
            log.info(f"building the embedded benchmark {name} on first use, in {folder} (about 30 s on 2 cores)")
            builder = import_module(f"{EMBEDDED[name]}.build")
            builder.build(folder, progress=progress, workers=workers, **{**known.DEFAULTS, **settings})
            log.info(f"built {name} in {time.perf_counter() - started:.1f} s")
    return folder


def embedded_num_id_classes(name: str) -> int:
    """The number of ID classes of an embedded benchmark, known without building it."""
    return embedded_settings(name).NUM_ID_CLASSES


def embedded_num_ood_classes(name: str) -> int:
    """The number of OOD classes of an embedded benchmark built with its defaults (a seeded sample of that many of
    the classes that survive its rules), known without building it."""
    return embedded_settings(name).DEFAULTS["pool_size"]
