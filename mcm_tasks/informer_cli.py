"""``mcm-tasks informer``: list+watch both clusters, mirror into Redis, route events to the queues.

The command wires the informers package to the product's endpoints (``mcm_tasks.observability``), so it
lives on the product's side: the product's CLI is the one place that imports ``informers``."""

from __future__ import annotations

import logging
import signal
import socket
import threading
import uuid
from collections.abc import Callable
from types import FrameType

import typer

from mcm_tasks.cli_support import ALL_CLUSTERS, command_settings, log_level
from mcm_tasks.settings import Settings

app = typer.Typer(add_completion=False)
log = logging.getLogger("informers")


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    epilog="Example: mcm-tasks informer --namespace=shoot--dev--demo --control-kubeconfig=/etc/kubeconfig",
)
def informer(
    ctx: typer.Context,
    identity: str = typer.Option("", help="Leader-election identity (default: <hostname>_<uuid>)."),
    sink: str = typer.Option("queue", help="Where routed keys go: queue (Celery), list (a Redis list)."),
    loglevel: str = typer.Option("", help="Log level (default: from --v, info)."),
    beat: bool = typer.Option(
        False,
        "--beat/--no-beat",
        help="Also run beat (the safety jobs' schedule, its own Redis lock) in this process, "
        "instead of `mcm-tasks beat` pods.",
    ),
) -> None:
    """Mirror the control and target clusters into Redis and enqueue what changed. MCM flags
    (--namespace=…, --min-resync-period=…, --leader-elect=false …) follow."""
    settings = command_settings(ctx.args, clusters=ALL_CLUSTERS)
    from mcm_tasks.logs import setup_logging

    setup_logging(log_level(loglevel), settings.log_format)

    from informers.leader import LeaderElector
    from informers.runner import Informer
    from informers.sink import make_sink
    from informers.upstream import UpstreamLeases
    from mcm_tasks.kube.clients import build_clusters, check_control_cluster, leader_election_client
    from mcm_tasks.observability import serve
    from mcm_tasks.probes import LEADING, PROGRESS, standard_probes
    from mcm_tasks.redisdb import get_redis

    me = identity or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
    if settings.seed_mode:
        seed_informer(settings, me, sink, beat)
        return
    clusters = build_clusters(settings)
    check_control_cluster(clusters)
    serve(settings, standard_probes(settings), fleet=lambda: LEADING.get("informer", False))
    apis = {"control": clusters.control.api}
    if clusters.target is not None:
        apis["target"] = clusters.target.api
    client = get_redis(settings.redis_url, decode=False)
    runner = Informer(settings, apis, client, make_sink(sink, client), me)
    LEADING["informer"] = False

    def act(acting: threading.Event) -> None:
        """The informer leads (mcm_leader, /readyz, the fleet metrics) while this runs."""
        LEADING["informer"] = True
        try:
            runner.lead(acting)
        finally:
            LEADING["informer"] = False
            PROGRESS.forget("writer")  # a standby's writer does not turn

    stop = stop_on_signals()
    stop_beat = None
    if beat:
        from mcm_tasks.beat_cli import start_beat_thread

        stop_beat = start_beat_thread(settings, me)
    if settings.leader_elect:
        election_api = leader_election_client(settings)  # outside the shared budget, as upstream
        # holding our Lease, the informer also takes upstream's two, and acts only with both: a
        # Go MCM still running (a rolling swap) keeps every process of ours standing by
        upstream = UpstreamLeases(election_api, settings.namespace, me, client)
        # while this replica waits for our Lease it watches upstream's, so that it can take them
        # as soon as it leads after a failover
        threading.Thread(
            target=upstream.observe_until, args=(stop,), name="upstream-leases", daemon=True
        ).start()

        def lead(leading: threading.Event) -> None:
            upstream.run(act, leading)

        elector = LeaderElector(
            election_api,
            settings.namespace,
            me,
            settings.leader_elect_lease_duration,
            settings.leader_elect_renew_deadline,
            settings.leader_elect_retry_period,
        )
        elector.run(lead, stop)
        election_api.close()
    else:
        act(stop)
    if stop_beat is not None:
        stop_beat()  # releases the beat lock: a standby takes over at once
    clusters.close()


def seed_informer(settings: Settings, me: str, sink: str, beat: bool) -> None:
    """Seed mode (``--namespaces``/``--namespace-selector``): every informer replica runs a shard of
    the namespaces, each namespace with its own informer and target cluster (``informers/seed.py``),
    a namespace held by one replica at a time through a lease in Redis (``informers/shards_io.py``,
    with ``--leader-elect-lease-duration``); a replica that dies has its namespaces taken by the
    others within the lease and a renewal. Without ``--leader-elect`` this replica runs them all.
    Upstream's Leases are a per-shoot MCM's, in each shoot namespace: a seed installation does not
    take them (scale the shoots' MCMs down before serving their namespaces). The first of the live
    replicas exports the fleet-wide metrics."""
    from informers.seed import SeedInformer, everything
    from informers.shards_io import ShardKeeper
    from mcm_tasks.kube.clients import CONTROL, check_control_cluster, new_cluster
    from mcm_tasks.kube.clients import Clusters as ClientSet
    from mcm_tasks.observability import serve
    from mcm_tasks.probes import LEADING, standard_probes
    from mcm_tasks.redisdb import get_redis

    control = new_cluster(CONTROL, settings.control_kubeconfig, settings)
    check_control_cluster(ClientSet(control, None))
    serve(settings, standard_probes(settings), fleet=lambda: LEADING.get("informer", False))
    client = get_redis(settings.redis_url, decode=False)
    stop = stop_on_signals()
    keeper: ShardKeeper | None = None
    own: Callable[[set[str]], set[str]] = everything
    LEADING["informer"] = not settings.leader_elect
    if settings.leader_elect:
        keeper = ShardKeeper(
            client,
            settings.install_prefix,
            me,
            lease_seconds=settings.leader_elect_lease_duration,
            renew_every=min(settings.leader_elect_retry_period, settings.leader_elect_lease_duration / 2),
        )
        shards = keeper

        def sharded(wanted: set[str]) -> set[str]:
            owned = shards.tick(wanted).owned
            LEADING["informer"] = bool(shards.members) and shards.members[0] == me
            return set(owned)

        own = sharded

    seed = SeedInformer(settings, control.api, client, sink, me, own=own)
    stop_beat = None
    if beat:
        from mcm_tasks.beat_cli import start_beat_thread

        stop_beat = start_beat_thread(settings, me)
    try:
        seed.lead(stop)  # stops every namespace's informer on the way out
    finally:
        if keeper is not None:
            keeper.stop()  # the others take the namespaces on their next tick
        LEADING["informer"] = False
        if stop_beat is not None:
            stop_beat()
        control.close()


def stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT: the informer stops its watches and hands over."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop
