"""The kappa interface: a kappa's kind declares what it needs and which methods the harness calls, and a detector is
one file that registers itself (examples/detectors/flip_agreement.py, dropped into harness.kappas.detectors)."""

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from harness.cli import app
from harness.kappas import (FeaturesKappa, FittedKappa, LayersKappa, ModelKappa, OutputsKappa, StatefulModelKappa,
                            register_kappa, registry, resolve_kappas)
from harness.kappas import detectors
from harness.kappas.base import DECLARED
from harness.runtime.execution import Execution
from harness.runtime.inference import LocalForward, score_batch

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "detectors" / "flip_agreement.py"


@pytest.fixture
def dropped_in(tmp_path, monkeypatch):
    """The example detector as a module of harness.kappas.detectors, for this test only."""
    shutil.copy(EXAMPLE, tmp_path)
    monkeypatch.setattr(detectors, "__path__", [*detectors.__path__, str(tmp_path)])
    declared = len(DECLARED)
    registry.cache_clear()
    yield
    del DECLARED[declared:]
    registry.cache_clear()
    sys.modules.pop("harness.kappas.detectors.flip_agreement", None)


def test_a_detector_in_one_file_is_listed_with_its_needs(dropped_in):
    kdef = registry().get("flip_agreement")
    assert kdef.needs == {"model"} and kdef.needs_model and not (kdef.reads_features or kdef.needs_fit)
    assert (kdef.source, kdef.defaults) == ("built-in", {"temperature": 1.0})
    assert kdef.summary == "the probability that the predictions on an image and on its mirror image agree"
    listing = CliRunner().invoke(app, ["kappas", "--needs", "model"], prog_name="cood-harness")
    assert listing.exit_code == 0, listing.output
    rows = [line.split()[:4] for line in listing.output.splitlines()[:-1] if not line[:1].isspace()]
    assert rows[-1] == ["flip_agreement", "built-in", "needs", "model"]  # after the built-in modules' kappas
    assert listing.output.splitlines()[-1] == "11 kappas"


def test_it_scores_through_the_models_pass(dropped_in):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 3)).eval()
    images = torch.randn(4, 1, 3, 4)
    (spec,) = resolve_kappas(["flip_agreement:temperature=2"])
    assert spec.in_model and spec.params == {"temperature": 2.0}
    forward = LocalForward(model, Execution.resolve("cpu"), 3, seed=0)
    scored = score_batch(forward, images, list("abcd"), np.zeros(4, dtype=int), 3, [spec])
    with torch.no_grad():
        p, q = (torch.softmax(model(x).double() / 2, dim=1) for x in (images, images.flip(-1)))
    expected = (p * q).sum(dim=1).numpy()
    np.testing.assert_allclose(scored.scores["flip_agreement"], expected, rtol=1e-6)
    np.testing.assert_array_equal(scored.confs["flip_agreement"], scored.scores["flip_agreement"])
    alone = score_batch(forward, images[2:3], ["c"], np.zeros(1, dtype=int), 3, [spec]).scores["flip_agreement"]
    np.testing.assert_allclose(alone, expected[2:3], rtol=1e-6)
    assert np.ptp(expected) > 1e-3  # the samples differ: a score that ignored its input would fail


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
