"""Detectors end to end: fitted on the ID fit split from the same pass, 11 levels each, no new pass for a new one."""

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from glyph_fixtures import FIT_PER_CLASS, load_example
from harness import __version__
from harness.errors import HarnessError
from harness.run import evaluate, submit
from harness.runtime.execution import Execution
from harness.runtime.inference import LocalForward

pytestmark = pytest.mark.slow  # real runs: the quick loop (-m 'not slow') leaves them to CI

CNN = Path(__file__).resolve().parents[1] / "examples" / "glyph_cnn.py"
DATA_CONFIG = {"input_size": (1, 32, 32), "mean": (0.5,), "std": (0.5,), "interpolation": "bilinear", "crop_pct": 1.0}
EVAL_IMAGES = 36 * 8 + 48 * 24


def records_in(folder: Path) -> dict:
    return {p.stem: json.loads(p.read_text()) for p in sorted((folder / "records").glob("*.json"))}


def stable(record: dict) -> dict:
    return {k: v for k, v in record.items() if k not in ("created", "timings", "order_seed")}


def test_detectors_from_one_pass_and_none_for_a_new_one(fit_glyphs, tmp_path):
    cache = tmp_path / "cache"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from harness.cli import main; main()",
            "submit",
            str(CNN),
            "--benchmark",
            str(fit_glyphs),
            "-k",
            "knn",
            "-k",
            "vim",
            "-k",
            "mahalanobis",
            "-k",
            "react",
            "-k",
            "ash",
            "--out",
            str(tmp_path / "a"),
            "--cache-dir",
            str(cache),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    phase_lines(done.stderr.splitlines(), fit_glyphs, tmp_path / "a")
    first = records_in(tmp_path / "a")
    assert set(first) == {"knn", "vim", "mahalanobis", "react", "ash"}
    fit = {"split": "id_train", "size": 36 * FIT_PER_CLASS, "seed": 0}
    for name, rec in first.items():
        assert len(rec["levels"]) == 11
        assert 0.5 < rec["summary"]["mean_ood_auroc"] <= 1.0
        assert rec["kappa"]["params"].get("fit") == (None if name == "ash" else fit)
        timings = rec["timings"]
        assert timings["images_forwarded"] == 36 * FIT_PER_CLASS + EVAL_IMAGES  # every image once, the fit split's too
        assert timings["id_train_images"] == 36 * FIT_PER_CLASS
    assert first["knn"]["kappa"]["params"] == {"k": 50, "normalize": True, "fit": fit}
    # the leaderboard takes them, the fit among the entry's identity
    from leaderboard.store import add_records, current_table

    add_records(tmp_path / "board", list(first.values()), create=True, folder=tmp_path / "a")
    table = current_table(tmp_path / "board")
    assert sorted(table["kappa"]) == [
        "ash(percentile=0.65,variant=ash-s)",
        "knn(k=50,normalize=True)",
        "mahalanobis",
        "react(percentile=0.9,threshold=None)",
        "vim(d=None)",
    ]
    # a new detector later: from the kept logits and features, no image forwarded, the same values for the others
    second = submit(
        CNN,
        benchmark=fit_glyphs,
        kappas=["knn", "vim", "dice", "softmax"],
        out=tmp_path / "b",
        cache_dir=cache,
        progress=False,
    )
    assert second.stats["images_forwarded"] == 0
    again = records_in(tmp_path / "b")
    assert stable(again["knn"]) == stable(first["knn"]) and stable(again["vim"]) == stable(first["vim"])
    assert len(again["dice"]["levels"]) == 11
    # one level's ood-auroc is scikit-learn's roc_auc_score of ID test (positive) against that level's OOD test images
    result = next(r for r in second.results if r.kappa == "dice")
    level = 5
    ood = second.scores["ood_test"]
    mask = np.isin(ood.labels, result.levels.classes[level])
    id_scores = second.scores["id_test"].scores["dice"]
    y = np.r_[np.ones(len(id_scores)), np.zeros(mask.sum())]
    expected = roc_auc_score(y, np.r_[id_scores, ood.scores["dice"][mask]])
    assert again["dice"]["levels"][level]["ood_auroc"] == pytest.approx(expected, abs=1e-12)


def phase_lines(lines: list[str], bench: Path, out: Path) -> None:
    """Without progress bars, a line still opens each long phase (fitting each detector, the evaluation pass) and
    closes the pass and its re-check, the device line right after the command's own first line."""
    assert lines[0] == f"cood-harness {__version__}: {CNN} on {bench}; starting its sandbox and PyTorch"
    assert lines[1].startswith("device: cpu")
    assert lines[2:4] == [f"loading {CNN} in its sandbox", lines[3]] and re.fullmatch(
        r"loaded glyph_cnn: 36 classes, 25,748 parameters \(\d+\.\d s\)", lines[3]
    )
    fitted = ["knn", "vim", "mahalanobis", "react"]
    assert lines[4] == f"reading the fit split id_train for {', '.join(fitted)}"
    assert [line for line in lines if line.startswith("fitting ")] == [f"fitting {k} on 1,080 images" for k in fitted]
    at = lines.index(f"id_test, ood_estimation, ood_test: 5 kappas on {288 + 768 + 384:,} images, in one secret order")
    assert re.fullmatch(r"evaluation: done in \d+\.\d s \(50 shards forwarded\)", lines[at + 1]), lines[at + 1]
    assert re.fullmatch(
        r"re-check: 256 images asked again in \d+ batch(es)? by the file loaded anew, .*", lines[at + 2]
    )
    assert lines[-2:] == ["severity levels and metrics of 5 kappas", f"writing the outputs to {out}"]
    assert not [line for line in lines if "%|" in line or "\r" in line]  # --no-progress: no bars


def test_a_fit_needs_an_id_fit_split(tiny_glyphs):
    with pytest.raises(HarnessError, match=r"has no ID split to fit kappas on \(id_fit or id_train\)"):
        evaluate(load_example(CNN).build_model(), DATA_CONFIG, benchmark=tiny_glyphs, kappas=["knn"], progress=False)


class NoLinear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 36, 32)

    def forward(self, x):
        return self.conv(x).flatten(1)


class OwnFeatures(NoLinear):
    """Returns (logits, features) but has no last linear layer; records the batch sizes it is called on."""

    def __init__(self):
        super().__init__()
        self.batches = []

    def forward(self, x):
        self.batches.append(len(x))
        logits = super().forward(x)
        return logits, logits.relu()


class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(32 * 32, 36)

    def forward(self, x):
        return 2.0 * self.fc(x.flatten(1))


def test_a_detector_without_features_or_head_is_one_line(tiny_glyphs):
    with pytest.raises(
        HarnessError, match=r"kappa 'ash' needs features, but the model gives none: return \(logits, features\)"
    ):
        evaluate(NoLinear(), DATA_CONFIG, benchmark=tiny_glyphs, kappas=["ash"], progress=False)
    with pytest.raises(
        HarnessError, match=r"kappa 'scale' needs the last layer, but the logits are not the model's last linear"
    ):
        evaluate(Scaled(), DATA_CONFIG, benchmark=tiny_glyphs, kappas=["scale"], progress=False)


def test_a_model_without_features_is_refused_before_any_image_pass(tiny_glyphs, fit_glyphs):
    model = NoLinear()
    batches = []
    model.register_forward_pre_hook(lambda module, args: batches.append(len(args[0])))
    with pytest.raises(
        HarnessError, match=r"^kappa 'knn' needs features, but the model gives none: return \(logits, features\)"
    ):
        evaluate(model, DATA_CONFIG, benchmark=tiny_glyphs, kappas=["softmax", "knn"], progress=False)
    assert batches == [1, 1]  # the trial pass on a blank image at load, the one asking for features; no benchmark image
    own = OwnFeatures()
    with pytest.raises(
        HarnessError,
        match=r"^kappa 'vim' needs the last layer that maps the features to the logits, and the model has none",
    ):
        evaluate(own, DATA_CONFIG, benchmark=tiny_glyphs, kappas=["knn", "vim"], progress=False)
    assert own.batches == [1, 1]
    run = evaluate(OwnFeatures(), DATA_CONFIG, benchmark=fit_glyphs, kappas=["knn"], progress=False)
    assert len(run.records) == 1 and len(run.records[0]["levels"]) == 11  # its own features suffice


def test_features_are_the_input_of_the_last_layer_from_the_same_pass():
    model = load_example(CNN).build_model().eval()
    forward = LocalForward(model, Execution.resolve("cpu"), 36)
    images = torch.randn(4, 1, 32, 32, generator=torch.Generator().manual_seed(0))
    out = forward(images, 0, [])
    with torch.no_grad():
        np.testing.assert_allclose(out.features, model.features(images).numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(out.logits, model(images).numpy(), rtol=1e-5, atol=1e-5)
    weight, bias = forward.head
    np.testing.assert_allclose(out.features @ weight.T + bias, out.logits, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("arch", ["resnet10t", "vit_tiny_patch16_224"])
def test_timm_features_are_forward_head_pre_logits(arch):
    import timm

    model = timm.create_model(arch, pretrained=False, num_classes=36).eval()
    forward = LocalForward(model, Execution.resolve("cpu"), 36)
    images = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    out = forward(images, 0, [])
    with torch.no_grad():
        expected = model.forward_head(model.forward_features(images), pre_logits=True)
    np.testing.assert_allclose(out.features, expected.numpy(), rtol=1e-4, atol=1e-5)
    weight, bias = forward.head
    np.testing.assert_allclose(out.features @ weight.T + bias, out.logits, rtol=1e-4, atol=1e-4)


def test_twenty_detectors_one_pass_half_precision_features_and_one_more_for_free(fit_glyphs, tmp_path, capfd):
    from harness.kappas.ood_bridge import bridged_classes
    from harness.runtime.score_cache import decode

    detectors = ["softmax", "entropy", "max_logit", "energy", *[n for n in bridged_classes() if n != "gen"]]
    assert len(detectors) >= 20
    cache = tmp_path / "cache"
    first = submit(
        CNN, benchmark=fit_glyphs, kappas=detectors, out=tmp_path / "a", cache_dir=cache, feature_dtype="float16"
    )
    assert first.stats["images_forwarded"] == 36 * FIT_PER_CLASS + EVAL_IMAGES  # each image once
    assert all(len(r["levels"]) == 11 and r["timings"]["feature_dtype"] == "float16" for r in first.records)
    line = [x for x in capfd.readouterr().err.splitlines() if x.startswith("score cache:")]
    assert len(line) == 1 and "features in float16" in line[0] and "bytes per image" in line[0]
    (entry, *_) = sorted(cache.rglob("*.scores"))
    assert decode(entry.read_bytes())["features"].dtype == np.float16
    second = submit(
        CNN,
        benchmark=fit_glyphs,
        kappas=[*detectors, "gen"],
        out=tmp_path / "b",
        cache_dir=cache,
        feature_dtype="float16",
        progress=False,
    )
    assert second.stats["images_forwarded"] == 0
    before, after = records_in(tmp_path / "a"), records_in(tmp_path / "b")
    assert len(after["gen"]["levels"]) == 11
    assert all(stable(after[k]) == stable(before[k]) for k in ("knn", "vim", "react"))  # the same values from the cache
    # float32 features are another cache: a new pass
    third = submit(CNN, benchmark=fit_glyphs, kappas=["knn"], out=tmp_path / "c", cache_dir=cache, progress=False)
    assert third.stats["images_forwarded"] == 36 * FIT_PER_CLASS + EVAL_IMAGES
    with pytest.raises(HarnessError, match="--feature-dtype must be one of float32, float16"):
        evaluate(CNN, benchmark=fit_glyphs, kappas=["knn"], feature_dtype="int8")


LAYERS = "features.0,features.1,features.2"


def test_detectors_through_the_model_fitted_on_the_fit_split(fit_glyphs, tmp_path):
    """MahalanobisODIN (fitted on the kept features) and the layer readers (fitted from a pass over the fit split in the
    submission's process): their fit travels to the child, 11 levels each, and the leaderboard takes them."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from harness.cli import main; main()",
            "submit",
            str(CNN),
            "--benchmark",
            str(fit_glyphs),
            "-k",
            "mahalanobis_odin",
            "-k",
            f"multi_mahalanobis:layers={LAYERS}",
            "-k",
            f"gram:layers={LAYERS}",
            "-k",
            "nacue:layers=features.1,features.2",
            "--out",
            str(tmp_path / "a"),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    records = records_in(tmp_path / "a")
    assert set(records) == {"mahalanobis_odin", "multi_mahalanobis", "gram", "nacue"}
    fit = {"split": "id_train", "size": 36 * FIT_PER_CLASS, "seed": 0}
    for rec in records.values():
        assert len(rec["levels"]) == 11 and rec["kappa"]["params"]["fit"] == fit
        assert rec["timings"]["isolation"]["mode"] == "sandbox"
        # the fit split twice (kept features; the named layers), the evaluation splits once (their own passes beside
        # them)
        assert rec["timings"]["images_forwarded"] == 2 * 36 * FIT_PER_CLASS + EVAL_IMAGES
    assert records["gram"]["kappa"]["params"] == {"layers": LAYERS, "num_poles_list": None, "fit": fit}
    assert (
        0.5 < records["gram"]["summary"]["mean_ood_auroc"]
        and 0.5 < records["mahalanobis_odin"]["summary"]["mean_ood_auroc"]
    )
    from leaderboard.store import add_records, current_table

    add_records(tmp_path / "board", list(records.values()), create=True, folder=tmp_path / "a")
    assert sorted(current_table(tmp_path / "board")["kappa"]) == [
        f"gram(layers={LAYERS},num_poles_list=None)",
        "mahalanobis_odin(eps=0.002)",
        f"multi_mahalanobis(alpha=None,layers={LAYERS})",
        "nacue(alpha=100,layers=features.1,features.2,m_bins=50,o_star=50)",
    ]


def test_layers_the_model_lacks_are_one_line(fit_glyphs):
    model = load_example(CNN).build_model()
    with pytest.raises(
        HarnessError,
        match=r"kappa 'gram' reads intermediate layers and this model has no timm feature_info "
        r"to choose them: name them, gram:layers=NAME\[,NAME...\] \(its top-level modules: features, head\)",
    ):
        evaluate(model, DATA_CONFIG, benchmark=fit_glyphs, kappas=["gram"], progress=False)
    with pytest.raises(
        HarnessError,
        match=r"kappa 'nacue': the model has no layer 'features.9' \(its top-level modules: features, head\)",
    ):
        evaluate(
            model, DATA_CONFIG, benchmark=fit_glyphs, kappas=["nacue:layers=features.1,features.9"], progress=False
        )


SPLIT_CNN = """
import torch
from torch import nn

DATA_CONFIG = {"input_size": (1, 32, 32), "mean": (0.5,), "std": (0.5,), "interpolation": "bilinear", "crop_pct": 1.0}


class Split(nn.Module):
    \"\"\"A CNN split as timm splits its models: spatial feature maps, then a head.\"\"\"

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), \
nn.Conv2d(16, 32, 3, padding=1),
                                  nn.ReLU(), nn.MaxPool2d(2))
        self.fc = nn.Linear(32, 36)

    def forward_features(self, x):
        return self.body(x)

    def forward_head(self, maps):
        return self.fc(maps.mean(dim=(2, 3)))

    def forward(self, x):
        return self.forward_head(self.forward_features(x))


def build_model():
    torch.manual_seed(0)
    return Split()
"""


def test_rankfeat_through_the_submissions_process(tiny_glyphs, tmp_path):
    """A submission that exposes forward_features/forward_head: RankFeat runs in its child process, 11 levels."""
    path = tmp_path / "split_cnn.py"
    path.write_text(SPLIT_CNN)
    run = submit(
        path,
        benchmark=tiny_glyphs,
        kappas=["rankfeat", "energy"],
        out=tmp_path / "a",
        cache_dir=tmp_path / "cache",
        progress=False,
    )
    records = records_in(tmp_path / "a")
    assert set(records) == {"rankfeat", "energy"}
    rec = records["rankfeat"]
    assert (
        len(rec["levels"]) == 11 and rec["kappa"]["params"] == {} and rec["timings"]["isolation"]["mode"] == "sandbox"
    )
    scores = run.scores["id_test"].scores
    assert np.ptp(scores["rankfeat"]) > 0 and not np.allclose(scores["rankfeat"], scores["energy"], rtol=1e-3)
    with pytest.raises(
        HarnessError, match=r"^shard .*: kappa 'rankfeat' needs the model split into a backbone and a head"
    ):
        submit(CNN, benchmark=tiny_glyphs, kappas=["rankfeat"], out=tmp_path / "b", cache=False, progress=False)


def test_mcm_on_an_open_clip_zero_shot_classifier(tiny_glyphs, tmp_path):
    """MCM on CLIP's image embeddings and the glyph class names' text embeddings, through evaluate: 11 levels."""
    import pandas as pd

    from clip_fixtures import tiny_open_clip

    names = list(pd.read_parquet(tiny_glyphs / "classes" / "id.parquet").sort_values("index")["name"])
    _, sub = tiny_open_clip(tmp_path / "clip", names)
    run = evaluate(
        sub.model, sub.transform, benchmark=tiny_glyphs, kappas=["mcm:temperature=0.01", "softmax"], progress=False
    )
    rec = next(r for r in run.records if r["kappa"]["name"] == "mcm")
    assert len(rec["levels"]) == 11 and rec["kappa"]["params"] == {"temperature": 0.01}
    mcm = run.scores["id_test"].scores["mcm"]
    assert np.all((mcm > 1 / 36) & (mcm <= 1)) and np.ptp(mcm) > 0
    with pytest.raises(
        HarnessError, match=r"kappa 'mcm' needs CLIP image and class-name text embeddings: an open_clip: target"
    ):
        evaluate(load_example(CNN).build_model(), DATA_CONFIG, benchmark=tiny_glyphs, kappas=["mcm"], progress=False)
