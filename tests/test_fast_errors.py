"""Mistakes that need no model are answered in one line before torch is imported: a kappa typo, a benchmark folder
that is not one or has too few classes for the levels, a weights file that is not there; usage errors exit 2 in every
command line without the traceback hint; and a leaderboard's refusal comes after the run's results are shown."""

import json
import re
import sys
from pathlib import Path

import pytest

from command_fixtures import ROOT, blocking, run_main
from glyph_fixtures import CNN, tiny_glyphs  # noqa: F401
from harness import kappa_names
from harness.errors import HarnessError
from harness.kappa_names import check_requested, own_kappa_names, registered_parameters
from harness.method.severity import SEVERITY_RULES

MLP = ROOT / "examples" / "glyph_mlp.py"
WEIGHTS = ROOT / "examples" / "weights" / "glyph_cnn.safetensors"
TORCH_STACK = ("torch", "torchvision", "timm", "pytorch_ood", "webdataset")  # what answers before torch must not need
NEEDS_TORCH = "error: cood-harness submit needs the torch extra"  # the line where a check got past the early ones
MODULES = {"cood-harness": "harness.cli", "cood-dataset": "dataset_builder.cli", "cood-leaderboard": "leaderboard.cli"}


def assert_names_written() -> None:
    """The kappa names the checks before torch read are the registry's (else they step aside: the checks wait)."""
    from harness.kappas.registry import names_text

    assert kappa_names.NAMES_FILE.read_text(encoding="utf-8") == names_text(), "stale; run: python -m harness.kappas"


@pytest.fixture
def blocked(tmp_path) -> tuple[dict, Path]:
    """An environment in which torch (and what imports it) cannot be imported, and a folder to run in; the kappa
    names written for it are current."""
    assert_names_written()
    return blocking(tmp_path / "block", TORCH_STACK), tmp_path


def submit_without_torch(blocked: tuple[dict, Path], *args) -> tuple[int, str, str]:
    env, cwd = blocked
    done = run_main("harness.cli", "submit", *args, cwd=cwd, env=env)
    return done.returncode, done.stdout, done.stderr


def unknown(name: str, suggestion: str | None, own: tuple[str, ...] = ()) -> str:
    hint = f"did you mean '{suggestion}'? " if suggestion else ""
    known = ", ".join([*kappa_names.written_names()["kappas"], *own])
    return f"error: unknown kappa '{name}'; {hint}known: {known} (see cood-harness kappas)\n"


def test_the_torch_block_blocks(blocked):
    code, out, err = submit_without_torch(blocked, CNN)
    assert (code, out) == (2, "") and err.startswith(NEEDS_TORCH), err


@pytest.mark.parametrize(
    "args,line",
    [
        (["-k", "sofmax"], unknown("sofmax", "softmax")),
        (["-k", "softmax", "-k", "knn:k=5", "-k", "maxlogit"], unknown("maxlogit", "max_logit")),
        (
            ["--benchmark", "no/such/benchmark"],
            "error: no/such/benchmark is not a benchmark folder: no manifest.json\n",
        ),
        (["--weights", "missing.safetensors", "timm:resnet18"], "error: weights file missing.safetensors not found\n"),
        (
            ["--severity-rule", "orignal"],
            f"error: unknown severity rule 'orignal'; known: {', '.join(SEVERITY_RULES)}\n",
        ),
        (
            ["-k", "energy:temprature=1"],
            "error: kappa 'energy' has no parameter temprature; did you mean 'temperature'? its parameters: "
            "temperature=1.0\n",
        ),
        (["-k", "softmax", "-k", "knn(k=many)"], "error: kappa 'knn': parameter k takes a int, got 'many'\n"),
        (["-k", "energy:T=1,temperature=2"], "error: kappa 'energy': parameter temperature is given twice\n"),
    ],
    ids=["kappa", "kappa-among-others", "benchmark", "weights", "severity-rule", "parameter", "value", "twice"],
)
def test_a_mistake_is_answered_before_torch(blocked, args, line):
    target = [] if any(a.startswith("timm:") for a in args) else [CNN]
    code, out, err = submit_without_torch(blocked, *target, *args)
    assert (code, out, err) == (2, "", line)


def test_a_kappa_as_the_leaderboard_writes_it_passes_the_early_check(blocked):
    odin = "odin(epsilon=1e-05,preset=paper,temperature=2)"
    code, out, err = submit_without_torch(blocked, CNN, "-k", "energy(temperature=1)", "-k", "energy:T=1", "-k", odin)
    assert code == 2 and err.startswith(NEEDS_TORCH), err


def test_a_zoo_targets_kappa_typo_is_answered_before_torch(blocked):
    code, out, err = submit_without_torch(blocked, "timm:resnet18", "--weights", WEIGHTS, "-k", "energie")
    assert (code, out, err) == (2, "", unknown("energie", "energy"))


def test_a_benchmark_folder_is_checked_by_its_manifest_before_torch(blocked, tiny_glyphs, tmp_path):  # noqa: F811
    empty = tmp_path / "empty"
    empty.mkdir()
    assert submit_without_torch(blocked, CNN, "--benchmark", empty) == (
        2,
        "",
        f"error: {empty} is not a benchmark folder: no manifest.json\n",
    )
    (empty / "manifest.json").write_text("{")
    code, out, err = submit_without_torch(blocked, CNN, "--benchmark", empty)
    assert (code, out) == (2, "") and err.startswith(f"error: {empty / 'manifest.json'} is not valid JSON: "), err
    manifest = json.loads((tiny_glyphs / "manifest.json").read_text())
    num_id, num_ood = manifest["classes"]["id"], manifest["classes"]["ood"]
    windows = num_ood - num_id + 1
    assert submit_without_torch(blocked, CNN, "--benchmark", tiny_glyphs, "--levels", windows + 1) == (
        2,
        "",
        f"error: --levels {windows + 1} is more than the benchmark {tiny_glyphs} allows: its {num_ood} OOD classes "
        f"in windows of {num_id} (its ID classes) give {windows} distinct levels at most\n",
    )
    code, out, err = submit_without_torch(blocked, CNN, "--benchmark", tiny_glyphs, "--levels", windows)
    assert code == 2 and err.startswith(NEEDS_TORCH), err  # as many as it allows: on to the model


def test_the_embedded_benchmarks_levels_are_checked_before_torch(blocked):
    code, out, err = submit_without_torch(blocked, CNN, "--levels", "366")
    assert (code, out, err) == (
        2,
        "",
        "error: --levels 366 is more than the benchmark glyphs allows: its 400 OOD classes in windows of 36 "
        "(its ID classes) give 365 distinct levels at most\n",
    )
    code, out, err = submit_without_torch(blocked, CNN, "--levels", "365", "--benchmark", "glyphs")
    assert code == 2 and err.startswith(NEEDS_TORCH), err


def test_a_files_own_kappa_is_not_refused(blocked):
    code, out, err = submit_without_torch(blocked, MLP, "-k", "margin", "-k", "softmax")
    assert code == 2 and err.startswith(NEEDS_TORCH), err
    code, out, err = submit_without_torch(blocked, MLP, "-k", "margni")
    assert (code, out, err) == (2, "", unknown("margni", "margin", own=("margin",)))


def test_a_files_kappas_not_shown_plainly_wait_for_it_to_load(blocked, tmp_path):
    made = tmp_path / "made.py"
    made.write_text("def make():\n    return {'mine': lambda logits: logits.max(1)}\n\nKAPPAS = make()\n")
    code, out, err = submit_without_torch(blocked, made, "-k", "mine")
    assert code == 2 and err.startswith(NEEDS_TORCH), err


@pytest.mark.parametrize(
    "source,names",
    [
        ("import torch\n\ndef build_model():\n    return torch.nn.Identity()\n", ()),
        ("KAPPAS = {'a': f, 'b': g}\n", ("a", "b")),
        ("KAPPAS = {}\n", ()),
        ("KAPPAS = {'a': f}\nKAPPAS['b'] = g\n", None),
        ("KAPPAS = {**OTHER}\n", None),
        ("KAPPAS = {name: f}\n", None),
        ("from helpers import *\n", None),
        ("from helpers import KAPPAS\n", None),
        ("def build_model(:\n", None),
        ("if True:\n    KAPPAS = {'a': f}\n", None),
    ],
)
def test_own_kappa_names_from_the_source(tmp_path, source, names):
    path = tmp_path / "submission.py"
    path.write_text(source)
    assert own_kappa_names(path) == names
    assert own_kappa_names(str(path)) == names
    assert own_kappa_names("timm:resnet18") == ()


def test_the_written_names_are_the_registrys():
    from harness.kappas.registry import registry

    assert_names_written()
    built = {name: kdef.defaults for name, kdef in registry().defs.items() if kdef.source != "plugin"}
    assert kappa_names.written_names()["kappas"] == built
    assert registered_parameters() == built


def test_the_detector_modules_are_read_from_the_folder():
    from harness.kappas import detectors

    folder = Path(detectors.__file__).parent
    assert kappa_names.detector_modules() == sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__")


def test_the_written_names_step_aside_when_they_may_differ(monkeypatch):
    assert_names_written()
    monkeypatch.delitem(sys.modules, "harness.kappas.registry", raising=False)  # as in the command line, before torch
    light = registered_parameters()
    written = kappa_names.written_names()
    assert light == written["kappas"] and light["energy"] == {"temperature": 1.0}
    plugin = lambda group: ["a plugin"] if group == kappa_names.ENTRY_POINT_GROUP else []  # noqa: E731
    changes = (
        ("written_names", lambda: {**written, "pytorch_ood": "0.0.1"}),
        ("detector_modules", lambda: [*written["detector_modules"], "feature_norm"]),
        ("entry_points", plugin),
    )
    for name, value in changes:
        with monkeypatch.context() as patch:
            patch.setattr(kappa_names, name, value)
            assert registered_parameters() is None, name
    check_requested(["nope"], None, ())  # unknown names: nothing refused
    check_requested(["nope"], light, None)
    known = re.escape(", ".join([*written["kappas"], "mine"]))  # the registry's kappas, then the own one
    with pytest.raises(HarnessError, match=rf"^unknown kappa 'qqq'; known: {known} "):
        check_requested(["mine:anything=2", "qqq"], light, ("mine",))  # an own kappa's parameters wait for it


def test_the_api_refuses_a_kappa_typo_before_loading(monkeypatch):
    import harness.run

    def never(*args, **kwargs):
        raise AssertionError("the submission was loaded")

    monkeypatch.setattr(harness.run, "load_submission", never)
    with pytest.raises(HarnessError, match=r"^unknown kappa 'sofmax'; did you mean 'softmax'\?"):
        harness.run.evaluate(CNN, kappas=["softmax", "sofmax"], progress=False)
    with pytest.raises(AssertionError, match="the submission was loaded"):
        harness.run.evaluate(MLP, kappas=["margin"], progress=False)  # its own: on to loading


@pytest.mark.parametrize("prog", list(MODULES))
@pytest.mark.parametrize(
    "args,message",
    [
        (["sbumit"], "Error: No such command 'sbumit'"),
        (["--bogus"], "Error: No such option: --bogus"),
        (
            {"cood-harness": ["submit"], "cood-dataset": ["levels"], "cood-leaderboard": ["add"]},
            "Error: Missing argument",
        ),
    ],
    ids=["command", "option", "argument"],
)
def test_a_usage_error_exits_2_without_the_traceback_hint(prog, args, message, tmp_path):
    args = args[prog] if isinstance(args, dict) else args
    done = run_main(MODULES[prog], *args, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == "", done
    assert message in done.stderr.splitlines()[-1], done.stderr
    assert "COOD_DEBUG" not in done.stderr and "Traceback" not in done.stderr
    assert not any(tmp_path.iterdir())


def test_a_refused_leaderboard_comes_after_the_results(tiny_glyphs, tmp_path):  # noqa: F811
    from dataset_builder.benchmark import Benchmark
    from leaderboard.store import init_leaderboard

    board = tmp_path / "board"
    init_leaderboard(board, {**Benchmark.open(tiny_glyphs).identity(), "id": "other"})
    before = sorted(p.relative_to(board) for p in board.rglob("*"))
    out = tmp_path / "out"
    done = run_main(
        "harness.cli",
        *("submit", CNN, "--benchmark", tiny_glyphs, "-k", "softmax", "--trust-submission", "--no-progress", "-q"),
        *("--cache-dir", tmp_path / "cache", "--out", out, "--leaderboard", board),
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("glyph_cnn on glyphs ") and any(line.startswith("scored ") for line in lines), lines
    assert lines[-1].startswith(f"wrote 1 record, {out}"), lines
    [line] = done.stderr.splitlines()
    assert line.startswith(f"error: the run's outputs are in {out}, but the leaderboard could not take the records: ")
    assert line.endswith("unknown benchmark 'glyphs'; this leaderboard holds 'other'"), line
    assert len(list((out / "records").rglob("*.json"))) == 1
    assert sorted(p.relative_to(board) for p in board.rglob("*")) == before
