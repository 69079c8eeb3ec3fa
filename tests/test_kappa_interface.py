"""The kappa interface: a kappa's kind declares what it needs and which methods the harness calls, and a detector is
one file that registers itself, dropped into harness.kappas.detectors: docs/examples/flip_agreement.py (its own
passes through the model) and a reader of intermediate layers (fitted on what the model's process extracts)."""

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from harness.cli import app
from harness.kappas import (
    FeaturesKappa,
    FittedKappa,
    LayersKappa,
    ModelKappa,
    OutputsKappa,
    StatefulModelKappa,
    detectors,
    rebuild_kappa,
    register_kappa,
    registry,
    resolve_kappas,
)
from harness.kappas.base import DECLARED
from harness.runtime.execution import Execution
from harness.runtime.inference import LocalForward, fit_on_layers, score_batch_adaptive

EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "flip_agreement.py"


def batch_of(images: torch.Tensor, keys: str) -> dict:
    """A batch of ``images`` keyed by the letters of ``keys``, every label 0."""
    return {"keys": list(keys), "images": images, "labels": torch.zeros(len(keys), dtype=torch.int64)}


LAYER_DETECTOR = '''
import numpy as np
import torch

from harness.kappas import LayersKappa, register_kappa
from harness.kappas.layers import layer_outputs, named_layers


@register_kappa("norm_gap", defaults={"layers": "auto"})
class NormGap(LayersKappa):
    """minus how far the named layers' activation norms are from their means on the fit split"""

    def _norms(self, model, images):
        layers = [m for _, m in named_layers(model, self.params["layers"], "norm_gap")]
        return torch.stack([z.flatten(1).norm(dim=1) for z in layer_outputs(model, layers, images)[1]], dim=1).double()

    def extract(self, model, images):
        return {"norms": self._norms(model, images).cpu().numpy()}

    def fit_extracted(self, parts, labels):
        self.mean = np.concatenate([part["norms"] for part in parts]).mean(axis=0)

    def state(self):
        return {"mean": self.mean}

    def load(self, state):
        self.mean = state["mean"]

    def score_model(self, model, images, seed):
        gap = (self._norms(model, images) - torch.from_numpy(self.mean).to(images.device)).abs().sum(dim=1)
        return -gap, -gap
'''


@pytest.fixture
def dropped_in(tmp_path, monkeypatch):
    """A folder of harness.kappas.detectors holding the example detector (and what a test writes), for this test
    only."""
    shutil.copy(EXAMPLE, tmp_path)
    monkeypatch.setattr(detectors, "__path__", [*detectors.__path__, str(tmp_path)])
    declared = len(DECLARED)
    registry.cache_clear()
    yield tmp_path
    del DECLARED[declared:]
    registry.cache_clear()
    for path in tmp_path.glob("*.py"):
        sys.modules.pop(f"harness.kappas.detectors.{path.stem}", None)


def test_a_detector_in_one_file_is_listed_with_its_needs(dropped_in):
    kdef = registry().get("flip_agreement")
    assert kdef.needs == {"model"} and kdef.needs_model and not (kdef.reads_features or kdef.needs_fit)
    assert (kdef.source, kdef.defaults) == ("built-in", {"temperature": 1.0})
    assert kdef.summary == "the probability that the predictions on an image and on its mirror image agree"
    listing = CliRunner().invoke(app, ["kappas", "--needs", "model"], prog_name="cood-harness")
    assert listing.exit_code == 0, listing.output
    rows = [line.split()[:4] for line in listing.output.splitlines()[:-1] if not line[:1].isspace()]
    assert rows[-1] == ["flip_agreement", "built-in", "needs", "model"]  # declared last: dropped in after the others
    assert listing.output.splitlines()[-1] == "11 kappas"


def test_it_scores_through_the_models_pass(dropped_in):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 3)).eval()
    images = torch.randn(4, 1, 3, 4)
    (spec,) = resolve_kappas(["flip_agreement:temperature=2"])
    assert spec.in_model and spec.params == {"temperature": 2.0}
    forward = LocalForward(model, Execution.resolve("cpu"), 3)
    scored = score_batch_adaptive(forward, batch_of(images, "abcd"), 3, [spec])
    with torch.no_grad():
        p, q = (torch.softmax(model(x).double() / 2, dim=1) for x in (images, images.flip(-1)))
    expected = (p * q).sum(dim=1).numpy()
    np.testing.assert_allclose(scored.scores["flip_agreement"], expected, rtol=1e-6)
    np.testing.assert_array_equal(scored.confs["flip_agreement"], scored.scores["flip_agreement"])
    alone = score_batch_adaptive(forward, batch_of(images[2:3], "c"), 3, [spec]).scores["flip_agreement"]
    np.testing.assert_allclose(alone, expected[2:3], rtol=1e-6)
    assert np.ptp(expected) > 1e-3  # the samples differ: a score that ignored its input would fail


def test_a_layer_reader_in_one_file_is_fitted_on_extracted_layers_and_scored_through_the_model(dropped_in):
    (dropped_in / "norm_gap.py").write_text(LAYER_DETECTOR)
    (spec,) = resolve_kappas(["norm_gap:layers=1,3"])
    assert spec.needs == {"model", "fit", "layers"} and spec.reads_layers and spec.in_model
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(12, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)
    ).eval()
    forward = LocalForward(model, Execution.resolve("cpu"), 3)
    fit_images, images = torch.randn(10, 1, 3, 4), torch.randn(4, 1, 3, 4)
    parts = [forward.extract(fit_images[i : i + 4], [spec])[spec.name] for i in range(0, 10, 4)]
    fit_on_layers([spec], {spec.name: parts}, np.zeros(10, dtype=int), seed=0)
    beside_the_model = rebuild_kappa(spec.name, spec.params, {})  # as the model's process rebuilds it
    beside_the_model.impl.load(spec.impl.state())
    scored = score_batch_adaptive(forward, batch_of(images, "abcd"), 3, [beside_the_model])
    with torch.no_grad():
        norms = lambda x: torch.stack([model[:2](x).norm(dim=1), model(x).norm(dim=1)], dim=1).double()  # noqa: E731
        expected = -(norms(images) - norms(fit_images).mean(dim=0)).abs().sum(dim=1).numpy()
    np.testing.assert_allclose(scored.scores["norm_gap"], expected, rtol=1e-6)
    assert np.ptp(expected) > 1e-3


def test_needs_follow_from_the_kinds():
    class Knn(FittedKappa, FeaturesKappa):
        def fit(self, outputs):
            pass

        def score(self, outputs):
            return outputs.logits[:, 0], outputs.logits[:, 0]

    assert Knn.needs() == {"fit", "features"}
    assert LayersKappa.needs() == {"model", "fit", "layers"}

    class Half(ModelKappa):  # no score_model
        pass

    with pytest.raises(TypeError, match="implements its kind's methods"):
        register_kappa("half")(Half)
    with pytest.raises(TypeError, match="Kappa subclass"):
        register_kappa("plain")(object)


@pytest.mark.parametrize("name", sorted(registry().defs))
def test_every_registered_kappa_is_of_the_kind_its_needs_say(name):
    (spec,) = resolve_kappas([name])
    assert spec.needs == type(spec.impl).needs()
    assert isinstance(spec.impl, ModelKappa) == spec.needs_model != isinstance(spec.impl, OutputsKappa)
    assert isinstance(spec.impl, LayersKappa) == spec.reads_layers
    assert isinstance(spec.impl, (FittedKappa, StatefulModelKappa)) == spec.needs_fit
