"""The one error type the leaderboard raises for bad input; the CLI prints it as one line."""

from dataset_builder.errors import CoodError


class LeaderboardError(CoodError):
    """A user-facing problem (bad record, duplicate entry, missing release) with a one-line message."""
