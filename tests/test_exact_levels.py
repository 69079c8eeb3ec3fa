"""The paper's severity levels, exactly: recomputed independently (pandas means of the reported value, the
original code's float window rule) from the per-sample scores of a real run on the embedded benchmark."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness import evaluate

pytestmark = pytest.mark.slow  # real runs: the quick loop (-m 'not slow') leaves them to CI

CNN = Path(__file__).resolve().parents[1] / "examples" / "glyph_cnn.py"
KAPPAS = ["softmax", "entropy", "max_logit", "energy", "odin"]


@pytest.fixture(scope="module")
def run(default_glyphs):
    """The example CNN in this process (the sandbox and its re-check have tests of their own), on the public images."""
    return evaluate(CNN, benchmark=default_glyphs, kappas=KAPPAS, progress=False, trust_submission=True, private=False)


def paper_levels(
    values: np.ndarray, labels: np.ndarray, window: int, num_levels: int = 11
) -> tuple[list[set], list[float]]:
    """The levels as the paper's code forms them: per-class mean of the kappa's value, ascending, sliding windows of
    ``window`` classes, window starts ``int(linspace(0, 1, L)[l] * N)`` with the last moved back by one."""
    means = pd.Series(values).groupby(labels).mean()
    order = means.sort_values(kind="stable").index.to_numpy()
    num_windows = len(order) - window + 1
    starts = [int(p * num_windows) for p in np.linspace(0, 1, num_levels)]
    starts[-1] -= 1
    sets = [set(order[s : s + window].tolist()) for s in starts]
    return sets, [float(means[order[s : s + window]].mean()) for s in starts]


@pytest.mark.parametrize("kappa", KAPPAS)
def test_levels_equal_the_papers_rule(run, kappa):
    est = run.scores["ood_estimation"]
    result = next(r for r in run.results if r.kappa == kappa)
    window = len(run.benchmark.id_classes)
    expected_sets, expected_scores = paper_levels(est.confs[kappa], est.labels, window)
    assert [set(level.tolist()) for level in result.levels.classes] == expected_sets
    assert result.levels.level_scores == pytest.approx(expected_scores, rel=1e-12, abs=1e-12)
    if kappa in ("softmax", "odin"):  # the reported value is a probability; the ranking score its logarithm
        assert np.all((est.confs[kappa] > 0) & (est.confs[kappa] <= 1))
        assert est.confs[kappa] == pytest.approx(np.exp(est.scores[kappa]), rel=1e-12)
    else:
        assert np.array_equal(est.confs[kappa], est.scores[kappa])
