"""The pytorch-ood bridge: every bridged detector gives pytorch-ood's own scores (negated), run the usual way."""

import numpy as np
import pytest
import torch
from pytorch_ood import detector as pod
from torch.utils.data import DataLoader, TensorDataset

from harness.kappas import BUILTIN_LOGIT_KAPPAS, Outputs, registry, resolve_kappas
from harness.kappas.ood_bridge import bridged_classes

DIM, CLASSES, N_FIT, N_TEST = 16, 5, 400, 120


@pytest.fixture(scope="module")
def data():
    """float32 like a forward pass: non-negative (post-ReLU) features, a linear head, labels = the head's predictions on the fit set."""
    gen = torch.Generator().manual_seed(0)
    linear = torch.nn.Linear(DIM, CLASSES).requires_grad_(False)
    linear.weight.copy_(torch.randn(CLASSES, DIM, generator=gen))
    linear.bias.copy_(torch.randn(CLASSES, generator=gen))
    z = torch.relu(torch.randn(N_FIT + N_TEST, DIM, generator=gen) + 0.5)
    z[N_FIT:][::4] *= 3.0  # some far-away samples among the test ones
    logits = linear(z)
    return linear, z, logits, logits.argmax(dim=1)


def usual_way(cls, params, linear, z, logits, y):
    """pytorch-ood as its documentation uses it: model pieces, fit(loader), then detector(inputs)."""
    takes = set(cls.__init__.__code__.co_varnames)
    kwargs = dict(params)
    if "model" in takes:
        kwargs["model"], inputs = torch.nn.Identity(), logits
    elif "backbone" in takes:
        kwargs["backbone"], kwargs["head"], inputs = torch.nn.Identity(), torch.nn.Sequential(torch.nn.Flatten(), linear), z[:, :, None, None]
    else:
        kwargs["encoder"], inputs = torch.nn.Identity(), z
        if "head" in takes:
            kwargs["head"] = linear
        if "w" in takes:
            kwargs["w"], kwargs["b"] = linear.weight, linear.bias
    detector = cls(**kwargs)
    if cls.requires_fit:
        detector.fit(DataLoader(TensorDataset(inputs[:N_FIT], y[:N_FIT]), batch_size=64))
    with torch.no_grad():
        return detector(inputs[N_FIT:]).double().numpy()


@pytest.mark.parametrize("name", sorted(bridged_classes()))
def test_bridged_detector_agrees_with_pytorch_ood(name, data):
    linear, z, logits, y = data
    (spec,) = resolve_kappas([name])
    assert spec.source == "pytorch-ood"
    head = (linear.weight.numpy(), linear.bias.numpy())
    if "fit" in spec.needs:
        spec.impl.fit(Outputs(logits[:N_FIT].numpy(), z[:N_FIT].numpy(), head, y[:N_FIT].numpy()))
    ours, reported = spec.impl.score(Outputs(logits[N_FIT:].numpy(), z[N_FIT:].numpy(), head))
    params = {k: v for k, v in spec.params.items()}
    if name == "vim":
        params["d"] = DIM // 2  # the bridge's default: half the feature dimension
    expected = -usual_way(bridged_classes()[name], params, linear, z, logits, y)
    assert ours.shape == (N_TEST,) and ours.dtype == np.float64 and np.all(np.isfinite(ours))
    assert np.ptp(expected) > 0  # the detector separates something
    np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(expected).max()))
    np.testing.assert_array_equal(reported, ours)


@pytest.mark.parametrize("cls,kappa", [(pod.MaxSoftmax, "softmax"), (pod.EnergyBased, "energy"),
                                       (pod.Entropy, "entropy"), (pod.MaxLogit, "max_logit")])
def test_paper_kappas_are_pytorch_ood_detectors_negated(cls, kappa, data):
    logits = data[2][N_FIT:]
    expected = -cls(None).predict_logits(logits).double().numpy()
    _, reported = BUILTIN_LOGIT_KAPPAS[kappa](logits.numpy())
    np.testing.assert_allclose(reported, expected, rtol=1e-5, atol=1e-5)  # pytorch-ood computes in float32
    assert registry().get(kappa).source == "paper"  # registered once, as the paper's kappa


def test_needs_follow_pytorch_ood_base_classes():
    reg = registry()
    assert reg.get("knn").needs == {"features", "fit"}
    assert reg.get("vim").needs == {"features", "head", "fit"}
    assert reg.get("react").needs == {"features", "head", "fit"}
    assert reg.get("ash").needs == {"features", "head"}
    assert reg.get("gen").needs == {"logits"}
    assert reg.get("knn").defaults == {"k": 50, "normalize": True}
    assert len(reg.defs) >= 25
