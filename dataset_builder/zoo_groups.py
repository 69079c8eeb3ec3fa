"""The model-zoo kinds as the installed metadata registers them (entry points, read without importing any adapter):
the harness builds a kind from it (:mod:`harness.zoo`), the leaderboard checks that a request names one
(:mod:`leaderboard.requests`), neither importing the other. Standard library only."""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points

GROUPS = {"cood_bench.zoo": False, "cood_bench.zoo_folders": True}  # entry-point group -> its kinds name a folder


def registered_kinds() -> list[tuple[str, bool, EntryPoint]]:
    """Every registration, group by group: a kind's name, whether its target names a folder (a Hub repo in a request;
    else it takes a weights file), and its entry point (which names the adapter function)."""
    return [(entry.name, folder, entry) for group, folder in GROUPS.items() for entry in entry_points(group=group)]
