"""Leaderboard of C-OOD results: validated records, an append-only store, versioned tables and views.

Imports neither torch nor the harness or dataset builder; results arrive as JSON records. Exports load on
first use; the modules ``release``, ``report`` and ``publish`` hold the functions of the same name.
"""

from importlib.metadata import version

from dataset_builder.exports import lazy_exports

__version__ = version("cood-bench")
_EXPORTS = {
    "add_records": "leaderboard.store",
    "add_files": "leaderboard.store",
    "init_leaderboard": "leaderboard.store",
    "current_table": "leaderboard.store",
    "validate_record": "leaderboard.schema",
    "entry_id": "leaderboard.schema",
    "release_table": "leaderboard.release",
    "build_site": "leaderboard.site",
    "paper_records": "leaderboard.paper",
    "LeaderboardError": "leaderboard.errors",
}
__all__ = [*_EXPORTS, "__version__"]

__getattr__ = lazy_exports(__name__, _EXPORTS)
