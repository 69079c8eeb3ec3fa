"""Reading a built benchmark folder: manifest, class tables, shard lists, integrity checks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from dataset_builder.errors import BenchmarkError
from dataset_builder.manifest import load_manifest
from dataset_builder.shards import file_sha256

SPLITS = ("id_test", "id_train", "ood_estimation", "ood_test")


@dataclass(frozen=True)
class Benchmark:
    """A benchmark on disk. ``id_classes`` and ``ood_classes`` are ordered by their ``index`` column."""

    root: Path
    manifest: dict
    sha256: str
    id_classes: pd.DataFrame
    ood_classes: pd.DataFrame

    @classmethod
    def open(cls, root: str | Path) -> "Benchmark":
        root = Path(root)
        manifest, sha256 = load_manifest(root)
        try:
            id_classes = pd.read_parquet(root / "classes" / "id.parquet").sort_values("index", ignore_index=True)
            table = pd.read_parquet(root / "classes" / "ood.parquet")
        except (OSError, ValueError) as exc:
            raise BenchmarkError(f"cannot read the class tables of {root}: {exc}") from None
        ood_classes = table[table["status"] == "ood"].sort_values("index", ignore_index=True)
        return cls(root, manifest, sha256, id_classes, ood_classes)

    @property
    def name(self) -> str:
        return self.manifest["benchmark"]["id"]

    @property
    def image_ext(self) -> str:
        return self.manifest["image_ext"]

    def identity(self) -> dict:
        """What a result record says about the benchmark it was computed on."""
        return {
            "id": self.manifest["benchmark"]["id"],
            "version": self.manifest["benchmark"]["version"],
            "manifest_sha256": self.sha256,
            "num_id_classes": len(self.id_classes),
            "num_ood_classes": len(self.ood_classes),
        }

    def shards(self, split: str) -> list[dict]:
        if split not in SPLITS:
            raise BenchmarkError(f"unknown split '{split}'; known: {', '.join(SPLITS)}")
        return [s for s in self.manifest["shards"] if s["split"] == split]

    def shard_path(self, shard: dict) -> Path:
        return self.root / shard["path"]

    def verify(self, splits: tuple[str, ...] = SPLITS, deep: bool = True) -> None:
        """Check every shard of ``splits`` exists with the manifest's size (and sha256 when ``deep``)."""
        for split in splits:
            for shard in self.shards(split):
                path = self.shard_path(shard)
                if not path.is_file():
                    raise BenchmarkError(f"shard {shard['path']} listed in the manifest is missing")
                if path.stat().st_size != shard["num_bytes"]:
                    raise BenchmarkError(f"corrupt shard {shard['path']}: {path.stat().st_size} bytes, manifest says {shard['num_bytes']}")
                if deep and file_sha256(path) != shard["sha256"]:
                    raise BenchmarkError(f"corrupt shard {shard['path']}: sha256 differs from the manifest")
