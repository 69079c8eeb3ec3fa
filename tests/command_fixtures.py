"""The command lines run as a user runs them, each in a fresh process of its entry point (``from <module> import
main; main()``), and an environment in which chosen packages cannot be imported (as if they were not installed): what
the tests of early answers (``test_fast_errors.py``) and of the light install (``test_light_install.py``) share."""

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# a sitecustomize that makes importing the blocked packages (and their submodules) fail as a missing package does
BLOCKER = (
    "import sys\n"
    "BLOCKED = {packages!r}\n"
    "class Block:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.split('.')[0] in BLOCKED:\n"
    "            raise ModuleNotFoundError(f'No module named {{name!r}}')\n"
    "sys.meta_path.insert(0, Block())\n"
)


def command_env(*first: Path) -> dict[str, str]:
    """This process's environment with ``first`` and the repository on ``PYTHONPATH``, without ``COOD_DEBUG`` (so
    an error is the user's one line)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, first), str(ROOT)])}
    env.pop("COOD_DEBUG", None)
    return env


def blocking(folder: Path, packages: Sequence[str]) -> dict[str, str]:
    """The environment of a process in which importing any of ``packages`` fails with ModuleNotFoundError: a
    ``sitecustomize.py`` written to ``folder``, first on ``PYTHONPATH``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(BLOCKER.format(packages=tuple(packages)))
    return command_env(folder)


def run_main(module: str, *args, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``module``'s command line with ``args`` in a fresh process (``env``: :func:`command_env` unless given), its
    output captured as text."""
    return subprocess.run(
        [sys.executable, "-c", f"from {module} import main; main()", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=command_env() if env is None else env,
        timeout=300,
    )
