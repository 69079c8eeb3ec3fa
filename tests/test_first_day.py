"""A user's first day: what cannot work is refused in one line before torch is imported, and the closing lines of a run
say what it forwarded and what it took from the score cache."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from glyph_fixtures import CNN, tiny_glyphs  # noqa: F401
from harness.cli import app, forwarded_line, kappa_table
from harness.config import EvalConfig
from harness.errors import HarnessError
from harness.options import check_target, is_zoo_target
from harness.zoo import weights_kinds

# runs the command line, then says on the last line of stdout whether torch was imported
PROBE = (
    "import atexit, sys; atexit.register(lambda: print('torch imported:', 'torch' in sys.modules)); "
    "from harness.cli import main; main()"
)


def cli(*args, cwd: Path) -> tuple[int, list[str], list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=120
    )
    return done.returncode, done.stdout.splitlines(), done.stderr.splitlines()


def test_a_missing_file_is_refused_before_torch(tmp_path):
    code, out, err = cli("submit", "missing.py", cwd=tmp_path)
    assert (code, err, out) == (2, ["error: submission file missing.py not found"], ["torch imported: False"])
    assert not (tmp_path / "cood-results").exists()


@pytest.mark.parametrize(
    "args,message",
    [
        (["--levels", "1"], "--levels must be at least 2 (the method needs a first and a last level), got 1"),
        (["--batch-size", "0"], "--batch-size must be at least 1, got 0"),
        (["--workers", "-1"], "--workers must be 0 or more, got -1"),
        (["--decoder", "opencv"], "--decoder must be one of auto, pil, torchvision, got 'opencv'"),
        (["--feature-dtype", "bfloat16"], "--feature-dtype must be one of float32, float16, got 'bfloat16'"),
        (["--name", "a/b"], "the model name 'a/b' contains '/' or '\\'"),
        (
            ["--weights", "w.pt"],
            f"--weights applies to {weights_kinds()} targets, not to the file {CNN}",
        ),
    ],
    ids=lambda v: v[0] if isinstance(v, list) else None,
)
def test_an_option_that_cannot_work_is_refused_before_torch(tmp_path, args, message):
    code, out, err = cli("submit", CNN, *args, cwd=tmp_path)
    assert (code, err, out) == (2, [f"error: {message}"], ["torch imported: False"])


def test_a_zoo_target_without_a_model_is_refused_before_torch(tmp_path):
    code, out, err = cli("submit", "timm:", cwd=tmp_path)
    assert (code, err, out) == (2, ["error: target 'timm:' names no model"], ["torch imported: False"])


def test_the_light_checks():
    assert [is_zoo_target(t) for t in ("timm:resnet50", "hf:folder", "model.py", "c:/model.py", "open_clip")] == [
        True,
        True,
        False,
        False,
        False,
    ]
    check_target("torchvision:resnet18", "w.pt")
    check_target(str(CNN))
    config = EvalConfig(
        name="glyph_cnn-v2", num_levels=2, batch_size=1, workers=0, feature_dtype="float16", decoder="pil"
    )
    assert (config.name, config.num_levels, config.batch_size, config.workers) == ("glyph_cnn-v2", 2, 1, 0)
    with pytest.raises(HarnessError, match=r"^submission file nope\.py not found$"):
        check_target("nope.py")


def test_the_kappa_listing_fits_in_120_columns():
    done = CliRunner().invoke(app, ["kappas"], prog_name="cood-harness")
    assert done.exit_code == 0, done.output
    lines = done.output.splitlines()
    assert max(map(len, lines)) <= 120
    energy = lines.index(next(line for line in lines if line.startswith("energy ")))
    assert lines[energy].split()[:4] == ["energy", "paper", "needs", "logits"]
    assert lines[energy].endswith("  T * logsumexp(logits / T)")
    assert lines[energy + 1] == "    [temperature=1.0] -- Galil, Dabbah & El-Yaniv, ICLR 2023"
    softmax = lines.index(next(line for line in lines if line.startswith("softmax ")))
    assert lines[softmax + 1] == "    reports a probability (ECE, NLL, Brier) -- Galil, Dabbah & El-Yaniv, ICLR 2023"


def test_a_long_summary_wraps_under_itself():
    from harness.kappas import KappaDef

    long = KappaDef("long", "word " * 40, "plugin", frozenset({"logits"}), {"k": 3}, dict, reference="x" * 150)
    lines = kappa_table([long], [long], ("logits",), width=60)
    assert max(map(len, lines)) <= 60
    summary_at = lines[0].index("word")
    assert all(line[:summary_at].isspace() and line[summary_at] != " " for line in lines[1:4])
    detail = [line for line in lines if line.startswith("    ") and not line[4].isspace()]
    assert detail == lines[-len(detail) :] and "".join(line[4:] for line in detail) == "[k=3] -- " + "x" * 150


def test_the_closing_line():
    assert (
        forwarded_line(
            {"shards_scored": 12, "images_forwarded": 8000, "shards_from_cache": 38, "shards_from_logits": 0}
        )
        == "scored 12 shards (8,000 images forwarded); 38 shards from the score cache"
    )
    assert (
        forwarded_line({"shards_scored": 1, "images_forwarded": 1, "shards_from_cache": 0, "shards_from_logits": 2})
        == "scored 1 shard (1 image forwarded); 0 shards from the score cache,"
        " 2 shards scored from its cached logits and features"
    )
    assert (
        forwarded_line({"shards_scored": 3, "images_forwarded": 30, "shards_from_cache": 0}, cache=False)
        == "scored 3 shards (30 images forwarded); no score cache (--no-cache)"
    )
    from harness.runtime.scoring import split_line

    assert (
        split_line("ood_test", {"shards_scored": 1, "shards_from_cache": 38, "shards_from_logits": 2}, 1.234)
        == "ood_test: done in 1.2 s (1 shard forwarded, 38 from the score cache, 2 from cached logits and features)"
    )
    assert (
        split_line("id_test", {"shards_scored": 3, "shards_from_cache": 0, "shards_from_logits": 0}, 60)
        == "id_test: done in 60.0 s (3 shards forwarded)"
    )


def test_a_second_run_says_it_forwarded_nothing(tiny_glyphs, tmp_path):  # noqa: F811
    from dataset_builder.benchmark import Benchmark

    bench = Benchmark.open(tiny_glyphs)
    shards = sum(len(bench.shards(split)) for split in ("id_test", "ood_estimation", "ood_test"))
    images = sum(s["num_samples"] for split in ("id_test", "ood_estimation", "ood_test") for s in bench.shards(split))
    lines = []
    for run in ("a", "b"):
        done = CliRunner().invoke(
            app,
            [
                "submit",
                str(CNN),
                "--benchmark",
                str(tiny_glyphs),
                "-k",
                "softmax",
                "--trust-submission",
                "--cache-dir",
                str(tmp_path / "cache"),
                "--out",
                str(tmp_path / run),
                "--no-progress",
            ],
            prog_name="cood-harness",
        )
        assert done.exit_code == 0, done.output
        lines.append(next(line for line in done.output.splitlines() if line.startswith("scored ")))
        passes = [line for line in done.output.splitlines() if line.startswith("evaluation: done")]
        assert len(passes) == 1 and passes[0].endswith(
            f"(0 shards forwarded, {shards} from the score cache)" if run == "b" else f"({shards} shards forwarded)"
        ), done.output
    assert lines[0] == f"scored {shards} shards ({images:,} images forwarded); 0 shards from the score cache"
    assert lines[1] == f"scored 0 shards (0 images forwarded); {shards} shards from the score cache"
    assert re.fullmatch(r"scored \d+ shards \([\d,]+ images forwarded\); \d+ shards from the score cache", lines[0])
