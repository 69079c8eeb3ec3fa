"""The harness run from a submission's folder imports none of the folder's code: every documented way to start it (the
console script, ``python -P -m harness.cli``, ``python -m harness.cli``, ``torchrun --no-python cood-harness``) keeps
the current folder off the front of ``sys.path``, so a ``typer.py`` or a ``numpy/`` there is never imported as the
harness's own (it would run as the harness's user, root in CI, outside the sandbox)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
FORMS = {
    "console_script": [str(BIN / "cood-harness")],
    "python_P_m": [sys.executable, "-P", "-m", "harness.cli"],
    "python_m": [sys.executable, "-m", "harness.cli"],  # the folder is dropped from sys.path before typer is imported
    "torchrun_no_python": [
        str(BIN / "torchrun"),
        "--standalone",
        "--nproc-per-node",
        "1",
        "--no-python",
        str(BIN / "cood-harness"),
    ],
}


@pytest.fixture
def hostile(tmp_path) -> Path:
    """A submission's folder holding a ``typer.py`` and a ``numpy/`` that each leave a marker when imported."""
    folder = tmp_path / "submission"
    (folder / "numpy").mkdir(parents=True)
    for name, module in (("typer", folder / "typer.py"), ("numpy", folder / "numpy" / "__init__.py")):
        module.write_text(f"open({str(tmp_path / f'imported-{name}')!r}, 'w').close()\n")
    (folder / "model.py").write_text("x = 1\n")
    return folder


@pytest.mark.parametrize("form", sorted(FORMS))
def test_the_harness_started_from_a_submissions_folder_imports_none_of_it(form, hostile, tmp_path):
    command = FORMS[form]
    if not Path(command[0]).is_file() or (form == "torchrun_no_python" and not Path(command[-1]).is_file()):
        pytest.skip(f"{Path(command[0]).name} is not installed beside this Python")
    if form == "python_P_m" and sys.version_info < (3, 11):
        pytest.skip("python -P needs Python 3.11")
    env = {**os.environ, "PYTHONPATH": str(REPO), "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run([*command, "--help"], cwd=hostile, capture_output=True, text=True, env=env, timeout=300)
    assert sorted(p.name for p in tmp_path.glob("imported-*")) == [], done.stderr[-2000:]
    assert done.returncode == 0 and "Evaluate classifiers on a C-OOD benchmark." in done.stdout, done.stderr[-2000:]
