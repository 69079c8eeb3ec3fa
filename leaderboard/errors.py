"""The one error type the leaderboard raises for bad input; the CLI prints it as one line."""


class LeaderboardError(Exception):
    """A user-facing problem (bad record, duplicate entry, missing release) with a one-line message."""
