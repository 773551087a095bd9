"""``make demo``: the whole lifecycle on the embedded sandbox, in about a minute.

Starts the sandbox (Redis, control and target API servers, kubelet simulator, informer, workers,
beat), saying what starts and how long it took; then drives a MachineDeployment the way an SRE
would: create 3 machines, scale to 5, roll to a new MachineClass, scale to 2, delete. While each
step runs, a live view shows the machines by phase per MachineSet; every step waits with a bounded
poll on what the clusters and the local cloud show. It ends with a summary and what to try next.
Exits 0 when done; ``--keep`` leaves the sandbox running to explore. ``--shoots N`` (``make demo
SHOOTS=N``) runs the demo in seed mode instead: one installation serving N shoot namespaces
(``mcm_sandbox/seed_demo.py``).
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.live import Live

from mcm_sandbox.fleet import Fleet, machine_class, machine_deployment

console = Console()
NS = "default"
NAME = "demo"

#: compressed time: the demo must not wait minutes for anything
DEMO_ENV = {
    "MCM_SHORT_RETRY": "1s",
    "MCM_MEDIUM_RETRY": "3s",
    "MCM_LONG_RETRY": "10s",
    "MCM_HEALTH_RECHECK_PERIOD": "1s",
    "MCM_MACHINE_CREATION_TIMEOUT": "2m",
    "MCM_MACHINE_HEALTH_TIMEOUT": "1m",
    "MCM_MACHINE_DRAIN_TIMEOUT": "30s",
    "MCM_POD_EVICTION_RETRY_INTERVAL": "1s",
    "MCM_MIN_RESYNC_PERIOD": "5m",
    "MCM_KUBELET_HEARTBEAT_INTERVAL": "5",
}


class Demo:
    def __init__(self, directory: Path, redis_url: str) -> None:
        self.dir = directory
        self.redis_url = redis_url
        self.fleet = Fleet(directory / "kubeconfig", directory / "target-kubeconfig", NS)
        self.timings: list[tuple[str, float]] = []

    def vms(self) -> list[Any]:
        """VMs of the local cloud that are not terminating or gone."""
        from mcm_tasks.redisdb import get_redis
        from providers.local.cloud import LocalCloud

        return [vm for vm in LocalCloud(get_redis(self.redis_url)).all() if vm.live()]

    def step(self, title: str, action: Callable[[], None], done: Callable[[], bool], timeout: float) -> None:
        """Run the action, then refresh the fleet view until ``done`` (bounded by ``timeout``)."""
        console.rule(f"[bold]{title}")
        start = time.monotonic()
        action()
        deadline = start + timeout
        # the rule above names the step; the table's title says how long it has run
        with Live(self.fleet.view("0s"), console=console, refresh_per_second=4) as live:
            while not done():
                if time.monotonic() > deadline:
                    live.update(self.fleet.view(f"timed out after {timeout:.0f}s"))
                    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for: {title}")
                time.sleep(0.5)
                live.update(self.fleet.view(f"{time.monotonic() - start:.0f}s"))
            took = time.monotonic() - start
            live.update(self.fleet.view(f"done in {took:.1f}s"))
        console.print(f"VMs in the local cloud: {len(self.vms())}")
        self.timings.append((title, took))

    def run(self) -> None:
        fleet = self.fleet
        fleet.create_secret("demo-secret")
        for name, itype in (("demo-small", "local.small"), ("demo-large", "local.large")):
            fleet.create("machineclasses", machine_class(name, itype, NS, "demo-secret"))

        def create() -> None:
            fleet.create("machinedeployments", machine_deployment(NAME, NS, 3, "demo-small"))

        self.step("create a MachineDeployment of 3", create, fleet.running(3), 120)
        self.step("scale to 5", lambda: fleet.scale(NAME, 5), fleet.running(5), 120)
        self.step(
            "roll out to MachineClass demo-large (maxSurge 1, maxUnavailable 0)",
            lambda: fleet.set_class(NAME, "demo-large"),
            fleet.running(5, "demo-large"),
            240,
        )
        self.step("scale to 2", lambda: fleet.scale(NAME, 2), fleet.running(2, "demo-large"), 120)

        def all_gone() -> bool:
            return not fleet.machines() and not fleet.nodes() and not self.vms()

        self.step("delete the MachineDeployment", lambda: fleet.delete(NAME), all_gone, 120)


def summary(directory: Path, timings: list[tuple[str, float]], started_in: float, keep: bool) -> None:
    """What happened, and what to try next."""
    console.rule("[bold]summary")
    console.print(f"sandbox started in {started_in:.1f}s")
    for title, took in timings:
        console.print(f"  {took:6.1f}s  {title}")
    if keep:
        env = directory / "env"
        console.print(
            "\n[bold]next steps[/bold] (the sandbox is still running)\n"
            f"  source {env}                      # KUBECONFIG, MCM_REDIS_URL, MCM_*_KUBECONFIG\n"
            "  kubectl get mcd,mcs,mc,mcc                 # machine objects (control cluster)\n"
            f"  kubectl --kubeconfig {directory}/target-kubeconfig get nodes   # nodes (target cluster)\n"
            "  ls tests/manifests/                        # example MachineClass/Set/Deployment manifests\n"
            "  mcm-tasks admin queues                     # queue depths; admin failing: failing keys\n"
            "  celery -A mcm_tasks.celery_app flower      # Flower on http://localhost:5555\n"
            f"  mcm-tasks sandbox down --dir {directory}   # stop it"
        )
    else:
        console.print(
            "\n[bold]next steps[/bold]\n"
            "  make demo KEEP=1   # the same, leaving the sandbox running to explore\n"
            "                     # with kubectl, Flower and the admin CLI\n"
            "  make docs-serve    # the docs: install on a cluster (Helm) or one host (compose)"
        )


def stop_sandbox_on_signals(directory: Path, keep: bool) -> None:
    """Ctrl-C, a closed terminal or a kill stop the sandbox too (unless --keep), not only the demo.
    Done in the handler itself: an exception raised from a handler can land in a ``__del__``, where
    Python ignores it, and the demo would run on."""
    from mcm_sandbox.runner import down

    def handler(signum: int, _frame: object) -> None:
        console.print(f"\n[bold red]stopped by signal {signum}")
        if not keep:
            down(directory, echo=console.print)
        os._exit(128 + signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)


def main(
    keep: bool = typer.Option(False, "--keep", help="Leave the sandbox running afterwards."),
    dir: Path = typer.Option(None, "--dir", help="Sandbox folder (default: a new temporary one)."),
    workers: int = typer.Option(2, help="Worker processes."),
    shoots: int = typer.Option(
        0, "--shoots", min=0, help="Seed mode: one installation serving this many shoot namespaces (0: off)."
    ),
) -> None:
    directory = (dir or Path(tempfile.mkdtemp(prefix="mcm-demo-"))).resolve()
    if shoots > 0:  # the demo in seed mode (mcm_sandbox/seed_demo.py)
        from mcm_sandbox import seed_demo

        sys.exit(0 if seed_demo.run(shoots, directory, workers, keep, DEMO_ENV, console) else 1)
    stop_sandbox_on_signals(directory, keep)
    for key, value in DEMO_ENV.items():
        os.environ.setdefault(key, value)
    from mcm_sandbox.runner import down, up

    console.rule("[bold]mcm-tasks demo")
    console.print(f"starting the sandbox in {directory}")
    start = time.monotonic()
    with console.status("starting Redis, 2 API servers, the kubelet simulator, informer, workers, beat…"):
        sandbox = up(directory, workers=workers, echo=console.print)
    started_in = time.monotonic() - start
    ok = False
    timings: list[tuple[str, float]] = []
    try:
        demo = Demo(directory, sandbox.redis_url)
        timings = demo.timings
        try:
            demo.run()
            ok = True
        finally:
            demo.fleet.close()
    finally:
        if not keep:
            down(directory, echo=console.print)
    summary(directory, timings, started_in, keep)
    console.rule("[bold green]demo finished" if ok else "[bold red]demo failed")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    typer.run(main)
