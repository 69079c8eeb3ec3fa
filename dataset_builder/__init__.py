"""cood-bench dataset builder: OOD pools, seeded splits, WebDataset shards, per-model severity levels, the Hub.

Exports load on first use (the builders import heavy libraries).
"""

from importlib import import_module
from importlib.metadata import version

__version__ = version("cood-bench")
_EXPORTS = {
    "Benchmark": "dataset_builder.benchmark",
    "BenchmarkError": "dataset_builder.errors",
    "build_imagenet": "dataset_builder.imagenet",
    "build_folder": "dataset_builder.folder",
    "build_glyphs": "dataset_builder.glyphs.build:build",
    "embedded_benchmark": "dataset_builder.embedded",
    "load_level": "dataset_builder.loading",
    "add_levels": "dataset_builder.card",
    "write_card": "dataset_builder.card",
}
__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'dataset_builder' has no attribute '{name}'")
    module, _, attr = _EXPORTS[name].partition(":")
    return getattr(import_module(module), attr or name)
