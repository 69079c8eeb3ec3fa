"""The seeded estimation/test split."""

import pytest

from dataset_builder.split import split_class


def test_split_is_deterministic_disjoint_and_sized():
    keys = [f"img{i:03d}" for i in range(250)]
    a = split_class(keys, "n01", seed=0, n_test=50, images_per_class=200)
    b = split_class(reversed(keys), "n01", seed=0, n_test=50, images_per_class=200)
    assert a == b
    assert len(a.test) == 50 and len(a.estimation) == 150
    assert not set(a.test) & set(a.estimation)
    assert a.test == sorted(a.test)


def test_split_depends_on_seed_and_class_but_not_on_other_images():
    keys = [f"img{i:03d}" for i in range(200)]
    base = split_class(keys, "n01", seed=0, n_test=50)
    assert split_class(keys, "n01", seed=1, n_test=50) != base
    assert split_class(keys, "n02", seed=0, n_test=50) != base
    # adding images to the class only ever moves an image from test to "not kept" or keeps it
    grown = split_class(keys + ["zzz"], "n01", seed=0, n_test=50)
    assert len(set(grown.test) & set(base.test)) >= 49


def test_too_few_images_or_duplicates_are_errors():
    with pytest.raises(ValueError, match="fewer than n_test"):
        split_class(["a", "b"], "n01", seed=0, n_test=3)
    with pytest.raises(ValueError, match="duplicate"):
        split_class(["a", "a", "b"], "n01", seed=0, n_test=1)
