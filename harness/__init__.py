"""cood-bench harness: evaluate a classifier and its confidence functions on a C-OOD benchmark.

``from harness import evaluate`` evaluates an ``nn.Module`` (or a target string) in memory; ``submit`` also writes
the outputs. Exports load on first use, so ``harness.method`` (pure numpy) imports without torch.
"""

import os as _os
import sys as _sys

# ``python -m harness.cli`` (torchrun's -m too) puts the current folder first on sys.path, so a submission's folder
# could stand in for typer or numpy (its ``typer.py`` imported by the harness). While this package is imported as the
# parent of a -m module (sys.argv[0] is still "-m"), before any of those imports, that entry is dropped, unless it is
# where this package itself comes from (a checkout run in place). ``python -P`` and the console scripts are safe as
# they are.
if (
    _sys.argv[:1] == ["-m"]
    and not getattr(_sys.flags, "safe_path", False)
    and _sys.path[:1] in ([""], [_os.getcwd()])
    and _os.path.realpath(_os.path.dirname(_os.path.dirname(__file__))) != _os.path.realpath(_os.getcwd())
):
    del _sys.path[0]

from importlib.metadata import version

from dataset_builder.exports import lazy_exports

__version__ = version("cood-bench")
_EXPORTS = {
    "evaluate": "harness.run",
    "submit": "harness.run",
    "save": "harness.outputs",
    "Evaluation": "harness.outputs",
    "EvalConfig": "harness.config",
    "user_kappa": "harness.submission",
    "HarnessError": "harness.errors",
}
__all__ = [*_EXPORTS, "__version__"]

__getattr__ = lazy_exports(__name__, _EXPORTS)
