"""The ``mcm-tasks`` command. Each concern registers its own sub-app; this file only wires them."""

from __future__ import annotations

from pathlib import Path

import typer

from informers.cli import app as informer_app
from mcm_tasks.beat_cli import app as beat_app
from mcm_tasks.sandbox.cli import app as sandbox_app
from mcm_tasks.sandbox.cloud_cli import cloud_app, kubelet_command
from mcm_tasks.worker_cli import app as worker_app

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Gardener's MCM as Celery tasks on Redis.")
app.add_typer(informer_app)
app.add_typer(worker_app)
app.add_typer(beat_app)
app.add_typer(sandbox_app, name="sandbox", help="The embedded sandbox: API server, cloud, kubelets.")
sandbox_app.add_typer(cloud_app, name="cloud", help="The local cloud's VMs.")
sandbox_app.command("kubelet")(kubelet_command)


@sandbox_app.command("up")
def sandbox_up(
    dir: Path = typer.Option(..., "--dir", help="Folder for kubeconfigs, env, state and logs."),
    workers: int = typer.Option(2, help="Worker processes to start."),
    aws_endpoint: str = typer.Option("", help="Point the workers' boto3 at this EC2 endpoint (moto)."),
    beat: bool = typer.Option(True, help="Start Celery beat for the periodic jobs."),
    timeout: float = typer.Option(90.0, help="Seconds to wait for everything to be ready."),
) -> None:
    """Start Redis, API servers, kubelet simulator, informer, workers and beat in the background."""
    from mcm_tasks.sandbox.runner import up

    up(dir, workers=workers, aws_endpoint=aws_endpoint or None, with_beat=beat, timeout=timeout)


@sandbox_app.command("down")
def sandbox_down(dir: Path = typer.Option(..., "--dir", help="The folder given to `sandbox up`.")) -> None:
    """Stop everything `sandbox up` started."""
    from mcm_tasks.sandbox.runner import down

    down(dir)


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
