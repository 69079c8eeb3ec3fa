"""The private part of a benchmark: test images held back from publication, so that a submission that memorised the
published images is caught (docs/benchmark-format.md "The private part"). ``<root>/private/`` holds its own
``manifest.json`` (the private seed, share and rule, the private images per split and class, every private shard with
its sha256) and its shards, laid out as the public ones: ``id/test/*.tar`` and ``ood/test/<group>/<class>.tar``,
their paths relative to ``private/``, and the sha256 of the public manifest it belongs to (:func:`link`). The public
manifest's ``private`` entry names only the share, the rule and the number of private images per split, never the
seed, a key, a row or the private manifest's hash: the public benchmark's identity is the same for every private seed
(each user of the embedded glyph benchmark draws their own). ``publish`` never uploads the folder: the board's
operator keeps it, or a private repo. Which images are private: :func:`dataset_builder.split.split_private`.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from dataset_builder.errors import BenchmarkError
from dataset_builder.manifest import MANIFEST, load_manifest, write_manifest
from dataset_builder.split import MAX_PRIVATE_SHARE, PRIVATE_RULE

FOLDER = "private"
DEFAULT_SHARE = 0.0  # off for now; docs/benchmark-format.md "The private part" suggests 0.1 to 0.2
SPLITS = ("id_test", "ood_test")
LINK = "benchmark_manifest_sha256"  # the private manifest's field naming the public manifest it belongs to


def check_share(share: float) -> None:
    """A private share outside ``[0, MAX_PRIVATE_SHARE]`` is an error."""
    if not 0 <= share <= MAX_PRIVATE_SHARE:
        raise BenchmarkError(f"the private share must be between 0 and {MAX_PRIVATE_SHARE}, got {share}")


def resolve_seed(share: float, seed: int | None) -> int | None:
    """The private seed of a build: ``seed``, else (a share above 0) one drawn from :mod:`secrets`, which only the
    private manifest records (:func:`check_share` first)."""
    check_share(share)
    if seed is None and share > 0:
        return secrets.randbits(63)
    return seed


def with_private_part(
    root: Path,
    manifest: dict,
    *,
    share: float,
    seed: int | None,
    counts: dict[str, dict[str, int]],
    shards: list[dict],
    rule: str = PRIVATE_RULE,
) -> dict:
    """Write the private part's manifest into ``root/private`` (:func:`link` names the public manifest in it once that
    is written) and return ``manifest`` with its ``private`` entry; ``manifest`` as it is when ``share`` is 0.
    ``counts``: split -> class id -> private images (every test class, 0 included); ``shards``: the private shards'
    manifest entries; ``rule``: how the private images were chosen."""
    if share == 0:
        return manifest
    part = {
        "format_version": manifest["format_version"],
        "part": "private",
        "benchmark": manifest["benchmark"],
        "image_ext": manifest["image_ext"],
        "max_image_pixels": manifest["max_image_pixels"],
        "private": {"seed": seed, "share": share, "rule": rule},
        "classes": {split: dict(sorted(counts.get(split, {}).items())) for split in SPLITS},
        "shards": shards,
    }
    (root / FOLDER).mkdir(parents=True, exist_ok=True)
    write_manifest(root / FOLDER, part)
    entry = {
        "share": share,
        "rule": rule,
        "num_images": {split: sum(part["classes"][split].values()) for split in SPLITS},
    }
    return {**manifest, "private": entry}


def link(root: Path, public_sha256: str) -> None:
    """Name the public manifest (its sha256) in the private manifest of ``root``, if it has a private part."""
    if (root / FOLDER / MANIFEST).is_file():
        part, _ = load_manifest(root / FOLDER)
        write_manifest(root / FOLDER, {**part, LINK: public_sha256})
