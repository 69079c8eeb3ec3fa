"""The model-zoo target kinds (``KIND:NAME``), registered as entry points (as the kappa plugins are).

A kind in the group ``cood_bench.zoo`` takes a weights file (``--weights``); one in ``cood_bench.zoo_folders`` names a
folder that holds its own weights (``hf:FOLDER``; in a leaderboard request, a Hub repo). A kind of :data:`PRETRAINED`
fetches pretrained weights instead: from the Hugging Face Hub, at the revision ``--revision`` names (:data:`HUB_KINDS`:
``timm:`` and ``open_clip:`` given no weights file, ``hf:`` a Hub repo), or through torch.hub's cache (``torchvision:``
given no weights file).
Each entry point names the adapter function that builds the kind from a :class:`harness.adapters.common.ZooTarget`.
The kinds are read from the installed metadata without importing any adapter, so the command line knows them before
torch is imported; an adapter module is imported only to build its kind. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib.metadata import EntryPoint

from dataset_builder.zoo_groups import registered_kinds
from harness.errors import HarnessError

HUB_KINDS = frozenset({"hf", "open_clip", "timm"})  # the kinds whose adapter can fetch pretrained weights from the Hub
PRETRAINED = HUB_KINDS | {"torchvision"}  # the kinds whose adapter can fetch pretrained weights (the Hub, torch.hub)


@dataclass(frozen=True)
class ZooKind:
    """A registered kind: its name, whether its target names a folder (else it takes a weights file), its adapter."""

    name: str
    folder: bool
    adapter: EntryPoint

    @property
    def pretrained(self) -> bool:
        """Whether it fetches pretrained weights: given no weights file (``timm:``, ``open_clip:``, ``torchvision:``),
        or naming a Hub repo (``hf:<owner>/<repo>``)."""
        return self.name in PRETRAINED

    @property
    def hub(self) -> bool:
        """Whether its pretrained weights come from the Hugging Face Hub (so a ``--revision`` pins them)."""
        return self.name in HUB_KINDS


@cache
def zoo_kinds() -> dict[str, ZooKind]:
    """Every registered kind by name, in name order; a kind registered twice is an error."""
    kinds: dict[str, ZooKind] = {}
    for name, folder, entry in registered_kinds():
        if name in kinds:
            raise HarnessError(f"zoo kind '{name}' is registered twice ({kinds[name].adapter.value} and {entry.value})")
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
    names = [f"{k.name}:" for k in zoo_kinds().values() if not k.folder]
    return " and ".join(filter(None, [", ".join(names[:-1]), *names[-1:]]))
