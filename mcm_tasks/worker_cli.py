"""``mcm-tasks worker``: a Celery worker on the reconcile queues. It imports neither the admin CLI
nor the other commands (``mcm_tasks.cli`` mounts each one only for its own command line)."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile

import typer

from mcm_tasks.cli_support import GIVEN_CLUSTERS, command_settings, log_level
from mcm_tasks.kinds import QUEUES
from mcm_tasks.observability import MULTIPROC_ENV, serve
from mcm_tasks.probes import standard_probes
from mcm_tasks.settings import Settings, get_settings

app = typer.Typer(add_completion=False)


def queue_names(spec: str) -> list[str]:
    """Kinds (``machine,node``) to queue names; anything that is not a kind is taken as a queue name."""
    settings = get_settings()
    items = [item.strip() for item in spec.split(",") if item.strip()] or list(QUEUES)
    names = [settings.queue_name(item) if item in QUEUES else item for item in items]
    if settings.seed_mode:  # and every served namespace's queues of those kinds (seed_queues.py)
        from mcm_tasks.seed_queues import served_queues

        names += served_queues(settings, [item for item in items if item in QUEUES])
    return names


#: seconds between a worker's event heartbeats (Celery's default: 2)
EVENT_HEARTBEAT_INTERVAL = 10.0


def event_heartbeat_interval(settings: Settings) -> float:
    """Celery's ``--heartbeat-interval``: ``EVENT_HEARTBEAT_INTERVAL``, at most a quarter of
    ``--liveness-timeout`` (/healthz counts the heartbeats as the consumer's progress). Flower and
    Celery's event state take a worker for offline when no heartbeat came for twice the interval
    each heartbeat announces (``freq``), so Flower still shows a live worker online; a SIGKILLed
    one goes offline after 20 s instead of 4 (a stopped one at once: its ``worker-offline``). An
    idle worker published a heartbeat every 2 s: a Redis command, and a wake-up of every Flower."""
    return min(EVENT_HEARTBEAT_INTERVAL, settings.liveness_timeout / 4)


def worker_argv(
    queues: list[str],
    concurrency: int,
    hostname: str,
    loglevel: str,
    log_format: str = "text",
    pool: str = "prefork",
    heartbeat: float = EVENT_HEARTBEAT_INTERVAL,
) -> list[str]:
    """Celery's command line; with JSON logs, without the start-up banner (plain text on stdout)."""
    quiet = ["--quiet"] if log_format == "json" else []  # a global option: before the sub-command
    return [
        *quiet,
        "worker",
        "--queues",
        ",".join(queues),
        "--pool",
        pool,
        "--concurrency",
        str(concurrency),
        "--hostname",
        hostname,
        "--loglevel",
        loglevel,
        "--without-mingle",
        "--without-gossip",
        "--task-events",
        "--heartbeat-interval",
        f"{heartbeat:g}",
    ]


#: set by the re-exec: the multiprocess directory was made for this worker alone
_OWNED_METRICS_DIR = "MCM_WORKER_OWNS_METRICS_DIR"


def _ensure_multiprocess_metrics() -> None:
    """Pool processes record metrics into files the main process serves (prometheus_client's
    multiprocess mode). prometheus_client picks its value store when first imported, which the CLI
    has done by now, so a worker started without the directory re-executes itself once with it."""
    owned = os.environ.get(_OWNED_METRICS_DIR)
    if owned and owned == os.environ.get(MULTIPROC_ENV):
        # the directory is this worker's own: nobody reads it once the worker is gone
        atexit.register(shutil.rmtree, owned, ignore_errors=True)
        return
    if os.environ.get(MULTIPROC_ENV) or sys.argv[1:2] != ["worker"]:
        return
    directory = tempfile.mkdtemp(prefix="mcm-worker-metrics-")
    os.environ[MULTIPROC_ENV] = os.environ[_OWNED_METRICS_DIR] = directory
    os.execv(sys.executable, [sys.executable, "-m", "mcm_tasks.cli", *sys.argv[1:]])


def prepare_worker(flags: list[str], reconcilers: str = "") -> Settings:
    """Settings from MCM flags, applied to the Celery app before it starts (pool processes fork
    from this process, so they inherit both)."""
    settings = command_settings(flags, clusters=GIVEN_CLUSTERS)
    if reconcilers:
        os.environ["MCM_RECONCILER_MODULES"] = reconcilers
    from mcm_tasks.celery_app import apply_settings

    apply_settings(settings)
    return settings


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    epilog="Example: mcm-tasks worker --queues machine,machine-termination --concurrency 4",
)
def worker(
    ctx: typer.Context,
    queues: str = typer.Option("", help="Kinds to consume, comma-separated (default: all queues)."),
    concurrency: int = typer.Option(0, help="Pool processes (default: the worker-concurrency setting)."),
    hostname: str = typer.Option("", help="Celery node name (default: mcm-<pid>@<host>)."),
    loglevel: str = typer.Option("", help="Celery log level (default: from --v, info)."),
    reconcilers: str = typer.Option("", help="Reconciler modules to load (sets MCM_RECONCILER_MODULES)."),
) -> None:
    """Run a Celery worker on the reconcile queues. MCM flags (--reconcile-lock-ttl=30s …) follow;
    /metrics, /healthz and /configz are served on --port."""
    _ensure_multiprocess_metrics()
    settings = prepare_worker(ctx.args, reconcilers)
    from mcm_tasks.celery_app import app as celery

    serve(settings, standard_probes(settings))
    name = hostname or f"mcm-{os.getpid()}@%h"
    celery.worker_main(
        worker_argv(
            queue_names(queues),
            concurrency or settings.worker_concurrency,
            name,
            log_level(loglevel),
            settings.log_format,
            settings.worker_pool,
            event_heartbeat_interval(settings),
        )
    )


if __name__ == "__main__":  # the whole command, as ``python -m mcm_tasks.cli``
    from mcm_tasks.cli import main

    main()
