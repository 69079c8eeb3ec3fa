"""cood-bench dataset builder: OOD pools, seeded splits, WebDataset shards, per-model severity levels, the Hub.

Exports load on first use (the builders import heavy libraries).
"""

from importlib.metadata import version

from dataset_builder.exports import lazy_exports

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

__getattr__ = lazy_exports(__name__, _EXPORTS)
