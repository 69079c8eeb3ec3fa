"""`cood-harness submit` end to end: outputs, determinism, the paper's curve shape, errors."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr

from glyph_fixtures import cnn_variant, load_example, negated_cnn
from harness.errors import HarnessError
from harness.run import submit
from leaderboard.store import first_difference

pytestmark = pytest.mark.slow  # real runs: the quick loop (-m 'not slow') leaves them to CI

ROOT = Path(__file__).resolve().parents[1]
CNN, MLP = ROOT / "examples" / "glyph_cnn.py", ROOT / "examples" / "glyph_mlp.py"
ALL_KAPPAS = ["softmax", "entropy", "max_logit", "energy", "odin", "mc_dropout"]
PAPER_COLUMNS = [  # per_level.csv's first columns, as the paper's code wrote them
    *("severity level", "percentile", "ood-auroc", "ood_avg_conf", "id-acc", "id-auroc", "id_avg_conf"),
    *("model name", "confidence function", "model name - confidence function"),
]


def stable(record: dict) -> dict:
    return {k: v for k, v in record.items() if k not in ("created", "timings", "order_seed")}


def test_submit_writes_every_output(tiny_glyphs, tmp_path):
    result = submit(
        CNN, benchmark=tiny_glyphs, kappas=ALL_KAPPAS, out=tmp_path / "run", mc_passes=3, progress=False, workers=1
    )
    records = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "run" / "records").glob("*.json")}
    assert set(records) == set(ALL_KAPPAS)
    rec = records["softmax"]
    assert rec["benchmark"]["manifest_sha256"] == result.benchmark.sha256
    assert rec["benchmark"]["num_ood_classes"] == 48 and rec["num_levels"] == 11
    assert [lvl["level"] for lvl in rec["levels"]] == list(range(11))
    assert [lvl["percentile"] for lvl in rec["levels"]] == pytest.approx([i / 10 for i in range(11)])
    assert all(lvl["num_ood"] == 36 * 8 and lvl["num_id"] == 36 * 8 for lvl in rec["levels"])
    assert rec["model"]["weights_sha256"] == result.submission.weights_sha256 and len(rec["model"]["file_sha256"]) == 64
    assert records["odin"]["kappa"] == {
        "name": "odin",
        "params": {"preset": "paper", "temperature": 2.0, "epsilon": 1e-5},
        "probability": True,  # max softmax(f(x')/T)
    }
    assert records["mc_dropout"]["kappa"]["params"] == {"passes": 3}
    assert rec["summary"]["mean_ood_auroc"] == pytest.approx(np.mean([lvl["ood_auroc"] for lvl in rec["levels"]]))
    csv = pd.read_csv(tmp_path / "run" / "per_level.csv")
    assert list(csv.columns)[: len(PAPER_COLUMNS)] == PAPER_COLUMNS  # the paper's columns first, by name
    assert len(csv) == 11 * len(ALL_KAPPAS)
    levels = pd.read_parquet(tmp_path / "run" / "levels" / "glyph_cnn__softmax.parquet")
    assert len(levels) == 11 * 36 and levels.groupby("level")["class_id"].nunique().eq(36).all()
    assert set(levels["class_id"]) <= set(result.benchmark.ood_classes["id"])
    assert (tmp_path / "run" / "severity_curves.png").read_bytes()[:4] == b"\x89PNG"
    # the same inputs and seeds with other loading parallelism: other batches, the same results to float rounding (a
    # stochastic kappa draws other masks in other batches)
    again = submit(
        CNN,
        benchmark=tiny_glyphs,
        kappas=["softmax", "mc_dropout"],
        out=tmp_path / "again",
        mc_passes=3,
        progress=False,
        workers=2,
        cache=False,
    )
    assert again.stats["images_forwarded"] == 36 * 8 + 48 * 24
    assert first_difference(stable(again.records[0]), stable(rec)) is None
    assert stable(again.records[1])["kappa"] == stable(records["mc_dropout"])["kappa"]


def test_user_kappa_and_mc_dropout_without_dropout(tiny_glyphs, tmp_path):
    result = submit(MLP, benchmark=tiny_glyphs, kappas=["margin", "softmax"], out=tmp_path / "mlp", progress=False)
    assert [r["kappa"]["name"] for r in result.records] == ["margin", "softmax"]
    import hashlib
    import inspect

    code = hashlib.sha256(inspect.getsource(load_example(MLP).margin).encode()).hexdigest()
    assert result.records[0]["kappa"]["params"] == {"source": "submission", "code_sha256": code}
    assert result.records[0]["timings"]["isolation"]["mode"] == "sandbox"
    with pytest.raises(HarnessError, match="no(ne)? .*dropout|dropout layers"):
        submit(MLP, benchmark=tiny_glyphs, kappas=["mc_dropout"], out=tmp_path / "mcd", progress=False)
    assert not (tmp_path / "mcd").exists()


@pytest.mark.parametrize("model", [CNN, MLP], ids=["glyph_cnn", "glyph_mlp"])
def test_paper_shape_on_the_embedded_benchmark(default_glyphs, tmp_path, model):
    result = submit(model, benchmark="glyphs", kappas=["softmax", "entropy"], out=tmp_path / "run", progress=False)
    assert result.benchmark.root == default_glyphs
    for rec in result.records:
        auroc = [lvl["ood_auroc"] for lvl in rec["levels"]]
        conf = [lvl["ood_avg_conf"] for lvl in rec["levels"]]
        assert spearmanr(range(11), auroc).statistic < -0.95, auroc  # detection gets harder with the level
        assert spearmanr(range(11), conf).statistic > 0.95, conf  # and OOD confidence rises
        assert auroc[0] - auroc[-1] > 0.2
        assert rec["private"]["num_id"] == 36 * 7  # the embedded benchmark's private part is scored beside it


RETRAINED_TOLERANCE = 0.03  # ID accuracy and mean ood-auroc of a model retrained on another platform


def test_training_script_reproduces_the_committed_model(default_glyphs, tmp_path):
    """Retraining gives the committed model's scores within the tolerance everywhere, and its very bytes on the
    platform that produced them (torch promises bit-identity on no other)."""
    from safetensors.torch import load_file

    from harness import evaluate

    subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "train_glyphs.py"),
            "--benchmark",
            str(default_glyphs),
            "--out",
            str(tmp_path),
            "--models",
            "glyph_mlp",
        ],
        check=True,
        capture_output=True,
    )
    weights = ROOT / "examples" / "weights"
    recorded = json.loads((weights / "glyph_mlp.platform.json").read_text())
    if json.loads((tmp_path / "glyph_mlp.platform.json").read_text()) == recorded:
        assert (tmp_path / "glyph_mlp.safetensors").read_bytes() == (weights / "glyph_mlp.safetensors").read_bytes()
    mlp = load_example(MLP)
    retrained = mlp.build_model(pretrained=False)
    retrained.load_state_dict(load_file(tmp_path / "glyph_mlp.safetensors"))
    public = dict(benchmark=default_glyphs, kappas=["softmax"], progress=False, private=False)
    ours = evaluate(retrained, mlp.DATA_CONFIG, **public).records[0]
    committed = evaluate(MLP, **public, trust_submission=True).records[0]
    assert abs(ours["id"]["acc"] - committed["id"]["acc"]) <= RETRAINED_TOLERANCE
    assert abs(ours["summary"]["mean_ood_auroc"] - committed["summary"]["mean_ood_auroc"]) <= RETRAINED_TOLERANCE


def run_cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-c", "from harness.cli import main; main()", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
    )


def test_cli_prints_the_per_level_table(tiny_glyphs, tmp_path):
    """Its output sent to files, as a CI or a worker's log: one line per phase, no progress bar's carriage returns."""
    args = ["submit", CNN, "--benchmark", tiny_glyphs, "--out", tmp_path / "out", "--device", "cpu", "-k", "softmax"]
    args.append("--no-cache")  # a pass that would draw its bar on a terminal
    with open(tmp_path / "out.log", "w") as out, open(tmp_path / "err.log", "w") as err:
        code = subprocess.run(
            [sys.executable, "-c", "from harness.cli import main; main()", *map(str, args)], stdout=out, stderr=err
        ).returncode
    logs = [(tmp_path / name).read_bytes().decode() for name in ("out.log", "err.log")]  # the bytes, "\r" kept
    done = subprocess.CompletedProcess(args, code, *logs)
    assert done.returncode == 0, done.stderr
    assert "\r" not in done.stdout + done.stderr and "img/s" not in done.stderr
    assert done.stderr.splitlines()[1] in ("device: cpu, float32", "device: cpu (no CUDA GPU found), float32")
    at = done.stderr.splitlines().index(
        "id_test, ood_estimation, ood_test: 1 kappa on 1,440 images, in one secret order"
    )
    assert re.fullmatch(r"evaluation: done in \d+\.\d s \(50 shards forwarded\)", done.stderr.splitlines()[at + 1])
    lines = done.stdout.splitlines()
    assert lines[1].split() == ["level", "pct", "k1.auroc", "k1.fpr95"]  # one header row of short names
    assert [line.split()[0] for line in lines[2:13]] == [str(i) for i in range(11)]
    assert lines[13].startswith("k1 softmax. auroc: the level's ood-auroc; fpr95: its FPR at 95% TPR")
    assert "mean ood-auroc" in done.stdout


def test_the_table_of_many_kappas_fits_100_columns_in_blocks_with_a_legend():
    from harness.method.evaluation import KappaResult
    from harness.outputs import summary_table

    rows = [
        {"level": i, "percentile": i / 10, "ood_auroc": 0.9 - i / 100, "fpr_at_95_tpr": 0.2 + i / 50} for i in range(11)
    ]
    ids = {"acc": 0.9, "auroc": 0.85, "avg_conf": 0.8, "aurc": 0.01, "e_aurc": 0.005, "sac_95": 0.9, "sac_99": 0.5}
    names = ["softmax", "entropy", "max_logit", "energy", "odin", "a_file_kappa_with_a_long_name"]
    lines = summary_table([KappaResult(name, None, rows, ids) for name in names]).splitlines()
    assert max(map(len, lines)) <= 100 and not any(line != line.rstrip() for line in lines)
    headers = [line.split() for line in lines if line.split()[:2] == ["level", "pct"]]
    assert headers == [
        ["level", "pct", *[f"k{i}.{m}" for i in range(1, 6) for m in ("auroc", "fpr95")]],
        ["level", "pct", "k6.auroc", "k6.fpr95"],
    ]
    legend = " ".join(line for line in lines if line.startswith(("k1 ", "a_file", "fpr95")) or "; k" in line)
    assert all(f"k{i} {name}" in legend for i, name in enumerate(names, 1))
    last = [i for i, line in enumerate(lines) if "a_file_kappa_with_a_long_name:" in line][0]
    assert lines[last].split(": ", 1)[1].startswith("mean ood-auroc 0.8500") and "sac@99 0.5000" in lines[last + 1]
    bounded = KappaResult(
        "softmax", None, rows, {**ids, "acc_low": 0.88, "acc_high": 0.92, "auroc_low": None, "auroc_high": None}
    )
    bounded.summary_intervals.update(mean_ood_auroc_low=0.8412, mean_ood_auroc_high=0.8583)
    lines = summary_table([bounded]).splitlines()
    summary = " ".join(" ".join(lines[[i for i, line in enumerate(lines) if "softmax:" in line][0] :]).split())
    assert "mean ood-auroc 0.8500 [0.8412, 0.8583] id-acc 0.9000 [0.8800, 0.9200] id-auroc 0.8500 aurc" in summary
    assert max(map(len, lines)) <= 100


def test_the_severity_curves_draw_each_levels_interval_as_an_error_bar():
    from matplotlib.container import ErrorbarContainer

    from harness.method.evaluation import KappaResult
    from harness.outputs import curves_figure

    def rows(shift: float) -> list[dict]:
        out = [
            {
                "level": i,
                "ood_auroc": 0.6 + shift + i / 50,
                "ood_auroc_low": 0.55 + shift + i / 50 - i / 400,
                "ood_auroc_high": 0.62 + shift + i / 50,
                "ood_avg_conf": 0.5 - i / 40,
            }
            for i in range(11)
        ]
        out[3]["ood_auroc_low"] = out[3]["ood_auroc_high"] = None  # an interval the record does not have
        return out

    results = [
        KappaResult(kappa, None, rows(shift), {"avg_conf": 0.9}) for kappa, shift in [("softmax", 0), ("energy", 0.1)]
    ]
    bench = {"id": "glyphs", "version": "1.0.0", "manifest_sha256": "ab" * 32}
    left = curves_figure("glyph_cnn", results, bench).axes[0]
    bars = [c for c in left.containers if isinstance(c, ErrorbarContainer)]
    assert [(bar.get_label(), bar.has_yerr, bar.has_xerr) for bar in bars] == [
        ("softmax", True, False),
        ("energy", True, False),
    ]
    for bar, result in zip(bars, results):
        line, _, (vertical,) = bar.lines
        assert line.get_ydata().tolist() == pytest.approx([row["ood_auroc"] for row in result.rows])
        drawn = [segment.tolist() for segment in vertical.get_segments()]
        assert drawn[3] == []  # no interval, no bar
        expected = [[[r["level"], r["ood_auroc_low"]], [r["level"], r["ood_auroc_high"]]] for r in result.rows]
        kept = [i for i in range(11) if i != 3]
        assert np.array([drawn[i] for i in kept]) == pytest.approx(np.array([expected[i] for i in kept]))


BAD_MODELS = {
    "no_entry_point.py": (
        "DATA_CONFIG = {'input_size': (1, 32, 32)}\n",
        r"submission sub/no_entry_point\.py defines no build_model\(\) function",
    ),
    "wrong_classes.py": (
        "import torch\nDATA_CONFIG = {'input_size': (1, 32, 32), 'mean': (0.5,), 'std': (0.5,), 'crop_pct': 1.0}\n"
        "def build_model():\n    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(1024, 10))\n",
        r"sub/wrong_classes\.py: the model gives logits of shape \(\d+, 10\).*36 ID classes",
    ),
    "nan_logits.py": (
        "import torch\nDATA_CONFIG = {'input_size': (1, 32, 32), 'mean': (0.5,), 'std': (0.5,), 'crop_pct': 1.0}\n"
        "class M(torch.nn.Module):\n    def forward(self, x):\n        return torch.full((len(x), 36), float('nan'))\n"
        "def build_model():\n    return M()\n",
        "NaN or infinite logits",
    ),
    "syntax_error.py": (
        "DATA_CONFIG = {}\n\ndef build_model(:\n",
        r"cannot load submission sub/syntax_error\.py, line 3: SyntaxError: invalid syntax",
    ),
    "unfit_weights.py": (  # another net's weights: PyTorch's error of many lines, in one
        "import torch\nDATA_CONFIG = {'input_size': (1, 32, 32), 'mean': (0.5,), 'std': (0.5,), 'crop_pct': 1.0}\n"
        "def build_model():\n    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(1024, 36))\n"
        "    model.load_state_dict(torch.nn.Sequential(torch.nn.Linear(1024, 8), torch.nn.ReLU(), "
        "torch.nn.Linear(8, 36)).state_dict())\n    return model\n",
        r"submission sub/unfit_weights\.py, line 5: the weights do not fit Sequential: "
        r"2 missing keys \('1\.bias' and 1 more\), 4 unexpected keys \('0\.bias' and 3 more\)",
    ),
}
NAMED = ("no_entry_point.py", "syntax_error.py", "unfit_weights.py", "wrong_classes.py")  # the user's path in the line


@pytest.mark.parametrize("name", sorted(BAD_MODELS))
def test_bad_submissions_fail_in_one_line(tiny_glyphs, tmp_path, name):
    """One line, in the user's words: the path as they named it (never the sandbox's mount point), no escaped line
    breaks or tabs, under 200 characters."""
    source, message = BAD_MODELS[name]
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / name).write_text(source)
    done = run_cli("submit", f"sub/{name}", "--benchmark", tiny_glyphs, "--out", "out", "--quiet", cwd=tmp_path)
    assert_one_line_error(done, message)
    line = done.stderr.strip()
    if name in NAMED:
        assert re.fullmatch(f"error: {message}", line), line
    assert "/submission" not in line and "\\n" not in line and "\\t" not in line and len(line) < 200, line
    assert not (tmp_path / "out").exists()


def test_cood_debug_shows_the_whole_pytorch_error_in_the_users_words(tiny_glyphs, tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "unfit_weights.py").write_text(BAD_MODELS["unfit_weights.py"][0])
    done = subprocess.run(
        [sys.executable, "-c", "from harness.cli import main; main()", "submit", "sub/unfit_weights.py"]
        + ["--benchmark", str(tiny_glyphs), "--quiet"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "COOD_DEBUG": "1"},
    )
    assert done.returncode == 2, done.stderr
    assert 'File "sub/unfit_weights.py", line 5, in build_model\n' in done.stderr  # the child's own traceback
    whole = (
        'for Sequential:\n\tMissing key(s) in state_dict: "1.weight", "1.bias". \n\tUnexpected key(s) in state_dict: '
    )
    assert whole in done.stderr and "/submission/" not in done.stderr  # (the harness's own submission.py is named)
    last = done.stderr.rstrip().splitlines()[-1]
    assert re.fullmatch(f"harness.errors.HarnessError: {BAD_MODELS['unfit_weights.py'][1]}", last), last


def assert_one_line_error(done, pattern):
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert re.search(pattern, lines[0]), lines[0]


def test_missing_file_and_unknown_kappa(tiny_glyphs, tmp_path):
    assert_one_line_error(run_cli("submit", tmp_path / "nope.py", "--benchmark", tiny_glyphs), "not found")
    assert_one_line_error(
        run_cli("submit", CNN, "--benchmark", tiny_glyphs, "-k", "msp", "--quiet"), "unknown kappa 'msp'"
    )


def test_corrupted_shard_is_reported(tiny_glyphs, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_glyphs, broken)
    shard = broken / json.loads((broken / "manifest.json").read_text())["shards"][-1]["path"]
    data = bytearray(shard.read_bytes())
    data[1600:1700] = b"\xff" * 100  # inside the first image (after the json member and the png header)
    shard.write_bytes(bytes(data))
    out = tmp_path / "out"
    assert_one_line_error(
        run_cli("submit", CNN, "--benchmark", broken, "--out", out, "--quiet", "--no-cache"), "corrupt shard .*sha256"
    )
    shard.write_bytes(bytes(data[:2000]))  # truncated: even without the sha256 check it is caught
    assert_one_line_error(
        run_cli("submit", CNN, "--benchmark", broken, "--out", out, "--quiet", "--no-cache", "--no-verify"),
        "corrupt shard",
    )
    assert not out.exists()


def test_records_are_valid_and_go_to_a_leaderboard(tiny_glyphs, tmp_path, capsys):
    from leaderboard.schema import validate_record
    from leaderboard.store import current_table

    board = tmp_path / "board"
    result = submit(
        CNN,
        benchmark=tiny_glyphs,
        kappas=["softmax", "energy"],
        out=tmp_path / "run",
        progress=False,
        leaderboard=board,
    )
    for rec in result.records:
        validate_record(rec)
        assert rec["model"]["bundle_sha256"] == rec["timings"]["isolation"]["bundle_sha256"]  # the file's identity
    table = current_table(board)
    assert sorted(table["kappa"]) == ["energy(temperature=1)", "softmax"]
    capsys.readouterr()
    submit(CNN, benchmark=tiny_glyphs, kappas=["softmax"], out=tmp_path / "again", progress=False, leaderboard=board)
    assert "with the same results; skipped" in capsys.readouterr().err  # the same bundle again: the same entry
    assert len(current_table(board)) == 2
    cheat = negated_cnn(tmp_path / "cheat")
    other = submit(cheat, benchmark=tiny_glyphs, kappas=["softmax"], progress=False, leaderboard=board)
    assert other.records[0]["model"]["weights_sha256"] == result.records[0]["model"]["weights_sha256"]
    table = current_table(board)  # other code with the same weights: its own entry, the first one kept
    assert len(table) == 3 and table["bundle_sha256"].nunique() == 2


def test_user_kappa_with_features(tiny_glyphs, tmp_path):
    model = cnn_variant(
        tmp_path / "with_features.py",
        """
NAME = "glyph_cnn_features"

class WithFeatures(cnn.GlyphCNN):
    def forward(self, x):
        features = self.features(x)
        return self.head(features), features

@user_kappa(features=True)
def feature_norm(logits, features):
    return np.linalg.norm(features, axis=1)

KAPPAS = {"feature_norm": feature_norm}

def build_model():
    return variant(WithFeatures)
""",
    )
    result = submit(
        model,
        benchmark=tiny_glyphs,
        kappas=["feature_norm", "softmax"],
        out=tmp_path / "out",
        cache=False,
        progress=False,
    )
    plain = submit(CNN, benchmark=tiny_glyphs, kappas=["softmax"], out=tmp_path / "plain", cache=False, progress=False)
    assert result.records[1]["levels"] == plain.records[0]["levels"]  # the tuple output gives the same logits
    norm = result.results[0]
    assert norm.kappa == "feature_norm" and all(0.0 <= row["ood_auroc"] <= 1.0 for row in norm.rows)
    assert norm.rows[0]["ood_avg_conf"] > 0.0  # a norm of real features
    logits_only = cnn_variant(
        tmp_path / "logits_only.py",
        """
build_model = cnn.build_model
KAPPAS = {"feature_norm": user_kappa(features=True)(lambda logits, features: np.linalg.norm(features, axis=1))}
""",
    )
    # a model that returns logits only gets the input of its last linear layer: the same features, from the same pass
    tapped = submit(
        logits_only, benchmark=tiny_glyphs, kappas=["feature_norm"], out=tmp_path / "lo", cache=False, progress=False
    )
    assert tapped.records[0]["levels"] == result.records[0]["levels"]
