"""Severity levels (docs/method.md section 3): hand-computed cases, properties, errors, the named rules (integer, the
canonical one, and the original code's float rule) and the windows' real percentiles."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.config import EvalConfig
from harness.errors import HarnessError
from harness.method import severity_names
from harness.method.severity import (
    DEFAULT_RULE,
    SEVERITY_RULES,
    check_rule,
    class_scores,
    num_windows,
    severity_convention,
    severity_levels,
    window_starts,
)


def float_rule(n: int, num_levels: int) -> list[int]:
    """The original code's window starts, written here independently of the harness."""
    starts = [int(x * n) for x in np.linspace(0, 1, num_levels)]
    starts[-1] -= 1
    return starts


def test_hand_computed_levels():
    # K = 6 classes, W = 2, L = 3: N = 5 windows, starts (0*5)//2 = 0, (1*5)//2 = 2, last = 4.
    s = np.array([0.5, 0.1, 0.9, 0.3, 0.7, 0.2])
    levels = severity_levels(s, window=2, num_levels=3)
    # ascending order of classes: 1 (0.1), 5 (0.2), 3 (0.3), 0 (0.5), 4 (0.7), 2 (0.9)
    assert levels.starts.tolist() == [0, 2, 4]
    assert levels.classes.tolist() == [[1, 5], [3, 0], [4, 2]]
    assert levels.level_scores == pytest.approx([0.15, 0.4, 0.8])
    assert levels.percentiles.tolist() == [0.0, 0.5, 1.0]


def test_ties_are_broken_by_class_index():
    levels = severity_levels(np.array([1.0, 0.0, 1.0, 0.0]), window=2, num_levels=2)
    assert levels.classes.tolist() == [[1, 3], [0, 2]]


def test_eleven_levels_integer_starts():
    # K = 30, W = 10: N = 21 windows; start_l = (l * 21) // 10 for l < 10, and 20 for the last level.
    assert window_starts(21, 11).tolist() == [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20]
    assert window_starts(7, 4).tolist() == [0, 2, 4, 6]


def test_integer_rule_matches_original_float_rule_for_eleven_levels():
    for n in list(range(1, 2000)) + [9_001, 10_321, 29_999, 30_000]:
        assert window_starts(n, 11).tolist() == float_rule(n, 11), n
        assert window_starts(n, 11, "original").tolist() == float_rule(n, 11), n


@pytest.mark.parametrize(
    "n, num_levels, level, original, integer",
    [(7, 8, 5, 4, 5), (14, 8, 5, 9, 10), (365, 74, 39, 194, 195)],  # SPEC's case; a small benchmark's; the glyphs'
)
def test_the_rules_differ_by_one_window_for_some_levels(n, num_levels, level, original, integer):
    floats, integers = window_starts(n, num_levels, "original"), window_starts(n, num_levels, "integer")
    assert floats.tolist() == float_rule(n, num_levels)
    assert (floats[level], integers[level]) == (original, integer)
    assert integers[level] == (level * n) // (num_levels - 1)
    assert np.flatnonzero(floats != integers)[0] == level


def test_an_unknown_rule_is_refused_in_one_line():
    message = f"unknown severity rule 'float'; known: {', '.join(SEVERITY_RULES)}"
    for call in (
        lambda: check_rule("float"),
        lambda: window_starts(14, 8, "float"),
        lambda: EvalConfig(severity_rule="float"),
    ):
        with pytest.raises(HarnessError) as error:
            call()
        assert str(error.value) == message
    assert {"integer", "original"} <= set(SEVERITY_RULES)  # the canonical rule and the original code's


def test_each_rule_is_named_in_the_convention():
    assert severity_convention().endswith("ties by class index, integer window starts")
    assert "int(linspace(0, 1, L)[l] * N)" in severity_convention("original")


def test_the_levels_carry_their_rule_and_their_windows_real_percentiles():
    # K = 49 classes, W = 36: N = 14 windows, L = 8; level 5 starts at window 10 (integer) or 9 (float).
    s = np.random.default_rng(0).permutation(49).astype(float)
    for rule, fifth in (("integer", 10), ("original", 9)):
        levels = severity_levels(s, window=36, num_levels=8, rule=rule)
        assert levels.rule == rule and levels.starts[5] == fifth
        assert levels.window_percentiles.tolist() == pytest.approx((levels.starts / 13).tolist(), abs=0)
        assert levels.window_percentiles[5] == fifth / 13
        assert levels.percentiles.tolist() == pytest.approx([i / 7 for i in range(8)])  # the nominal ones, as before
        assert levels.classes[5].tolist() == np.argsort(s, kind="stable")[fifth : fifth + 36].tolist()
    one = severity_levels(np.arange(4, dtype=float), window=4, num_levels=3)  # N = 1: every level is the one window
    assert one.starts.tolist() == [0, 0, 0] and one.window_percentiles.tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("k,w,windows", [(400, 36, 365), (48, 36, 13), (10, 10, 1), (5, 10, 0)])
def test_the_windows_bound_the_distinct_levels(k, w, windows):
    assert num_windows(k, w) == windows
    if windows >= 2:  # as many levels as windows use each window once; one level more repeats one
        assert len(set(window_starts(windows, windows).tolist())) == windows
        assert len(set(window_starts(windows, windows + 1).tolist())) == windows


def test_class_scores_are_means_per_class():
    scores = np.array([1.0, 3.0, 10.0, 0.5, 1.5])
    labels = np.array([0, 0, 2, 1, 1])
    assert class_scores(scores, labels, 3).tolist() == [2.0, 1.0, 10.0]


@pytest.mark.parametrize(
    "k, w, levels, message",
    [
        (3, 4, 11, "too few OOD classes"),
        (10, 4, 1, "at least 2"),
        (10, 0, 11, "must be positive"),
    ],
)
def test_impossible_inputs(k, w, levels, message):
    with pytest.raises(HarnessError, match=message):
        severity_levels(np.arange(k, dtype=float), window=w, num_levels=levels)


def test_nan_scores_are_refused():
    with pytest.raises(HarnessError, match="NaN"):
        severity_levels(np.array([0.1, np.nan, 0.3]), window=1, num_levels=2)
    with pytest.raises(HarnessError, match="NaN"):
        class_scores(np.array([0.1, np.nan]), np.array([0, 1]), 2)


def test_class_without_estimation_images_is_refused():
    with pytest.raises(HarnessError, match="no estimation images"):
        class_scores(np.array([0.1, 0.2]), np.array([0, 0]), 2)


@settings(max_examples=300, deadline=None)
@given(
    scores=st.lists(st.floats(-1e6, 1e6, allow_nan=False) | st.sampled_from([0.0, 1.0, 0.5]), min_size=1, max_size=120),
    window=st.integers(1, 40),
    num_levels=st.integers(2, 15),
    rule=st.sampled_from(list(SEVERITY_RULES)),
)
def test_level_properties(scores, window, num_levels, rule):
    s = np.array(scores)
    if len(s) < window:
        with pytest.raises(HarnessError):
            severity_levels(s, window, num_levels, rule)
        return
    levels = severity_levels(s, window, num_levels, rule)
    order = np.argsort(s, kind="stable")
    assert levels.classes.shape == (num_levels, window)
    for level in levels.classes:  # each level holds exactly W distinct classes
        assert len(set(level.tolist())) == window
    assert np.all(np.diff(levels.level_scores) >= 0)  # non-decreasing level scores
    assert levels.classes[0][0] == order[0]  # level 0 starts at the least confident class
    assert levels.classes[-1][-1] == order[-1]  # the last level ends at the most confident
    for level, start in zip(levels.classes, levels.starts):
        assert level.tolist() == order[start : start + window].tolist()
    windows = len(s) - window + 1
    expected = levels.starts / (windows - 1) if windows > 1 else np.zeros(num_levels)
    assert levels.window_percentiles.tolist() == expected.tolist()  # start / (N - 1), 0 for a single window


def test_the_light_names_are_the_declared_rules():
    assert severity_names.declared() == (DEFAULT_RULE, {n: r.description for n, r in SEVERITY_RULES.items()})
    described = severity_names.rules_described()
    assert [described.index(f"{name} (") for name in SEVERITY_RULES] == sorted(
        described.index(f"{name} (") for name in SEVERITY_RULES
    )
    assert all(rule.description in described for rule in SEVERITY_RULES.values())
    assert f"{DEFAULT_RULE} (canonical: {SEVERITY_RULES[DEFAULT_RULE].description})" in described
