"""Reading a benchmark, from a local folder or a Hub dataset repo at a pinned revision:
manifest, class tables, shard lists, integrity checks.

A Hub benchmark is named ``hf://datasets/<owner>/<name>@<revision>``; its manifest and class tables
are downloaded when it is opened, each shard when it is first read (huggingface_hub's cache).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from dataset_builder.errors import BenchmarkError
from dataset_builder.hub_answer import silent_hub
from dataset_builder.manifest import HUB_PREFIX, MANIFEST, MAX_IMAGE_PIXELS, load_manifest
from dataset_builder.private import FOLDER as PRIVATE_FOLDER
from dataset_builder.private import LINK as PRIVATE_LINK
from dataset_builder.shards import file_sha256

SPLITS = ("id_test", "id_fit", "id_train", "ood_estimation", "ood_test")
PRIVATE_SPLITS = ("id_test_private", "ood_test_private")  # a private part's test splits, beside the public ones


@dataclass(frozen=True)
class Benchmark:
    """A benchmark on disk. ``id_classes`` and ``ood_classes`` are ordered by their ``index`` column."""

    root: Path
    manifest: dict
    sha256: str
    id_classes: pd.DataFrame
    ood_classes: pd.DataFrame
    hub: tuple[str, str] | None = None  # (repo id, commit sha) of a Hub benchmark
    private_sha256: str | None = None  # the private part's manifest sha256, once :meth:`with_private` added it

    @classmethod
    def open(cls, root: str | Path) -> Benchmark:
        if str(root).startswith(HUB_PREFIX):
            return cls._open_hub(str(root))
        return cls._open_folder(Path(root), local=True)

    @classmethod
    def _open_folder(cls, root: Path, local: bool) -> Benchmark:
        manifest, sha256 = load_manifest(root, local=local)
        try:
            id_classes = pd.read_parquet(root / "classes" / "id.parquet").sort_values("index", ignore_index=True)
            table = pd.read_parquet(root / "classes" / "ood.parquet")
        except (OSError, ValueError) as exc:
            raise BenchmarkError(f"cannot read the class tables of {root}: {exc}") from exc
        ood_classes = table[table["status"] == "ood"].sort_values("index", ignore_index=True)
        return cls(root, manifest, sha256, id_classes, ood_classes)

    @classmethod
    def _open_hub(cls, url: str) -> Benchmark:
        from huggingface_hub import HfApi, snapshot_download
        from huggingface_hub.errors import HfHubHTTPError

        repo_id, _, revision = url[len(HUB_PREFIX) :].partition("@")
        silent_hub(f"cannot open {url}")
        try:
            commit = HfApi().dataset_info(repo_id, revision=revision or None).sha
            root = snapshot_download(
                repo_id, repo_type="dataset", revision=commit, allow_patterns=["manifest.json", "classes/*"]
            )
        except (HfHubHTTPError, OSError, ValueError) as exc:
            raise BenchmarkError(f"cannot open {url}: {str(exc).splitlines()[0]}") from exc
        local = cls._open_folder(Path(root), local=False)
        return cls(local.root, local.manifest, local.sha256, local.id_classes, local.ood_classes, hub=(repo_id, commit))

    def private_part(self, folder: str | Path | None = None) -> Benchmark:
        """The private part (ID and OOD test images held back from publication, :mod:`dataset_builder.private`) as a
        benchmark of the same classes whose ``id_test`` and ``ood_test`` shards are the private ones: from ``folder``
        (where its keeper put it), by default ``<root>/private``. Its manifest must be the one the public manifest
        belongs to: it names this benchmark's manifest by sha256."""
        if not self.has_private_part:
            raise BenchmarkError(f"benchmark {self.name} has no private part (its manifest names none)")
        root = Path(folder) if folder is not None else self.root / PRIVATE_FOLDER
        if not (root / MANIFEST).is_file():
            raise BenchmarkError(f"the private part of {self.name} is not at {root}: no {MANIFEST}")
        manifest, sha256 = load_manifest(root)
        named = manifest.get(PRIVATE_LINK)
        if named != self.sha256:
            raise BenchmarkError(
                f"{root / MANIFEST} is not the private part of benchmark {self.name} (manifest {self.sha256[:12]}): "
                f"it names manifest {str(named)[:12]}"
            )
        return Benchmark(root, manifest, sha256, self.id_classes, self.ood_classes)

    @property
    def has_private_part(self) -> bool:
        """Whether the manifest says the benchmark has a private part (kept apart from the published images)."""
        return isinstance(self.manifest.get("private"), dict)

    @property
    def name(self) -> str:
        return self.manifest["benchmark"]["id"]

    @property
    def image_ext(self) -> str:
        return self.manifest["image_ext"]

    @property
    def max_image_pixels(self) -> int:
        """The largest image (width x height) the benchmark holds; readers refuse larger ones."""
        return self.manifest.get("max_image_pixels", MAX_IMAGE_PIXELS)

    def identity(self) -> dict:
        """What a result record says about the benchmark it was computed on."""
        return {
            "id": self.manifest["benchmark"]["id"],
            "version": self.manifest["benchmark"]["version"],
            "manifest_sha256": self.sha256,
            "num_id_classes": len(self.id_classes),
            "num_ood_classes": len(self.ood_classes),
        }

    def with_private(self, folder: str | Path | None = None) -> Benchmark:
        """This benchmark with its private part's test shards (:meth:`private_part`) as two more splits,
        ``id_test_private`` and ``ood_test_private``, read from the private part's folder (each shard's ``file``; its
        ``path`` under ``private/``, apart from the public shards'); its identity (the public manifest's) unchanged."""
        part = self.private_part(folder)
        private = [
            {
                **s,
                "split": f"{s['split']}_private",
                "path": f"{PRIVATE_FOLDER}/{s['path']}",
                "file": str(part.root / s["path"]),
            }
            for s in part.manifest["shards"]
        ]
        manifest = {**self.manifest, "shards": self.manifest["shards"] + private}
        return replace(self, manifest=manifest, private_sha256=part.sha256)

    def shards(self, split: str) -> list[dict]:
        if split not in SPLITS + PRIVATE_SPLITS:
            raise BenchmarkError(f"unknown split '{split}'; known: {', '.join(SPLITS)}")
        return [s for s in self.manifest["shards"] if s["split"] == split]

    def shard_path(self, shard: dict) -> Path:
        """The local file of a shard (a Hub benchmark downloads it first, once; a private part's is in its folder)."""
        if "file" in shard:
            return Path(shard["file"])
        if self.hub is None:
            return self.root / shard["path"]
        from huggingface_hub import hf_hub_download

        repo_id, commit = self.hub
        try:
            return Path(hf_hub_download(repo_id, shard["path"], repo_type="dataset", revision=commit))
        except Exception as exc:  # any download failure is reported as the shard's
            raise BenchmarkError(
                f"cannot fetch shard {shard['path']} from {repo_id}@{commit[:12]}: {str(exc).splitlines()[0]}"
            ) from exc

    def check_shard(self, shard: dict, path: Path, deep: bool = True) -> None:
        """Raise BenchmarkError unless ``path`` has the manifest's size (and sha256 when ``deep``) for ``shard``."""
        if not path.is_file():
            raise BenchmarkError(f"shard {shard['path']} listed in the manifest is missing")
        if path.stat().st_size != shard["num_bytes"]:
            raise BenchmarkError(
                f"corrupt shard {shard['path']}: {path.stat().st_size} bytes, manifest says {shard['num_bytes']}"
            )
        if deep and file_sha256(path) != shard["sha256"]:
            raise BenchmarkError(f"corrupt shard {shard['path']}: sha256 differs from the manifest")

    def verify(self, splits: tuple[str, ...] = SPLITS, deep: bool = True) -> None:
        """Check every shard of ``splits``, and its Parquet copy (format 3), exists with the manifest's size (and
        sha256 when ``deep``)."""
        for split in splits:
            for shard in self.shards(split):
                for file in (shard, *copy_entry(shard)):
                    self.check_shard(file, self.shard_path(file), deep)


def copy_entry(shard: dict) -> list[dict]:
    """The Parquet copy of a manifest shard as an entry of its own (a private shard's ``file`` beside the shard's);
    none for a shard of format 1 or 2."""
    if "parquet" not in shard:
        return []
    local = {"file": str(Path(shard["file"]).with_suffix(".parquet"))} if "file" in shard else {}
    return [{**shard["parquet"], **local}]
