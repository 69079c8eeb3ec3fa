"""The command lines' shared shape: plain help (no markup, so ``[/TAG]`` and ``[default: ...]`` print as written),
``-h``, ``--version``, and user errors as one line on stderr with a non-zero exit, never a traceback."""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import sys
import threading
from typing import NoReturn

import typer

from dataset_builder.errors import (
    INTERRUPTED,
    CoodError,
    describe_os_error,
    exit_interrupted,
    fail,
    interruptions,
    one_line,
)

HELP = {"help_option_names": ["-h", "--help"]}
TORCH_EXTRA = (
    "torch",
    "torchvision",
    "timm",
    "pytorch_ood",
    "scipy",
    "PIL",
    "datasets",
    "webdataset",
    "sklearn",
    "tqdm",
)


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:
        return False


def require_torch_extra(command: str) -> None:
    """Exit 2 in one line, before anything imports them, when the packages of the ``torch`` extra are missing (the light
    install, ``pip install cood-bench``, has the leaderboard only)."""
    missing = [name for name in TORCH_EXTRA if not _importable(name)]
    if missing:
        print(
            f"error: {command} needs the torch extra (missing: {', '.join(missing)}): pip install 'cood-bench[torch]'",
            file=sys.stderr,
        )
        sys.exit(2)


def make_app(help: str, version: str) -> typer.Typer:
    """A typer app with the project's help settings and a ``--version`` option."""
    app = typer.Typer(
        add_completion=False, no_args_is_help=True, rich_markup_mode=None, context_settings=HELP, help=help
    )

    def show_version(value: bool) -> None:
        if value:
            typer.echo(version)
            raise typer.Exit()

    @app.callback()
    def _main(
        _version: bool = typer.Option(
            False, "--version", callback=show_version, is_eager=True, help="Print the version and exit."
        ),
    ) -> None:
        pass

    return app


def click_kind(exc: BaseException, name: str) -> bool:
    """Whether ``exc`` is click's exception ``name`` (``Abort``, ``Exit``, ``ClickException``), from click itself or
    from the copy of click that newer typer versions carry (whose classes are not click's)."""
    return any(cls.__name__ == name and cls.__module__.split(".")[0] in ("click", "typer") for cls in type(exc).__mro__)


def run_app(app: typer.Typer, name: str | None = None) -> NoReturn:
    """A command line's whole run: :func:`_run`, then :func:`exit_now` with its status."""
    try:
        _run(app, name)
    except SystemExit as exc:
        exit_now(exc.code)
    exit_now(0)


def exit_now(code: int | str | None) -> NoReturn:
    """Exit with ``code`` as ``sys.exit`` would, once the exit handlers have run and the output is flushed, but without
    tearing down every imported module one by one: after torch, timm and pandas that alone takes about a second. A
    command that imported no torch (its teardown is quick; a caller may run several in one process, as the help test
    does), or whose thread that is not a daemon still runs, gets the normal exit."""
    if isinstance(code, str):
        print(code, file=sys.stderr)
    status = code if isinstance(code, int) else 0 if code is None else 1
    running = any(not t.daemon for t in threading.enumerate() if t is not threading.main_thread())
    if running or "torch" not in sys.modules:
        sys.exit(status)
    atexit._run_exitfuncs()  # what the interpreter would run at exit (the sandboxes' ends, logging's flush)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)


def _run(app: typer.Typer, name: str | None) -> None:
    """Run ``app`` (its errors prefixed by ``name:`` when given), ending in ``SystemExit`` unless it succeeded: a
    user's problem (a :class:`CoodError`) exits 2 with ``error: <message>``; an OSError exits 1 with ``error: <file>:
    <reason>``; anything unexpected exits 1 in one line (``COOD_DEBUG=1``: a traceback instead of the line, see
    :func:`dataset_builder.errors.fail`). Ctrl-C exits 130 with one line saying what it left
    (:func:`dataset_builder.errors.exit_interrupted`), whether typer and click raise it, turn it into ``Abort`` or
    return 130 (their versions differ), and whatever error it caused on its way out."""
    with interruptions() as interrupted:
        try:
            status = app(prog_name=name, standalone_mode=False)
        except KeyboardInterrupt as exc:
            exit_interrupted(exc)
        except Exception as exc:
            if interrupted() or click_kind(exc, "Abort"):  # or an error the Ctrl-C caused: a worker, the sandbox
                exit_interrupted(exc)
            if not click_kind(exc, "Exit"):
                _fail(exc, f"{name}: error" if name else "error")
            status = exc.exit_code
        if interrupted() or status == INTERRUPTED:
            exit_interrupted()
        if isinstance(status, int) and status:
            sys.exit(status)


def _fail(exc: Exception, error: str) -> NoReturn:
    if isinstance(exc, CoodError):
        fail(exc, f"{error}: {exc}".replace("\n", "\\n"), 2)
    if click_kind(exc, "ClickException"):  # a usage error: click's own message and status
        exc.show()
        sys.exit(exc.exit_code)
    if isinstance(exc, OSError):  # a full disk, a denied permission, a missing folder: the file and the reason
        fail(exc, f"{error}: {describe_os_error(exc)}", 1)
    fail(exc, f"{error}: {one_line(exc)} (set COOD_DEBUG=1 for the traceback)", 1)


def bars_off(progress: bool) -> bool | None:
    """tqdm's ``disable`` for a progress bar shown while ``progress``, on a terminal only: None has tqdm leave out a
    bar whose stream is not a terminal, so that a log file, a pipe or a CI log gets no carriage-return frames."""
    return None if progress else True


def plural(count: int, word: str, words: str = "") -> str:
    """``1 model``, ``12 shards``, ``1,000 images``, ``36 classes``; ``words``: an irregular plural (``entry``,
    ``entries``)."""
    if count == 1:
        return f"{count:,} {word}"
    return f"{count:,} {words or word + ('es' if word.endswith(('s', 'x', 'ch', 'sh')) else 's')}"
