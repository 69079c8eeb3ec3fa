"""Running a typer app so that user errors print one line on stderr and exit non-zero, never a traceback."""

from __future__ import annotations

import os
import sys

import click
import typer


def run_app(app: typer.Typer, user_errors: tuple[type[Exception], ...]) -> None:
    """Run ``app``: ``user_errors`` exit 2 with ``error: <message>``; anything unexpected exits 1 in one line
    (``COOD_DEBUG=1`` shows its traceback)."""
    try:
        app(standalone_mode=False)
    except user_errors as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.Abort:
        typer.echo("aborted", err=True)
        sys.exit(130)
    except Exception as exc:
        if os.environ.get("COOD_DEBUG"):
            raise
        typer.echo(f"error: {type(exc).__name__}: {exc} (set COOD_DEBUG=1 for the traceback)", err=True)
        sys.exit(1)
