"""The canonical seeded estimation/test split of docs/method.md section 2 (pure, no I/O).

A class's images are ordered by ``sha256(f"{seed}/{class_id}/{image_key}")``; the first
``images_per_class`` are kept and the first ``n_test`` of those are the test images. The split of
a class never depends on other classes.

A share of each class's test images can be held back from publication (the private part,
docs/benchmark-format.md "The private part"): they are ordered by
``sha256(f"private/{private_seed}/{class_id}/{image_key}")`` and the first ``floor(n * share)`` of the
class's ``n`` test images are private. The image builders pass a secret private seed, so the choice is not
known from the published seed; the glyph builder passes its own seed and renders the private images from the
secret one instead. A class's choice never depends on other classes.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from dataclasses import dataclass

DEFAULT_FIT_PER_CLASS = 100  # id_fit images per ID class; docs/benchmark-format.md "The ID fit split" says why

SPLIT_RULE = (
    "order images by sha256(f'{seed}/{class_id}/{image_key}'); keep the first images_per_class; "
    "the first n_test of those are test"
)
MAX_PRIVATE_SHARE = 0.5  # a class keeps at least half of its test images public
PRIVATE_RULE = (
    "per class, order the test images by sha256(f'private/{private_seed}/{class_id}/{image_key}'); "
    "the first floor(n_test_images * share) are private"
)


@dataclass(frozen=True)
class ClassSplit:
    """Image keys of one class, each list sorted by key."""

    estimation: list[str]
    test: list[str]


@dataclass(frozen=True)
class PrivateSplit:
    """A class's test image keys: those published and those held back, each list sorted by key."""

    public: list[str]
    private: list[str]


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


def private_count(n: int, share: float) -> int:
    """How many of a class's ``n`` test images are private: ``floor(n * share)`` (rounded to 9 decimals first, so
    that ``0.29 * 100`` gives 29)."""
    if not 0 <= share <= MAX_PRIVATE_SHARE:
        raise ValueError(f"private share must be between 0 and {MAX_PRIVATE_SHARE}, got {share}")
    return math.floor(round(n * share, 9))


def split_private(test_keys: Iterable[str], class_id: str, private_seed: int | None, share: float) -> PrivateSplit:
    """Split one class's test image keys into published and private ones (see module docstring); when no image is
    private (a share of 0) no seed is needed."""
    keys = list(test_keys)
    count = private_count(len(keys), share)
    if count == 0:
        return PrivateSplit(public=sorted(keys), private=[])
    if private_seed is None:
        raise ValueError("a private share above 0 needs a private seed")
    ordered = sorted(keys, key=lambda key: hashlib.sha256(f"private/{private_seed}/{class_id}/{key}".encode()).digest())
    return PrivateSplit(public=sorted(ordered[count:]), private=sorted(ordered[:count]))
