"""``python -m harness.kappas``: write the registry's names and parameters to :data:`harness.kappa_names.NAMES_FILE`,
for the command line to read before torch is imported."""

from harness.kappa_names import NAMES_FILE
from harness.kappas.registry import names_text

NAMES_FILE.write_text(names_text(), encoding="utf-8")
print(f"wrote {NAMES_FILE.name}")
