"""The ``mcm-tasks`` command. Each concern registers its own sub-app; this file only wires them.

A command line that names a sub-command of ours (``mcm-tasks worker …``) gets that sub-command's
app alone: a worker pod or an informer runs for days holding what it imported, and the others'
modules (the admin CLI's tables, beat's scheduler, the informers, the sandbox's plugin verbs) were
~4 MB of every such process (issue 28; see ``mcm_tasks/import_weight.py``). Anything else (no
arguments, ``--help``, ``--version``, ``crds``, a plugin's verb) gets every sub-command, as does
``app`` imported from here (the tests' ``CliRunner``).
"""

from __future__ import annotations

import importlib
import sys
from functools import cache
from importlib.metadata import PackageNotFoundError, entry_points, version
from typing import Any, Final

import typer

#: a sub-command's first word → (module, its Typer app's name, the name it is mounted under:
#: None merges the app's own commands into the root)
SUBCOMMANDS: Final[dict[str, tuple[str, str, str | None]]] = {
    "worker": ("mcm_tasks.worker_cli", "app", None),
    "admin": ("mcm_tasks.admin.cli", "admin_app", "admin"),
    "informer": ("mcm_tasks.informer_cli", "app", None),
    "beat": ("mcm_tasks.beat_cli", "app", None),
}


def package_version() -> str:
    """The installed distribution's version (pyproject.toml), which the image and the chart's
    appVersion carry too; a source tree run without installing says so rather than guessing."""
    try:
        return version("mcm-tasks")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"mcm-tasks {package_version()}")
        raise typer.Exit()


def root(
    show_version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Gardener's MCM as Celery tasks on Redis."""


def crds(
    out: str = typer.Option("", help="Write one YAML file per CRD into this folder instead of stdout."),
) -> None:
    """Print the CustomResourceDefinitions generated from the API models."""
    from mcm_tasks.api.crds import crds_command

    crds_command(out)


def _mount(root_app: typer.Typer, word: str) -> None:
    module, attribute, name = SUBCOMMANDS[word]
    sub = getattr(importlib.import_module(module), attribute)
    if name is None:
        root_app.add_typer(sub)
    else:
        root_app.add_typer(sub, name=name)


def _add_plugins(root_app: typer.Typer) -> None:
    """Sub-apps other distributions register under the ``mcm_tasks.cli`` entry-point group (the
    sandbox's ``mcm-tasks sandbox …``). Found at run time, so the product never imports them; a
    plugin whose own dependencies are not installed is left out."""
    for entry in entry_points(group="mcm_tasks.cli"):
        try:
            sub = entry.load()
        except ImportError:
            continue
        root_app.add_typer(sub, name=entry.name, help=(sub.info.help or None))


def build_app(word: str | None = None) -> typer.Typer:
    """The command with the sub-command ``word`` alone (one of ``SUBCOMMANDS``), or with all."""
    root_app = typer.Typer(
        no_args_is_help=True,
        add_completion=False,
        help="Gardener's MCM as Celery tasks on Redis.",
        epilog="Example: mcm-tasks worker --queues machine,machine-termination --machine-drain-timeout=1h",
    )
    root_app.callback()(root)
    for each in [word] if word in SUBCOMMANDS else list(SUBCOMMANDS):
        _mount(root_app, each)
    if word not in SUBCOMMANDS:
        _add_plugins(root_app)
        root_app.command(epilog="Example: mcm-tasks crds | kubectl apply -f -")(crds)
    return root_app


@cache
def _whole() -> typer.Typer:
    return build_app()


def __getattr__(name: str) -> Any:
    if name == "app":  # every sub-command: what ``from mcm_tasks.cli import app`` gets
        return _whole()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    from mcm_tasks.memory import limit_arenas

    limit_arenas()  # before any command starts its threads (mcm_tasks/memory.py)
    build_app(sys.argv[1] if len(sys.argv) > 1 else None)()


if __name__ == "__main__":
    main()
