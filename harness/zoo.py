"""The model-zoo target kinds (``KIND:NAME``), registered as entry points (as the kappa plugins are).

A kind in the group ``cood_bench.zoo`` takes a weights file (``--weights``); one in ``cood_bench.zoo_folders`` names a
folder that holds its own weights (``hf:FOLDER``; in a leaderboard request, a Hub repo). Each entry point names the
adapter function that builds the kind from a :class:`harness.adapters.common.ZooTarget`, then its abilities in
brackets (:data:`ABILITIES`): ``pretrained``, it fetches pretrained weights given no weights file (a folder kind: given
a Hub repo), through torch.hub's cache or the Hugging Face Hub; ``hub``, from the Hub, at the revision ``--revision``
names (``timm = "harness.adapters.timm_models:timm_target [pretrained, hub]"``).
The kinds are read from the installed metadata without importing any adapter, so the command line knows them before
torch is imported; an adapter module is imported only to build its kind. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib.metadata import EntryPoint

from dataset_builder.zoo_groups import registered_kinds
from harness.errors import HarnessError

ABILITIES = {
    "pretrained": "fetches pretrained weights given no weights file (a folder kind: given a Hub repo)",
    "hub": "its pretrained weights come from the Hugging Face Hub, so a --revision pins them (needs pretrained)",
}


@dataclass(frozen=True)
class ZooKind:
    """A registered kind: its name, whether its target names a folder (else it takes a weights file), its adapter
    (whose entry point's extras are the kind's :data:`ABILITIES`)."""

    name: str
    folder: bool
    adapter: EntryPoint

    @property
    def pretrained(self) -> bool:
        """Whether it fetches pretrained weights: given no weights file, or (a folder kind) naming a Hub repo."""
        return "pretrained" in self.adapter.extras

    @property
    def hub(self) -> bool:
        """Whether its pretrained weights come from the Hugging Face Hub (so a ``--revision`` pins them)."""
        return "hub" in self.adapter.extras


def check_abilities(name: str, entry: EntryPoint) -> None:
    """A kind's abilities as its entry point declares them: each one of :data:`ABILITIES`, ``hub`` with
    ``pretrained``; anything else is refused in one line naming the kind."""
    unknown = [extra for extra in entry.extras if extra not in ABILITIES]
    if unknown:
        raise HarnessError(
            f"zoo kind '{name}' ({entry.value}) declares unknown abilities {', '.join(unknown)}; "
            f"known: {', '.join(ABILITIES)}"
        )
    if "hub" in entry.extras and "pretrained" not in entry.extras:
        raise HarnessError(f"zoo kind '{name}' ({entry.value}) declares hub without pretrained")


@cache
def zoo_kinds() -> dict[str, ZooKind]:
    """Every registered kind by name, in name order; a kind registered twice is an error."""
    kinds: dict[str, ZooKind] = {}
    for name, folder, entry in registered_kinds():
        if name in kinds:
            raise HarnessError(f"zoo kind '{name}' is registered twice ({kinds[name].adapter.value} and {entry.value})")
        check_abilities(name, entry)
        kinds[name] = ZooKind(name, folder, entry)
    return dict(sorted(kinds.items()))


def zoo_kind(target: str) -> ZooKind | None:
    """The kind of a ``KIND:NAME`` target, or None when ``target`` is no zoo target (a submission file)."""
    kind, sep, _ = str(target).partition(":")
    return zoo_kinds().get(kind) if sep else None


def kinds_listed() -> str:
    """Every kind, as errors list them: ``hf:, open_clip:, timm:, torchvision:``."""
    return ", ".join(f"{name}:" for name in zoo_kinds())


def zoo_usage() -> str:
    """The kinds as the command line's help lists them: ``open_clip:NAME, ... (with --weights) or hf:FOLDER``."""
    weights = ", ".join(f"{k.name}:NAME" for k in zoo_kinds().values() if not k.folder)
    folders = ", ".join(f"{k.name}:FOLDER" for k in zoo_kinds().values() if k.folder)
    return " or ".join(filter(None, [weights and f"{weights} (with --weights)", folders]))


def weights_kinds() -> str:
    """The kinds that take a weights file, as errors list them: ``open_clip:, timm: and torchvision:``."""
    return _listed(k for k in zoo_kinds().values() if not k.folder)


def hub_kinds() -> str:
    """The kinds whose pretrained weights come from the Hub, as errors list them: ``hf:, open_clip: and timm:``."""
    return _listed(k for k in zoo_kinds().values() if k.hub)


def pretrained_kinds(hub: bool, folder: bool = False, suffix: str = "") -> str:
    """The kinds that fetch pretrained weights, from the Hub (``hub``) or not, taking a weights file or naming a folder
    (``folder``), as help lists them: ``open_clip: or timm:``, each name followed by ``suffix``."""
    chosen = (k for k in zoo_kinds().values() if k.pretrained and k.hub == hub and k.folder == folder)
    return _listed(chosen, " or ", suffix)


def _listed(kinds, last: str = " and ", suffix: str = "") -> str:
    names = [f"{k.name}:{suffix}" for k in kinds]
    return last.join(filter(None, [", ".join(names[:-1]), *names[-1:]]))
