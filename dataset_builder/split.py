"""The canonical seeded estimation/test split of docs/method.md section 2 (pure, no I/O).

A class's images are ordered by ``sha256(f"{seed}/{class_id}/{image_key}")``; the first
``images_per_class`` are kept and the first ``n_test`` of those are the test images. The split of
a class never depends on other classes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

DEFAULT_FIT_PER_CLASS = 100  # id_fit images per ID class; docs/benchmark-format.md "The ID fit split" says why

SPLIT_RULE = (
    "order images by sha256(f'{seed}/{class_id}/{image_key}'); keep the first images_per_class; "
    "the first n_test of those are test"
)


@dataclass(frozen=True)
class ClassSplit:
    """Image keys of one class, each list sorted by key."""

    estimation: list[str]
    test: list[str]


def split_order(keys: Iterable[str], class_id: str, seed: int) -> list[str]:
    """Keys in the seeded hash order of the split rule."""
    return sorted(keys, key=lambda key: hashlib.sha256(f"{seed}/{class_id}/{key}".encode()).digest())


def split_class(
    keys: Iterable[str], class_id: str, seed: int, n_test: int, images_per_class: int | None = None
) -> ClassSplit:
    """Split one class's image keys into estimation and test (see module docstring)."""
    ordered = split_order(keys, class_id, seed)
    if len(set(ordered)) != len(ordered):
        raise ValueError(f"class {class_id} has duplicate image keys")
    kept = ordered if images_per_class is None else ordered[:images_per_class]
    if n_test > len(kept):
        raise ValueError(f"class {class_id} has {len(kept)} images, fewer than n_test={n_test}")
    return ClassSplit(estimation=sorted(kept[n_test:]), test=sorted(kept[:n_test]))
