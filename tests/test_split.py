"""The seeded estimation/test split."""

import pytest

from dataset_builder.split import private_count, split_class, split_order, split_private


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


def test_a_share_of_each_class_is_private_by_its_own_seed():
    keys = [f"img{i:03d}" for i in range(50)]
    held = split_private(keys, "n01", private_seed=7, share=0.15)
    assert held == split_private(reversed(keys), "n01", private_seed=7, share=0.15)  # the order given does not count
    assert len(held.private) == 7 and len(held.public) == 43  # floor(50 * 0.15)
    assert sorted(held.public + held.private) == keys and not set(held.public) & set(held.private)
    assert held.private == sorted(held.private) and held.public == sorted(held.public)
    assert split_private(keys, "n01", private_seed=8, share=0.15).private != held.private
    assert split_private(keys, "n02", private_seed=7, share=0.15).private != held.private
    assert held.private != sorted(split_order(keys, "n01", seed=7)[:7])  # not the split's order under the same seed
    grown = split_private(keys + ["zzz"], "n01", private_seed=7, share=0.15)
    assert len(set(grown.private) & set(held.private)) >= 6  # one more image moves at most one


def test_private_counts_and_limits():
    assert [private_count(n, 0.15) for n in (0, 1, 6, 7, 50, 200)] == [0, 0, 0, 1, 7, 30]
    assert private_count(100, 0.29) == 29 and private_count(3, 0.5) == 1  # a class keeps at least half
    assert split_private(["a", "b"], "n01", private_seed=None, share=0.0).public == ["a", "b"]
    with pytest.raises(ValueError, match="between 0 and 0.5"):
        split_private(["a", "b"], "n01", private_seed=1, share=0.6)
    with pytest.raises(ValueError, match="needs a private seed"):
        split_private(["a", "b"], "n01", private_seed=None, share=0.5)
