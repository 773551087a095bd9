"""``mcm-tasks sandbox cloud ls`` and ``mcm-tasks sandbox kubelet``: the local cloud seen from a
shell, and the process that plays the kubelets of its VMs (and, given an EC2 endpoint such as a
moto server, of the instances running there)."""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from datetime import UTC, datetime
from typing import Any

import typer

cloud_app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="The local cloud's VMs (kept in Redis).",
    epilog="Example: mcm-tasks sandbox cloud ls --json",
)


#: seconds a stopping kubelet simulator gives its rounds and watches before it exits anyway
STOP_GRACE = 5.0


@cloud_app.callback()
def _cloud_group() -> None:
    """The local cloud's VMs (kept in Redis); a group even with one verb, so ``cloud ls`` stays ``ls``."""


REDIS_URL_HELP = "Redis holding the local cloud (default: MCM_REDIS_URL)."


def _cloud(redis_url: str) -> Any:
    from mcm_tasks.redisdb import get_redis  # imported here: keeps CLI start-up light
    from providers.local.cloud import LocalCloud

    return LocalCloud(get_redis(redis_url or None))


def _stamp(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def vm_rows(vms: list[Any], now: float) -> list[dict[str, Any]]:
    return [
        {
            "id": vm.id,
            "providerID": vm.provider_id,
            "machine": vm.machine,
            "class": vm.machine_class,
            "zone": vm.zone,
            "state": vm.state(now).value,
            "created": _stamp(vm.created),
            "neverJoin": vm.never_join,
            "internalIP": vm.internal_ip,
        }
        for vm in vms
    ]


@cloud_app.command("ls", epilog="Example: mcm-tasks sandbox cloud ls --redis-url redis://127.0.0.1:6379/0")
def ls(
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list instead of a table."),
    redis_url: str = typer.Option("", help=REDIS_URL_HELP),
) -> None:
    """List the local cloud's VMs, terminating ones included."""
    cloud = _cloud(redis_url)
    rows = vm_rows(cloud.all(), cloud.clock())
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    columns = ("id", "providerID", "machine", "class", "zone", "state", "created")
    for col in columns:
        table.add_column(col.upper())
    for row in rows:
        table.add_row(*(str(row[c]) for c in columns))
    Console(width=200).print(table)


def kubelet_command(
    target_kubeconfig: str = typer.Option(
        "",
        help="Kubeconfig of the target cluster (Nodes, Pods); with --cluster or --clusters-dir, the "
        "cluster of the VMs whose namespace has none of its own.",
    ),
    cluster: list[str] = typer.Option(
        [],
        help="NAMESPACE=KUBECONFIG: the VMs of that namespace's Machines are nodes of that cluster "
        "(repeatable; seed mode, one target cluster per shoot namespace).",
    ),
    clusters_dir: str = typer.Option(
        "",
        help="A folder of NAMESPACE.kubeconfig files (as `sandbox apiserver` writes its virtual "
        "clusters'), followed while running: a file added or removed adds or stops that cluster.",
    ),
    redis_url: str = typer.Option("", help=REDIS_URL_HELP),
    interval: float = typer.Option(0.5, envvar="MCM_KUBELET_INTERVAL", help="Seconds between ticks."),
    heartbeat_interval: float = typer.Option(
        10.0, envvar="MCM_KUBELET_HEARTBEAT_INTERVAL", help="Seconds between node heartbeats."
    ),
    node_grace: float = typer.Option(
        40.0, envvar="MCM_KUBELET_NODE_GRACE", help="Seconds without heartbeat before a node goes Unknown."
    ),
    detach_delay: float = typer.Option(
        1.0, envvar="MCM_KUBELET_DETACH_DELAY", help="Seconds an unused volume stays attached."
    ),
    max_actions: int = typer.Option(200, envvar="MCM_KUBELET_MAX_ACTIONS", help="Writes per tick at most."),
    aws_endpoint: str = typer.Option(
        "",
        envvar="MCM_AWS_ENDPOINT_URL",
        help="Also play the kubelets of the EC2 instances at this endpoint (a moto server); "
        "default: the workers' MCM_AWS_ENDPOINT_URL.",
    ),
    aws_region: list[str] = typer.Option(
        [],
        envvar="MCM_KUBELET_AWS_REGIONS",
        help="EC2 region to read (repeatable); default: every region the endpoint reports.",
    ),
    aws_region_rescan: float = typer.Option(
        10.0,
        envvar="MCM_KUBELET_AWS_REGION_RESCAN",
        help="Without --aws-region: seconds between scans of all regions for new instances.",
    ),
) -> None:
    """Play the kubelets of the local cloud's VMs, and of the EC2 instances at --aws-endpoint,
    against the target cluster, or against each namespace's own (see mcm_sandbox/kubelet/simulator.py
    for what it does and the Node annotations it obeys, mcm_sandbox/kubelet/clusters.py for several
    clusters)."""
    from pathlib import Path

    from kubernetes import config

    from mcm_sandbox.kubelet.clusters import DEFAULT, MultiClusterKubelet
    from mcm_sandbox.kubelet.sources import CombinedSource, LocalSource, VMSource

    pairs: list[tuple[str, Path]] = []
    for item in cluster:
        namespace, sep, file = item.partition("=")
        if not sep or not namespace or not file:
            raise typer.BadParameter(f"--cluster {item!r}: expected NAMESPACE=KUBECONFIG")
        pairs.append((namespace, Path(file)))
    if not (target_kubeconfig or pairs or clusters_dir):
        raise typer.BadParameter("give --target-kubeconfig, --cluster or --clusters-dir")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cloud = _cloud(redis_url)
    sources: list[VMSource] = [LocalSource(cloud)]
    if aws_endpoint:
        from mcm_sandbox.kubelet.aws import AwsSettings, AwsSource

        settings = AwsSettings(aws_endpoint, regions=tuple(aws_region), rescan=aws_region_rescan)
        sources.append(AwsSource(settings, cloud.r))
    kubelets = MultiClusterKubelet(
        CombinedSource(sources),
        lambda path: config.new_client_from_config(config_file=str(path)),
        watch=True,  # a real kubelet watches too; a list per tick costs O(nodes)
        sim_options={
            "heartbeat_interval": heartbeat_interval,
            "node_grace": node_grace,
            "detach_delay": detach_delay,
            "max_actions": max_actions,
        },
    )
    if target_kubeconfig:
        kubelets.add(DEFAULT, Path(target_kubeconfig))
    for namespace, path in pairs:
        kubelets.add(namespace, path)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    logging.getLogger(__name__).info(
        "kubelet simulator started (tick %.2fs%s)",
        interval,
        f", EC2 at {aws_endpoint}" if aws_endpoint else "",
    )
    # The rounds run in a daemon thread so that a stop is served within STOP_GRACE even when a round
    # is blocked on a slow cloud or API server (a loaded host): the main thread closes what it can in
    # that time and exits 0, as a process told to stop should, instead of being SIGKILLed.
    failed: list[BaseException] = []

    def rounds_until_stop() -> None:
        try:
            kubelets.run(stop, interval, Path(clusters_dir) if clusters_dir else None)
        except BaseException as err:  # raised again below: the process fails as it did in one thread
            failed.append(err)

    rounds = threading.Thread(target=rounds_until_stop, name="kubelet-rounds", daemon=True)
    rounds.start()
    while not stop.wait(1.0) and rounds.is_alive():
        pass
    deadline = time.monotonic() + STOP_GRACE
    rounds.join(max(deadline - time.monotonic(), 0.0))
    kubelets.close(deadline)
    if failed:
        raise failed[0]
    logging.getLogger(__name__).info("kubelet simulator stopped")
