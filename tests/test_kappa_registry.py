"""The kappa registry: unique names, suggestions for unknown names, plugins through entry points, the listing."""

import re
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.errors import HarnessError
from harness.kappas import KappaDef, Outputs, Registry, registry, resolve_kappas

PLUGIN = """
import numpy as np
from harness.kappas import KappaDef


class Margin:
    def __init__(self, params):
        self.params = params

    def score(self, outputs):
        top2 = np.sort(outputs.logits, axis=1)[:, -2:]
        margin = top2[:, 1] - top2[:, 0]
        return margin, margin


def kappas():
    return [KappaDef("top2_margin", "difference of the two largest logits", "paper", frozenset({"logits"}), {}, Margin)]
"""


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """A package with a ``cood_bench.kappas`` entry point, importable for this test only."""
    (tmp_path / "margin_plugin.py").write_text(PLUGIN)
    info = tmp_path / "margin_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: margin-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[cood_bench.kappas]\nmargin = margin_plugin:kappas\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.cache_clear()
    yield
    registry.cache_clear()
    sys.modules.pop("margin_plugin", None)


def test_unknown_name_suggests_the_closest_and_lists_the_known():
    known = re.escape(", ".join(registry().defs))  # every registered kappa, in the registry's order
    with pytest.raises(HarnessError, match=rf"^unknown kappa 'softmx'; did you mean 'softmax'\? known: {known} "):
        resolve_kappas(["softmx"])
    with pytest.raises(HarnessError, match=r"unknown kappa 'zzzz'; known: "):
        resolve_kappas(["zzzz"])


def test_names_are_unique_and_declarations_checked():
    reg = Registry([KappaDef("a", "", "plugin", frozenset({"logits"}), {}, dict)])
    with pytest.raises(HarnessError, match=r"kappa 'a' is registered twice \(by plugin and by paper\)"):
        reg.add(KappaDef("a", "", "paper", frozenset({"logits"}), {}, dict))
    with pytest.raises(ValueError, match="unknown needs"):
        KappaDef("b", "", "plugin", frozenset({"pixels"}), {}, dict)


def test_a_plugin_registers_like_a_built_in(plugin):
    kdef = registry().get("top2_margin")
    assert kdef.source == "plugin"  # whatever the plugin claims
    (spec,) = resolve_kappas(["top2_margin"])
    scores, confs = spec.impl.score(Outputs(np.array([[3.0, 1.0, 0.5], [0.0, 2.0, 1.5]])))
    np.testing.assert_allclose(scores, [2.0, 0.5])
    listing = CliRunner().invoke(app, ["kappas"], prog_name="cood-harness")
    assert listing.exit_code == 0
    assert any(line.split()[:4] == ["top2_margin", "plugin", "needs", "logits"] for line in rows_of(listing.output))


def rows_of(listing: str) -> list[str]:
    """The listing's first line of each kappa (the wrapped summary and the parameters and reference are indented)."""
    return [line for line in listing.splitlines()[:-1] if not line[:1].isspace()]


def test_the_listing_names_needs_and_sources():
    done = CliRunner().invoke(app, ["kappas"], prog_name="cood-harness")
    assert done.exit_code == 0, done.output
    rows = {line.split()[0]: line.split()[1:4] for line in rows_of(done.output)}
    assert rows["softmax"] == ["paper", "needs", "logits"]
    assert rows["odin"] == ["paper", "needs", "model"]
    assert rows["rankfeat"] == rows["mcm"] == ["pytorch-ood", "needs", "model"]
    assert done.output.splitlines()[-1] == f"{len(registry().defs)} kappas"
    fit = CliRunner().invoke(app, ["kappas", "--needs", "model"], prog_name="cood-harness")
    assert [line.split()[0] for line in rows_of(fit.output)] == [
        "odin",
        "mc_dropout",
        "gradnorm",
        "graduncertainty",
        "gram",  # the modules of harness.kappas.detectors, in name order
        "mahalanobis_odin",
        "mcm",
        "multi_mahalanobis",
        "nacue",
        "rankfeat",
    ]
    assert fit.output.splitlines()[-1] == "10 kappas"
    layers = CliRunner().invoke(app, ["kappas", "--needs", "layers"], prog_name="cood-harness")
    assert [line.split()[0] for line in rows_of(layers.output)] == ["gram", "multi_mahalanobis", "nacue"]


def test_parameters_on_the_command_line_are_typed_and_checked():
    knn, vim, ash = resolve_kappas(["knn:k=200,normalize=false", "vim:d=8", "ash:variant=ash-b"])
    assert knn.params == {"k": 200, "normalize": False} and knn.impl.params == knn.params
    assert vim.params == {"d": 8} and ash.params["variant"] == "ash-b" and ash.params["percentile"] == 0.65
    with pytest.raises(
        HarnessError,
        match=r"^kappa 'knn' has no parameter kk; did you mean 'k'\? its parameters: k=50, normalize=True$",
    ):
        resolve_kappas(["knn:kk=3"])
    with pytest.raises(HarnessError, match=r"^kappa 'knn' has no parameter zz; its parameters: k=50, normalize=True$"):
        resolve_kappas(["knn(zz=3)"])
    with pytest.raises(HarnessError, match=r"parameter k takes a int, got 'many'"):
        resolve_kappas(["knn:k=many"])
    with pytest.raises(HarnessError, match=r"NAME:KEY=VALUE"):
        resolve_kappas(["knn:k"])
    with pytest.raises(HarnessError, match=r"requested twice with different parameters"):
        resolve_kappas(["knn:k=5", "knn:k=6"])
    assert resolve_kappas(["energy:temperature=2"])[0].params == {"temperature": 2.0}
    # the leaderboard's spelling, short names where the kappa has no parameter of that name, and None for None
    (odin,) = resolve_kappas(["odin(epsilon=0.0014,preset=original,T=1000)"])
    assert odin.params == {"preset": "original", "temperature": 1000.0, "epsilon": 0.0014}
    assert resolve_kappas(["pnml:eps=0.5"])[0].params == {"eps": 0.5}
    assert resolve_kappas(["gen(M=None,gamma=0.2)"])[0].params == {"gamma": 0.2, "M": None}
    # an item without '=' continues the previous value: lists of layers (and per-layer values)
    (gram,) = resolve_kappas(["gram:layers=layer3,layer4,num_poles_list=1,2"])
    assert gram.params == {"layers": "layer3,layer4", "num_poles_list": "1,2"}


def test_a_parameter_changes_the_values():
    logits = np.array([[2.0, 0.0, -1.0], [0.5, 0.4, 0.3]])
    (t1,), (t4,) = resolve_kappas(["energy"]), resolve_kappas(["energy:temperature=4"])
    np.testing.assert_allclose(t4.impl.score(Outputs(logits))[0], 4 * np.log(np.exp(logits / 4).sum(axis=1)))
    assert not np.allclose(t1.impl.score(Outputs(logits))[0], t4.impl.score(Outputs(logits))[0])
