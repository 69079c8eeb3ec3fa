"""The one error type the harness raises for bad input; the CLI prints it as one line."""

from dataset_builder.errors import CoodError


class HarnessError(CoodError):
    """A user-facing problem (bad submission, bad scores, bad benchmark) with a one-line message."""
