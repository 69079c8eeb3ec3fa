"""The pytorch-ood bridge: every bridged detector gives pytorch-ood's own scores (negated), run the usual way."""

from pathlib import Path

import numpy as np
import pytest
import torch
from pytorch_ood import detector as pod
from torch.utils.data import DataLoader, TensorDataset

from harness.errors import HarnessError
from harness.kappas import BUILTIN_LOGIT_KAPPAS, Outputs, registry, resolve_kappas
from harness.kappas.ood_bridge import bridged_classes

DIM, CLASSES, N_FIT, N_TEST = 16, 5, 400, 120


@pytest.fixture(scope="module")
def data():
    """float32 like a forward pass: non-negative (post-ReLU) features, a linear head, labels = the head's predictions on
    the fit set."""
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
        kwargs["backbone"], kwargs["head"], inputs = (
            torch.nn.Identity(),
            torch.nn.Sequential(torch.nn.Flatten(), linear),
            z[:, :, None, None],
        )
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


@pytest.mark.parametrize(
    "cls,kappa",
    [(pod.MaxSoftmax, "softmax"), (pod.EnergyBased, "energy"), (pod.Entropy, "entropy"), (pod.MaxLogit, "max_logit")],
)
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


def test_every_pytorch_ood_detector_is_a_kappa_or_excluded_with_a_reason():
    from harness.kappas.ood_bridge import IN_DETECTORS, KAPPA_OF, NOT_BRIDGED, SAME_AS_PAPER_KAPPA

    classes = [name for name in pod.__all__ if isinstance(getattr(pod, name), type)]
    assert len(classes) == 35
    names = set(registry().defs)
    for name in classes:
        as_kappa = {**SAME_AS_PAPER_KAPPA, **KAPPA_OF}.get(name)
        assert (as_kappa in names) != (name in NOT_BRIDGED), name
        assert name not in NOT_BRIDGED or len(NOT_BRIDGED[name]) > 20
    assert len(names) >= 34 and set(NOT_BRIDGED) == {"WeightedEBO"}
    # those implemented in harness.kappas.detectors: one module each, named as its kappa
    detectors = Path(__file__).resolve().parents[1] / "harness" / "kappas" / "detectors"
    assert all((detectors / f"{KAPPA_OF[c]}.py").is_file() for c in IN_DETECTORS)


@pytest.mark.parametrize("name,cls", [("gradnorm", pod.GradNorm), ("graduncertainty", pod.GradUncertainty)])
def test_gradient_detectors_agree_with_pytorch_ood(name, cls):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(12, 8), torch.nn.ReLU(), torch.nn.Linear(8, CLASSES)
    ).eval()
    images = torch.randn(20, 3, 2, 2)
    (spec,) = resolve_kappas([name])
    assert spec.needs == {"model"} and spec.in_model
    ours, reported = spec.impl.score_model(model, images, seed=0)
    if spec.params["parameters"] == "last_layer":
        expected = -cls(
            model, param_filter=lambda n: n == "3.weight", **{k: v for k, v in spec.params.items() if k != "parameters"}
        )(images)
    else:
        expected = -cls(model)(images)
    assert np.ptp(expected.numpy()) > 0
    np.testing.assert_allclose(ours.numpy(), expected.double().numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(reported.numpy(), ours.numpy())


def test_a_gradient_detector_beside_the_feature_tap_across_batches():
    """The tap sees the detector's vmapped passes; the next batch's features are still the forward pass's own."""
    from harness.runtime.execution import Execution
    from harness.runtime.inference import LocalForward

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(12, 8), torch.nn.ReLU(), torch.nn.Linear(8, CLASSES)
    ).eval()
    execution = Execution(torch.device("cpu"), "none", False, False)
    forward = LocalForward(execution.prepare(model), execution, CLASSES)
    kappas = resolve_kappas(["gradnorm"])
    for batch in (torch.randn(6, 3, 2, 2), torch.randn(5, 3, 2, 2)):
        out = forward(batch, 0, kappas)
        expected_features = torch.relu(model[1](batch.flatten(1))).detach()
        np.testing.assert_allclose(out.features, expected_features.numpy(), rtol=1e-5, atol=1e-6)
        assert out.scores["gradnorm"].shape == (len(batch),) and np.all(out.scores["gradnorm"] > 0)


CNN = __import__("pathlib").Path(__file__).resolve().parents[1] / "examples" / "glyph_cnn.py"
GLYPH_LAYERS = "features.0,features.1,features.2"


@pytest.fixture(scope="module")
def glyph_model():
    """The example CNN, and glyph-like inputs: a fit set labelled by the model's predictions (every class present)."""
    from glyph_fixtures import load_example

    model = load_example(CNN).build_model().eval()
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(600, 1, 32, 32, generator=gen)
    with torch.no_grad():
        y = model(x).argmax(dim=1)
    y[:36] = torch.arange(36)  # the fit needs every class; the first ones are relabelled
    x_test = torch.cat(
        [torch.randn(40, 1, 32, 32, generator=gen), 3.0 * torch.rand(40, 1, 32, 32, generator=gen) - 1.0]
    )
    return model, x, y, x_test


def child_side(spec):
    """The kappa as the model's process has it: rebuilt from name and parameters, with the fitted state handed over."""
    import pickle

    from harness.kappas import rebuild_kappa

    state = pickle.loads(pickle.dumps(spec.impl.state()))  # what travels: arrays and numbers only
    rebuilt = rebuild_kappa(spec.name, spec.params, {})
    rebuilt.impl.load(state)
    return rebuilt


def fitted_like_the_harness(spec, model, x, y, batch=64):
    from harness.method.scores import SplitScores
    from harness.runtime.execution import Execution
    from harness.runtime.inference import LocalForward, fit_kappas, fit_on_layers

    forward = LocalForward(model, Execution(torch.device("cpu"), "none", False, False), 36)
    if "layers" in spec.needs:
        parts = [forward.extract(x[i : i + batch], [spec])[spec.name] for i in range(0, len(x), batch)]
        fit_on_layers([spec], {spec.name: parts}, y.numpy(), seed=0)
    else:
        outs = [forward(x[i : i + batch], i, []) for i in range(0, len(x), batch)]
        logits, features = np.concatenate([o.logits for o in outs]), np.concatenate([o.features for o in outs])
        data = SplitScores(np.arange(len(x)).astype(str), y.numpy(), logits.argmax(1), {}, {}, logits, features)
        fit_kappas([spec], data, forward.head, seed=0)
    return child_side(spec)


def usual_way_on_the_model(name, model, x, y, x_test, batch=64):
    """pytorch-ood as its documentation uses it on the example CNN: model pieces, fit(loader), then detector(inputs)."""
    f = model.features
    if name == "mahalanobis_odin":
        detector = pod.MahalanobisODIN(f, eps=0.002)
    elif name == "multi_mahalanobis":
        detector = pod.MultiMahalanobis([f[0], f[1], f[2]])
    elif name == "gram":
        detector = pod.Gram(torch.nn.Sequential(f[3], f[4], model.head), [f[0], f[1], f[2]], num_classes=36)
    else:
        detector = pod.NACUE(model, layers=[f[1], f[2]])
    torch.manual_seed(0)  # Gram holds out a random tenth of each class: the same draw as the harness's seeded fit
    detector.fit(DataLoader(TensorDataset(x, y), batch_size=batch, generator=torch.Generator()))
    return -detector.predict(x_test).double().numpy()


@pytest.mark.parametrize(
    "name,request_",
    [
        ("mahalanobis_odin", "mahalanobis_odin"),
        ("multi_mahalanobis", f"multi_mahalanobis:layers={GLYPH_LAYERS}"),
        ("gram", f"gram:layers={GLYPH_LAYERS}"),
        ("nacue", "nacue:layers=features.1,features.2"),
    ],
)
def test_model_reading_detectors_agree_with_pytorch_ood(name, request_, glyph_model):
    model, x, y, x_test = glyph_model
    (spec,) = resolve_kappas([request_])
    assert spec.source == "pytorch-ood" and spec.in_model and "fit" in spec.needs
    child = fitted_like_the_harness(spec, model, x, y)
    ours, reported = child.impl.score_model(model, x_test, seed=0)
    expected = usual_way_on_the_model(name, model, x, y, x_test)
    ours = ours.numpy()
    assert ours.shape == (len(x_test),) and ours.dtype == np.float64 and np.all(np.isfinite(ours))
    assert np.ptp(expected) > 0
    np.testing.assert_allclose(ours, expected, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(expected).max()))
    np.testing.assert_array_equal(reported.numpy(), ours)


def test_layers_default_to_a_timm_models_feature_info():
    import timm

    from harness.kappas.layers import named_layers

    model = timm.create_model("resnet10t", pretrained=False, num_classes=CLASSES).eval()
    assert [name for name, _ in named_layers(model, "auto", "gram")] == ["act1", "layer1", "layer2", "layer3", "layer4"]
    (spec,) = resolve_kappas(["multi_mahalanobis"])
    images = torch.randn(4, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    means = spec.impl.extract(model, images)
    assert [means[f"z{i}"].shape for i in range(5)] == [(4, info["num_chs"]) for info in model.feature_info]


def test_rankfeat_agrees_with_pytorch_ood_on_a_timm_cnn():
    """RankFeat through forward_features/forward_head against pytorch-ood on the backbone and head as modules."""
    import timm

    torch.manual_seed(0)
    model = timm.create_model("resnet10t", pretrained=False, num_classes=CLASSES).eval()
    torch.nn.init.normal_(model.fc.weight, std=1.0)  # logits far from zero, as a trained head's
    images = torch.randn(8, 3, 96, 96, generator=torch.Generator().manual_seed(0))
    (spec,) = resolve_kappas(["rankfeat"])
    assert spec.needs == {"model"} and spec.in_model and spec.params == {}
    ours, reported = spec.impl.score_model(model, images, seed=0)
    backbone = torch.nn.Sequential(
        model.conv1, model.bn1, model.act1, model.maxpool, model.layer1, model.layer2, model.layer3, model.layer4
    )
    expected = -pod.RankFeat(backbone, torch.nn.Sequential(model.global_pool, model.fc))(images).double().numpy()
    with torch.no_grad():
        energy = torch.logsumexp(model(images).double(), dim=1).numpy()
    assert np.ptp(expected) > 0 and not np.allclose(
        expected, energy, rtol=1e-3
    )  # the rank-1 removal changes the scores
    np.testing.assert_allclose(ours.numpy(), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(reported.numpy(), ours.numpy())


def test_rankfeat_refuses_models_without_a_spatial_split():
    import timm

    (spec,) = resolve_kappas(["rankfeat"])
    glyph = __import__("glyph_fixtures").load_example(CNN).build_model().eval()
    with pytest.raises(
        HarnessError,
        match=r"^kappa 'rankfeat' needs the model split into a backbone and a head: a timm: CNN "
        r"target, or a model with forward_features\(images\)",
    ):
        spec.impl.score_model(glyph, torch.randn(2, 1, 32, 32), seed=0)
    vit = timm.create_model("test_vit", pretrained=False, num_classes=CLASSES).eval()
    size = vit.default_cfg["input_size"][1:]
    with pytest.raises(
        HarnessError,
        match=r"^kappa 'rankfeat' needs spatial feature maps B x C x H x W from forward_features, "
        r"this model's are \(2, \d+, \d+\)",
    ):
        spec.impl.score_model(vit, torch.randn(2, 3, *size), seed=0)


@pytest.fixture(scope="module")
def tiny_clip(tmp_path_factory):
    """A tiny open_clip model with random weights, as an open_clip: target with three class names (nothing
    downloaded)."""
    from clip_fixtures import tiny_open_clip

    return tiny_open_clip(tmp_path_factory.mktemp("clip"), ["cat", "dog", "cup"])


@pytest.mark.parametrize("request_,temperature", [("mcm", 1.0), ("mcm:temperature=0.01", 0.01)])
def test_mcm_agrees_with_pytorch_ood_on_an_open_clip_target(tiny_clip, request_, temperature):
    import open_clip

    from harness.adapters import CLIP_TEMPLATES

    clip, sub = tiny_clip
    images = torch.randn(10, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    (spec,) = resolve_kappas([request_])
    assert spec.needs == {"model"} and spec.params == {"temperature": temperature}
    ours, reported = spec.impl.score_model(sub.model, images, seed=0)
    tokenizer = open_clip.get_tokenizer("cood-tiny-clip")
    with torch.no_grad():  # the class names' text embeddings, computed here from the CLIP model itself
        text = torch.stack(
            [
                torch.nn.functional.normalize(
                    torch.nn.functional.normalize(
                        clip.encode_text(tokenizer([t.format(name) for t in CLIP_TEMPLATES])), dim=-1
                    ).mean(0),
                    dim=0,
                )
                for name in ("cat", "dog", "cup")
            ]
        )
    expected = -pod.MCM(clip.encode_image, text, temperature=temperature)(images).double().numpy()
    assert np.ptp(expected) > 0 and np.all((expected > 1 / 3) & (expected <= 1))
    np.testing.assert_allclose(ours.numpy(), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(reported.numpy(), ours.numpy())


def test_mcm_refuses_a_classifier_without_clip_embeddings():
    (spec,) = resolve_kappas(["mcm"])
    glyph = __import__("glyph_fixtures").load_example(CNN).build_model().eval()
    with pytest.raises(
        HarnessError,
        match=r"^kappa 'mcm' needs CLIP image and class-name text embeddings: an open_clip: "
        r"target, or a model with encode_image\(images\) and text_embeddings",
    ):
        spec.impl.score_model(glyph, torch.randn(2, 1, 32, 32), seed=0)
