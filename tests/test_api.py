"""The in-memory Python API (``from harness import evaluate``), device auto, fail fast, a submission's own kappas."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from glyph_fixtures import load_example
from harness import EvalConfig, HarnessError, evaluate, submit

ROOT = Path(__file__).resolve().parents[1]
CNN, MLP = ROOT / "examples" / "glyph_cnn.py", ROOT / "examples" / "glyph_mlp.py"


def files_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def test_evaluate_an_in_memory_module_writes_nothing(tiny_glyphs, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COOD_BENCH_CACHE", str(tmp_path / "cache"))
    cnn = load_example(CNN)
    result = evaluate(
        cnn.build_model(),
        cnn.DATA_CONFIG,
        benchmark=tiny_glyphs,
        kappas=["softmax", "energy"],
        device="cpu",
        progress=False,
    )  # on the CPU: a GPU decodes an in-memory model's images itself, within 2 levels
    assert files_under(tmp_path) == []
    assert isinstance(result.per_level, pd.DataFrame)
    assert len(result.per_level) == 22 and list(result.per_level["severity level"][:11]) == list(range(11))
    assert [r["kappa"]["name"] for r in result.records] == ["softmax", "energy"]
    rec = result.records[0]
    assert rec["model"]["name"] == "GlyphCNN" and rec["model"]["source"].endswith("GlyphCNN")
    # the same weights through a submission file give the same levels and metrics
    from_file = evaluate(CNN, benchmark=tiny_glyphs, kappas=["softmax"], device="cpu", progress=False)
    assert from_file.records[0]["levels"] == rec["levels"] and from_file.records[0]["id"] == rec["id"]
    assert rec["model"]["weights_sha256"] == from_file.records[0]["model"]["weights_sha256"]


def test_evaluate_with_a_callable_transform_and_outputs_on_request(tiny_glyphs, tmp_path):
    from torchvision.transforms import v2

    mlp = load_example(MLP)
    transform = v2.Compose(
        [v2.Resize((32, 32)), v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True), v2.Normalize([0.5], [0.5])]
    )
    result = evaluate(
        mlp.build_model(),
        transform,
        channels=1,
        name="mlp_in_memory",
        benchmark=tiny_glyphs,
        kappas=["max_logit"],
        progress=False,
        out=tmp_path / "out",
    )
    same = evaluate(MLP, benchmark=tiny_glyphs, kappas=["max_logit"], progress=False)
    for ours, theirs in zip(result.records[0]["levels"], same.records[0]["levels"]):  # same pixels up to float rounding
        assert ours == pytest.approx(theirs, rel=1e-5)
    assert result.records[0]["model"]["preprocessing"] == {
        "transform": "custom",
        "channels": 1,
        "decoder": "pil",
        "decoded_on": "cpu",
    }
    assert sorted(p.name for p in (tmp_path / "out" / "records").iterdir()) == ["max_logit.json"]
    assert (tmp_path / "out" / "levels" / "mlp_in_memory__max_logit.parquet").is_file()


def test_a_config_with_keyword_overrides_runs_as_the_keywords_alone(tiny_glyphs):
    config = EvalConfig(benchmark=tiny_glyphs, kappas=["softmax"], num_levels=5, progress=False)
    by_config = evaluate(CNN, config, num_levels=3)
    by_keywords = evaluate(CNN, benchmark=tiny_glyphs, kappas=["softmax"], num_levels=3, progress=False)
    assert len(by_config.records[0]["levels"]) == 3
    assert by_config.records[0]["levels"] == by_keywords.records[0]["levels"]
    assert config.num_levels == 5  # the caller's config is left as it was
    with pytest.raises(TypeError, match="'levels'"):
        evaluate(CNN, config, levels=3)
    with pytest.raises(HarnessError, match=r"^--batch-size must be at least 1, got 0$"):
        submit(CNN, config, batch_size=0)


def test_in_memory_errors(tiny_glyphs):
    cnn = load_example(CNN)
    with pytest.raises(HarnessError, match="pass transform="):
        evaluate(cnn.build_model(), benchmark=tiny_glyphs, progress=False)
    with pytest.raises(HarnessError, match=r"logits of shape \(1, 10\).*36 ID classes"):
        evaluate(
            torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(1024, 10)), cnn.DATA_CONFIG, benchmark=tiny_glyphs
        )
    with pytest.raises(HarnessError, match="transform= applies to an in-memory model"):
        evaluate(CNN, cnn.DATA_CONFIG, benchmark=tiny_glyphs)


def test_a_submissions_own_kappas_run_by_default_after_the_built_in_ones(tiny_glyphs):
    result = evaluate(MLP, benchmark=tiny_glyphs, progress=False)
    assert [r["kappa"]["name"] for r in result.records] == ["softmax", "entropy", "max_logit", "energy", "margin"]


def test_device_auto_and_the_record_names_its_environment(tiny_glyphs, tmp_path):
    result = submit(CNN, benchmark=tiny_glyphs, kappas=["softmax"], out=tmp_path / "run", progress=False)
    run = result.records[0]["timings"]
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert run["device"].startswith(expected)
    assert run["gpu"] == (torch.cuda.get_device_name(0) if expected == "cuda" else None)
    from importlib.metadata import version

    assert run["versions"] == {
        "torch": torch.__version__,
        "torchvision": version("torchvision"),
        "timm": version("timm"),
        "cuda": torch.version.cuda,
    }


def test_a_missing_submission_fails_before_any_benchmark_is_built(tmp_path):
    env = {**os.environ, "COOD_BENCH_CACHE": str(tmp_path / "cache")}
    done = subprocess.run(
        [sys.executable, "-c", "from harness.cli import main; main()", "submit", str(tmp_path / "nope.py")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr == f"error: submission file {tmp_path / 'nope.py'} not found\n"
    assert not (tmp_path / "cache").exists() and not (tmp_path / "cood-results").exists()


def test_an_unknown_kappa_fails_before_any_benchmark_is_built(tmp_path, monkeypatch):
    monkeypatch.setenv("COOD_BENCH_CACHE", str(tmp_path / "cache"))
    with pytest.raises(HarnessError, match="unknown kappa 'nope'"):
        evaluate(CNN, kappas=["nope"], progress=False)
    assert not (tmp_path / "cache").exists()


def test_impossible_levels_fail_before_the_embedded_benchmark_is_built(tmp_path, monkeypatch):
    monkeypatch.setenv("COOD_BENCH_CACHE", str(tmp_path / "cache"))
    cnn = load_example(CNN)
    with pytest.raises(
        HarnessError,
        match=r"--levels 500 is more than the benchmark glyphs allows: its 400 OOD classes "
        r"in windows of 36 \(its ID classes\) give 365 distinct levels at most",
    ):
        evaluate(cnn.build_model(), cnn.DATA_CONFIG, num_levels=500, progress=False)
    assert not (tmp_path / "cache").exists()


def test_a_new_severity_rule_is_one_file(tiny_glyphs, monkeypatch):
    """The severity rules are written once, in harness/method/severity.py: a rule added there (squared spacing of the
    window starts instead of even) is chosen by name, changes the levels the harness forms, and the leaderboard takes
    the records, which name it, without an edit of its own."""
    from harness.method import severity
    from leaderboard.schema import validate_record

    cnn = load_example(CNN)
    run = dict(benchmark=tiny_glyphs, kappas=["softmax"], device="cpu", progress=False)
    even = evaluate(cnn.build_model(), cnn.DATA_CONFIG, **run).records[0]

    def squared(num_windows, num_levels):
        return np.asarray([round((level / (num_levels - 1)) ** 2 * (num_windows - 1)) for level in range(num_levels)])

    monkeypatch.setitem(severity.SEVERITY_RULES, "squared", severity.SeverityRule("squared", squared, "squared"))
    changed = evaluate(cnn.build_model(), cnn.DATA_CONFIG, severity_rule="squared", **run).records[0]
    validate_record(changed)
    assert (even["severity_rule"], changed["severity_rule"]) == ("integer", "squared")
    assert changed["metric_definitions"]["severity_levels"].endswith("ties by class index, squared")
    scores = [level["level_score"] for level in changed["levels"]]
    assert scores == sorted(scores) and changed["levels"][0] == even["levels"][0]
    assert changed["levels"][-1] == even["levels"][-1]  # both rules start the last level at the last window
    middle = slice(1, -1)
    assert all(
        a["level_score"] < b["level_score"] for a, b in zip(changed["levels"][middle], even["levels"][middle])
    )  # squared spacing: easier levels
