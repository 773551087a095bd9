"""The ``mcm-tasks`` command. Each concern registers its own sub-app; this file only wires them."""

from __future__ import annotations

from importlib.metadata import entry_points

import typer

from mcm_tasks.beat_cli import app as beat_app
from mcm_tasks.informer_cli import app as informer_app
from mcm_tasks.worker_cli import app as worker_app

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Gardener's MCM as Celery tasks on Redis.")
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


@app.command()
def crds(
    out: str = typer.Option("", help="Write one YAML file per CRD into this folder instead of stdout."),
) -> None:
    """Print the CustomResourceDefinitions generated from the API models."""
    from mcm_tasks.api.crds import crds_command

    crds_command(out)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
