"""cood-bench dataset builder: OOD pools, seeded splits, WebDataset shards, per-model severity levels."""

__version__ = "0.1.0"
