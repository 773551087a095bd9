"""The ``mcm-tasks`` command. Each concern registers its own sub-app; this file only wires them."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, entry_points, version

import typer

from mcm_tasks.beat_cli import app as beat_app
from mcm_tasks.informer_cli import app as informer_app
from mcm_tasks.worker_cli import app as worker_app

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="Gardener's MCM as Celery tasks on Redis.",
    epilog="Example: mcm-tasks worker --queues machine,machine-termination --machine-drain-timeout=1h",
)


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


@app.callback()
def root(
    show_version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Gardener's MCM as Celery tasks on Redis."""


app.add_typer(informer_app)
app.add_typer(worker_app)
app.add_typer(beat_app)


def _add_plugins() -> None:
    """Sub-apps other distributions register under the ``mcm_tasks.cli`` entry-point group (the
    sandbox's ``mcm-tasks sandbox …``). Found at run time, so the product never imports them; a
    plugin whose own dependencies are not installed is left out."""
    for entry in entry_points(group="mcm_tasks.cli"):
        try:
            sub = entry.load()
        except ImportError:
            continue
        app.add_typer(sub, name=entry.name, help=(sub.info.help or None))


_add_plugins()


@app.command(epilog="Example: mcm-tasks crds | kubectl apply -f -")
def crds(
    out: str = typer.Option("", help="Write one YAML file per CRD into this folder instead of stdout."),
) -> None:
    """Print the CustomResourceDefinitions generated from the API models."""
    from mcm_tasks.api.crds import crds_command

    crds_command(out)


def main() -> None:
    from mcm_tasks.memory import limit_arenas

    limit_arenas()  # before any command starts its threads (mcm_tasks/memory.py)
    app()


if __name__ == "__main__":
    main()
