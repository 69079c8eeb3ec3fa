"""Every command's help works: --help and -h exit 0 and show the defaults; --version prints the version."""

import subprocess
import sys

import click
import pytest
import typer
from typer.testing import CliRunner

from dataset_builder.cli import app as dataset_app
from harness.cli import app as harness_app
from leaderboard.cli import app as leaderboard_app

APPS = {"cood-harness": harness_app, "cood-dataset": dataset_app, "cood-leaderboard": leaderboard_app}
MODULES = {"cood-harness": "harness.cli", "cood-dataset": "dataset_builder.cli", "cood-leaderboard": "leaderboard.cli"}


def commands():
    for prog, app in APPS.items():
        group = typer.main.get_command(app)
        yield prog, app, []
        for name in group.list_commands(click.Context(group)):
            yield prog, app, [name]


@pytest.mark.parametrize("prog,app,path", list(commands()), ids=lambda v: " ".join(v) if isinstance(v, list) else None)
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_every_help_exits_0_with_its_defaults(prog, app, path, flag):
    done = CliRunner().invoke(app, [*path, flag], prog_name=prog)
    assert done.exit_code == 0, done.output
    assert done.output.startswith(f"Usage: {prog} {' '.join(path)}".rstrip())
    assert "--no-no-" not in done.output
    if path:  # a subcommand: every option with a default shows it
        group = typer.main.get_command(app)
        command = group.get_command(click.Context(group), path[0])
        shown = [
            p
            for p in command.params
            if p.show_default is not False
            and not getattr(p, "is_eager", False)
            and not (getattr(p, "is_flag", False) and not p.secondary_opts)  # a lone flag is off unless given
            and (isinstance(p.show_default, str) or p.default not in (None, [], (), ""))
        ]
        assert " ".join(done.output.split()).count("default: ") == len(shown), [p.name for p in shown]


def test_help_text_with_brackets_prints_as_written():
    done = CliRunner().invoke(harness_app, ["submit", "--help"], prog_name="cood-harness")
    assert "NAME:KEY=VALUE[,KEY=VALUE]" in done.output
    assert "[default: (softmax entropy max_logit energy, then the submission's own)]" in " ".join(done.output.split())


@pytest.mark.parametrize("prog", list(MODULES))
def test_version_and_help_through_the_real_entry_point(prog):
    from importlib.metadata import version

    def run(*args):
        return subprocess.run(
            [sys.executable, "-c", f"from {MODULES[prog]} import main; main()", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )

    done = run("--version")
    assert done.returncode == 0 and done.stdout == f"{prog} {version('cood-bench')}\n"
    for args in (["-h"], ["submit", "--help"] if prog == "cood-harness" else ["-h"]):
        done = run(*args)
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""


@pytest.mark.parametrize("prog", list(MODULES))
def test_every_help_imports_no_torch(prog):
    """Every command's help, in one process of the real entry point, answers without importing torch."""
    paths = [path for p, _, path in commands() if p == prog]
    script = (
        f"import sys\nfrom {MODULES[prog]} import main\n"
        f"for path in {paths!r}:\n"
        "    sys.argv = ['prog', *path, '--help']\n"
        "    try:\n"
        "        main()\n"
        "    except SystemExit as exc:\n"
        "        assert exc.code == 0, (path, exc.code)\n"
        "print('torch imported:', 'torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.count("Usage: ") == len(paths)
    assert done.stdout.splitlines()[-1] == "torch imported: False"
