"""cood-bench harness: evaluate a classifier and its confidence functions on a C-OOD benchmark.

``from harness import evaluate`` evaluates an ``nn.Module`` (or a target string) in memory; ``submit`` also writes
the outputs. Exports load on first use, so ``harness.method`` (pure numpy) imports without torch.
"""

from importlib import import_module
from importlib.metadata import version

__version__ = version("cood-bench")
_EXPORTS = {
    "evaluate": "harness.run",
    "submit": "harness.run",
    "save": "harness.run",
    "Evaluation": "harness.run",
    "EvalConfig": "harness.config",
    "user_kappa": "harness.submission",
    "HarnessError": "harness.errors",
}
__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'harness' has no attribute '{name}'")
    return getattr(import_module(_EXPORTS[name]), name)
