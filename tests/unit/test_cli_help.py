"""Every command's --help ends with an example of that very command, and `mcm-tasks --version`
prints the installed version: a newcomer copies a working line instead of guessing the syntax."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import version
from typing import Any

import typer
from typer.testing import CliRunner

from mcm_tasks.cli import app

runner = CliRunner()


def _commands(cmd: Any, path: list[str], parent: Any = None) -> Iterator[tuple[list[str], Any]]:
    """Every group and command under ``cmd``, the sandbox's plugin verbs included."""
    ctx = type(cmd).context_class(cmd, info_name=path[-1], parent=parent)
    yield path, cmd
    if hasattr(cmd, "list_commands"):
        for name in cmd.list_commands(ctx):
            yield from _commands(cmd.get_command(ctx, name), [*path, name], ctx)


def test_every_command_has_an_example_of_itself() -> None:
    commands = list(_commands(typer.main.get_command(app), ["mcm-tasks"]))
    assert len(commands) > 25, [" ".join(p) for p, _ in commands]
    missing = []
    for path, _cmd in commands:
        result = runner.invoke(app, [*path[1:], "--help"], terminal_width=200)
        assert result.exit_code == 0, (path, result.output)
        lines = [line.strip() for line in result.output.splitlines()]
        examples = [line for line in lines if line.startswith("Example:")]
        if not examples or not examples[0].removeprefix("Example: ").startswith(" ".join(path)):
            missing.append(" ".join(path))
    assert not missing, f"no example of itself in --help: {missing}"


def test_version_prints_the_installed_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"mcm-tasks {version('mcm-tasks')}"


def test_version_from_the_installed_command() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "mcm_tasks.cli", "--version"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("mcm-tasks ")
