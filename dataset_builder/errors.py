"""The one error type the dataset builder raises for bad input; CLIs print it as one line."""


class BenchmarkError(Exception):
    """A user-facing problem (corrupt shard, bad manifest, bad input folder) with a one-line message."""
