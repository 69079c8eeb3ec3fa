"""The companion paper's calibration metrics in records: which kappas report a probability (the kappa registry and a
submission file declare it), and ECE, ECE (equal mass), NLL and Brier of the reported confidence, checked against
independent implementations: torchmetrics' BinaryCalibrationError (l1 norm, 15 equal-width bins) for ECE, a plain
loop over sorted chunks for equal-mass ECE, scikit-learn's log_loss and brier_score_loss for NLL and Brier."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.special import softmax as scipy_softmax
from sklearn.metrics import brier_score_loss, log_loss
from torchmetrics.classification import BinaryCalibrationError

from glyph_fixtures import CNN
from harness.errors import HarnessError
from harness.method.evaluation import evaluate_kappa
from harness.method.metrics import id_metrics
from harness.method.registry import registered
from harness.method.scores import SplitScores

CALIBRATION = ("ece", "ece_mass", "nll", "brier")


def torchmetrics_ece(confidence, correct) -> float:
    metric = BinaryCalibrationError(n_bins=15, norm="l1")
    return float(metric(torch.as_tensor(confidence, dtype=torch.float64), torch.as_tensor(correct, dtype=torch.long)))


def equal_mass_ece(confidence, correct, bins: int = 15) -> float:
    """Sorted by confidence, cut into ``bins`` chunks of equal size (without ties, what equal-mass binning is)."""
    order = np.argsort(confidence)
    chunks = zip(np.array_split(confidence[order], bins), np.array_split(correct[order], bins))
    return sum(len(p) * abs(c.mean() - p.mean()) for p, c in chunks) / len(confidence)


def independent(confidence, correct) -> dict[str, float]:
    return {
        "ece": torchmetrics_ece(confidence, correct),
        "ece_mass": equal_mass_ece(confidence, correct),
        "nll": log_loss(correct, confidence, labels=[False, True]),
        "brier": brier_score_loss(correct, confidence),
    }


@pytest.mark.parametrize("seed", range(4))
def test_the_id_metrics_equal_independent_implementations_on_random_data(seed):
    rng = np.random.default_rng(seed)
    confidence = rng.beta(5, 2, 1500)  # n a multiple of 15: the equal-mass bins hold 100 each
    correct = rng.uniform(size=1500) < confidence**1.3  # over-confident, as classifiers are
    measured = id_metrics(np.log(confidence), correct, confidence, probability=True)
    expected = independent(confidence, correct)
    for name in CALIBRATION:
        assert measured[name] == pytest.approx(expected[name], rel=1e-6, abs=1e-9), name


def test_the_calibration_metrics_are_null_where_the_kappa_reports_no_probability():
    rng = np.random.default_rng(0)
    scores = rng.normal(size=300)  # e.g. a max logit: not a probability
    correct = rng.uniform(size=300) < 0.7
    measured = id_metrics(scores, correct, scores)
    assert {name: measured[name] for name in CALIBRATION} == dict.fromkeys(CALIBRATION)
    assert measured["aurc"] is not None  # the ranking metrics need no probability
    declared = {m.name: m for m in registered("id")}
    for name in CALIBRATION:
        metric = declared[name]
        assert (metric.null, metric.column, metric.since, metric.higher_is_better) == (
            "always",
            f"id_{name}",
            None,
            False,
        )
    assert "15 equal-width bins" in declared["ece"].definition and "default" in declared["ece"].definition
    assert "15 equal-mass bins" in declared["ece_mass"].definition
    assert (declared["nll"].unit, declared["brier"].unit) == (False, True)


def test_a_kappa_declaring_probabilities_outside_0_1_is_refused():
    split = SplitScores(
        keys=np.arange(3),
        scores={"k": np.array([0.5, 0.9, 1.2])},
        confs={"k": np.array([0.5, 0.9, 1.2])},
        labels=np.array([0, 1, 2]),
        preds=np.array([0, 1, 1]),
    )
    ood = SplitScores(
        keys=np.arange(8),
        scores={"k": np.linspace(0, 1, 8)},
        confs={"k": np.linspace(0, 1, 8)},
        labels=np.arange(8) % 4,
        preds=np.zeros(8, dtype=int),
    )
    with pytest.raises(
        HarnessError, match=r"^kappa 'k' declares its values probabilities, but 1 ID values lie outside"
    ):
        evaluate_kappa("k", split, ood, ood, 3, 4, 2, probability=True)
    assert evaluate_kappa("k", split, ood, ood, 3, 4, 2).id["ece"] is None


def test_the_kappa_registry_says_which_kappas_report_a_probability():
    from harness.kappas import Outputs, registry, resolve_kappas

    defs = registry().defs
    probabilities = {name for name, kdef in defs.items() if kdef.probability}
    assert probabilities == {"softmax", "odin", "temperature_scaling"}
    for name in ("entropy", "energy", "max_logit", "mc_dropout", "mahalanobis", "openmax", "mcm"):
        assert not defs[name].probability, name
    specs = {s.name: s for s in resolve_kappas(["softmax", "max_logit", "odin"])}
    assert (specs["softmax"].probability, specs["max_logit"].probability, specs["odin"].probability) == (
        True,
        False,
        True,
    )
    logits = np.array([[2.0, 0.5, -1.0], [0.1, 0.0, 0.2]])
    _, conf = specs["softmax"].impl.score(Outputs(logits))
    assert np.all((conf > 0) & (conf <= 1)) and conf[0] == pytest.approx(np.exp(2) / np.exp(logits[0]).sum())


def test_a_submission_file_declares_its_kappas_probability(tmp_path):
    from harness.kappas import resolve_kappas
    from harness.submission import load_file

    source = (
        "import numpy as np, torch\n"
        "from harness import user_kappa\n"
        "DATA_CONFIG = {'input_size': (1, 8, 8), 'mean': (0.5,), 'std': (0.5,)}\n"
        "def build_model():\n"
        "    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 3))\n"
        "@user_kappa(probability=True)\n"
        "def top_share(logits):\n"
        "    e = np.exp(logits - logits.max(axis=1, keepdims=True))\n"
        "    return e.max(axis=1) / e.sum(axis=1)\n"
        "def margin(logits):\n"
        "    s = np.sort(logits, axis=1)\n"
        "    return s[:, -1] - s[:, -2]\n"
        "KAPPAS = {'top_share': top_share, 'margin': margin}\n"
    )
    path = tmp_path / "sub.py"
    path.write_text(source)
    submission = load_file(path)
    assert {n: k.probability for n, k in submission.user_kappas.items()} == {"top_share": True, "margin": False}
    specs = {s.name: s for s in resolve_kappas(["top_share", "margin"], submission.user_kappas)}
    assert (specs["top_share"].probability, specs["margin"].probability) == (True, False)

    path.write_text(source.replace("@user_kappa(probability=True)", "@user_kappa(probability='yes')"))
    with pytest.raises(HarnessError, match=r"KAPPAS\['top_share'\] declares features or probability not as True/False"):
        load_file(path)


@pytest.mark.slow
def test_a_glyph_runs_records_equal_the_independent_implementations_on_its_id_test_scores(tiny_glyphs, tmp_path):
    from harness import submit

    out = tmp_path / "out"
    result = submit(
        "examples/glyph_cnn.py",
        benchmark=tiny_glyphs,
        kappas=["softmax", "energy"],
        progress=False,
        trust_submission=True,
        out=out,
    )
    id_test = result.scores["id_test"]
    correct = id_test.preds == id_test.labels
    assert 0 < correct.sum() < len(correct)
    records = {r["kappa"]["name"]: r for r in (json.loads(p.read_text()) for p in (out / "records").glob("*.json"))}
    softmax, energy = records["softmax"], records["energy"]
    assert (softmax["kappa"]["probability"], energy["kappa"]["probability"]) == (True, False)
    confidence = id_test.confs["softmax"]
    assert np.all((confidence > 0) & (confidence <= 1))
    expected = independent(confidence, correct)
    for name in ("ece", "nll", "brier"):
        assert softmax["id"][name] == pytest.approx(expected[name], rel=1e-6, abs=1e-9), name
    assert softmax["id"]["ece_mass"] == pytest.approx(
        id_metrics(id_test.scores["softmax"], correct, confidence, True)["ece_mass"]
    )
    assert {name: energy["id"][name] for name in CALIBRATION} == dict.fromkeys(CALIBRATION)  # null, written
    per_level = pd.read_csv(out / "per_level.csv")
    rows = per_level[per_level["confidence function"] == "softmax"]
    assert rows["id-ece"].tolist() == pytest.approx([softmax["id"]["ece"]] * len(rows))
    assert rows["id-brier (correctness)"].tolist() == pytest.approx([softmax["id"]["brier"]] * len(rows))
    assert per_level.loc[per_level["confidence function"] == "energy", "id-nll (correctness)"].isna().all()
    # the classifier's multi-class scores, from the ID test logits the run kept: the same for every kappa
    probabilities = scipy_softmax(id_test.logits.astype(np.float64), axis=1)
    onehot = np.eye(probabilities.shape[1])[id_test.labels]
    for record in (softmax, energy):
        assert record["id"]["nll_multiclass"] == pytest.approx(
            log_loss(id_test.labels, probabilities, labels=range(probabilities.shape[1])), rel=1e-9
        )
        assert record["id"]["brier_multiclass"] == pytest.approx(
            ((probabilities - onehot) ** 2).sum(1).mean(), rel=1e-9
        )
    assert softmax["id"]["nll_multiclass"] != pytest.approx(softmax["id"]["nll"], rel=1e-3)  # another score
    assert rows["id-nll (multi-class)"].tolist() == pytest.approx([softmax["id"]["nll_multiclass"]] * len(rows))
    summary = " ".join(result.table.split("\n\n")[-1].split())  # the terminal's lines per kappa
    softmax_line = summary[summary.index("softmax:") : summary.index("energy:")]
    assert f"ece {softmax['id']['ece']:.4f}" in softmax_line
    assert f"brier (correctness) {softmax['id']['brier']:.4f}" in softmax_line


@pytest.mark.slow
def test_a_sandboxed_submission_files_probability_kappa_reaches_its_record(tiny_glyphs, tmp_path):
    from harness import submit

    folder = tmp_path / "sub"
    (folder / "weights").mkdir(parents=True)
    shutil.copy(CNN, folder / "glyph_cnn.py")
    shutil.copy(CNN.with_name("weights") / "glyph_cnn.safetensors", folder / "weights")
    with open(folder / "glyph_cnn.py", "a") as file:
        file.write(
            "\n\nimport numpy as np\nfrom harness import user_kappa\n\n\n"
            "@user_kappa(probability=True)\n"
            "def top_share(logits):\n"
            "    e = np.exp(logits - logits.max(axis=1, keepdims=True))\n"
            "    return e.max(axis=1) / e.sum(axis=1)\n\n\n"
            "KAPPAS = {'top_share': top_share, 'top_logit': lambda logits: logits.max(axis=1)}\n"
        )
    result = submit(folder / "glyph_cnn.py", benchmark=tiny_glyphs, kappas=["top_share", "top_logit"], progress=False)
    records = {r["kappa"]["name"]: r for r in result.records}
    assert records["top_share"]["kappa"]["probability"] and not records["top_logit"]["kappa"]["probability"]
    id_test = result.scores["id_test"]
    correct = id_test.preds == id_test.labels
    expected = independent(id_test.confs["top_share"], correct)
    for name in ("ece", "nll", "brier"):
        assert records["top_share"]["id"][name] == pytest.approx(expected[name], rel=1e-6, abs=1e-9), name
    assert records["top_logit"]["id"]["ece"] is None
