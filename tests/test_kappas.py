"""Confidence functions: logit kappas, ODIN, MC-dropout, kappa resolution."""

import numpy as np
import pytest
import torch
from scipy.special import softmax

from harness.errors import HarnessError
from harness.kappas import BUILTIN_LOGIT_KAPPAS, check_logits, mc_dropout, odin, resolve_kappas
from harness.kappas.model import uniform
from harness.runtime.execution import Execution
from harness.runtime.inference import LocalForward, score_batch_adaptive

LOGITS = np.array([[2.0, 1.0, 0.0], [0.0, 0.0, 0.0], [-1.0, 3.0, 0.5]])


def test_logit_kappas_match_their_definitions():
    p = softmax(LOGITS, axis=1)
    score, conf = BUILTIN_LOGIT_KAPPAS["softmax"](LOGITS)
    np.testing.assert_allclose(conf, p.max(axis=1), rtol=1e-12)
    np.testing.assert_allclose(score, np.log(p.max(axis=1)), rtol=1e-12)
    np.testing.assert_allclose(BUILTIN_LOGIT_KAPPAS["entropy"](LOGITS)[0], np.sum(p * np.log(p), axis=1), rtol=1e-12)
    np.testing.assert_allclose(BUILTIN_LOGIT_KAPPAS["max_logit"](LOGITS)[0], [2.0, 0.0, 3.0])
    np.testing.assert_allclose(
        BUILTIN_LOGIT_KAPPAS["energy"](LOGITS)[0], np.log(np.exp(LOGITS).sum(axis=1)), rtol=1e-12
    )


def test_softmax_ranking_does_not_saturate_at_one():
    logits = np.array([[40.0, 0.0], [45.0, 0.0], [45.0, 0.0]])
    score, conf = BUILTIN_LOGIT_KAPPAS["softmax"](logits)
    assert conf[0] == conf[1] == 1.0  # the probability itself rounds to 1.0 in float64 ...
    assert score[0] < score[1] == score[2] < 0.0  # ... the ranking score keeps them apart
    assert score[0] == pytest.approx(-np.exp(-40.0), rel=1e-12)


def test_bad_logits_are_refused():
    with pytest.raises(HarnessError, match=r"shape \(3, 3\), expected \(batch, 5\)"):
        check_logits(LOGITS, 5)
    with pytest.raises(HarnessError, match="NaN"):
        check_logits(np.array([[0.0, np.nan]]), 2)


def test_odin_hand_computed_on_a_linear_model():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3).double()
    x = torch.randn(5, 4, dtype=torch.float64)
    temperature, epsilon = 2.0, 0.01
    score, conf = odin(model, x, temperature, epsilon)
    # gradient of -log softmax(Wx/T)[yhat] w.r.t. x is -(W[yhat] - p @ W) / T
    with torch.no_grad():
        p = torch.softmax(model(x) / temperature, dim=1)
        yhat = p.argmax(dim=1)
        grad = -(model.weight[yhat] - p @ model.weight) / temperature
        expected = torch.softmax(model(x - epsilon * torch.sign(grad)) / temperature, dim=1).max(dim=1).values
    torch.testing.assert_close(conf, expected)
    torch.testing.assert_close(score, expected.log())
    assert torch.all(conf >= p.max(dim=1).values - 1e-12)  # the perturbation raises the top probability


def test_mc_dropout_draws_each_images_masks_from_its_seed_and_needs_dropout():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 3)).eval()
    x = torch.randn(6, 4)
    seeds = np.arange(6) * 1000 + 5
    a, b = mc_dropout(model, x, 30, seeds), mc_dropout(model, x, 30, seeds)
    torch.testing.assert_close(a, b)
    alone = torch.cat([mc_dropout(model, x[i : i + 1], 30, seeds[i : i + 1]) for i in range(6)])
    torch.testing.assert_close(alone, a)  # an image's value does not depend on its batch
    assert not torch.allclose(mc_dropout(model, x, 30, seeds + 1), a)  # other seeds, other masks
    assert not model[1].training  # dropout in eval mode: the harness draws the masks
    deterministic = torch.sum(torch.softmax(model(x).double(), 1) * torch.log_softmax(model(x).double(), 1), 1)
    assert not torch.allclose(a, deterministic)  # the passes really are stochastic
    assert torch.all(a <= 0)
    with pytest.raises(HarnessError, match="dropout"):
        mc_dropout(torch.nn.Linear(4, 3), x, 30, seeds)
    alpha = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.AlphaDropout(0.5), torch.nn.Linear(8, 3))
    with pytest.raises(HarnessError, match="per-image masks for Dropout, .* not AlphaDropout"):
        mc_dropout(alpha, x, 30, seeds)


def test_the_per_image_draws_are_uniform_and_the_same_in_any_batch():
    seeds = torch.tensor([3, 1 << 62, -5])
    draws = uniform(seeds, 7, (20_000,))
    assert draws.shape == (3, 20_000) and float(draws.min()) >= 0 and float(draws.max()) < 1
    assert np.allclose(draws.mean(1).numpy(), 0.5, atol=0.01) and np.allclose(draws.var(1).numpy(), 1 / 12, atol=0.003)
    assert torch.equal(uniform(seeds[1:2], 7, (20_000,)), draws[1:2])  # alone as in a batch
    assert not torch.equal(uniform(seeds, 8, (20_000,)), draws)  # another salt: other draws


def test_resolve_kappas():
    specs = resolve_kappas(["softmax", "odin", "mc_dropout", "softmax"], odin_preset="original", mc_passes=7)
    assert [s.name for s in specs] == ["softmax", "odin", "mc_dropout"]
    assert specs[1].params == {"preset": "original", "temperature": 1000.0, "epsilon": 0.0014}
    assert specs[2].params == {"passes": 7}
    with pytest.raises(HarnessError, match="unknown kappa 'msp'"):
        resolve_kappas(["msp"])
    with pytest.raises(HarnessError, match="--odin-preset .fast. is unknown"):
        resolve_kappas(["odin"], odin_preset="fast")


def test_one_forward_pass_serves_every_logit_kappa():
    calls = []

    class Counting(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 3)

        def forward(self, x):
            calls.append(len(x))
            return self.linear(x)

    forward = LocalForward(Counting().eval(), Execution.resolve("cpu"), 3)
    batch = {"keys": ["a", "b"], "images": torch.randn(2, 4), "labels": torch.tensor([0, 1])}
    scored = score_batch_adaptive(forward, batch, 3, resolve_kappas(["softmax", "entropy", "max_logit", "energy"]))
    assert calls == [2]
    assert set(scored.scores) == {"softmax", "entropy", "max_logit", "energy"}
