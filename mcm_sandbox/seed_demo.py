"""``make demo SHOOTS=N``: the demo in seed mode (issue 33). One mcm-tasks installation (informer with
beat, workers, Redis) serves N shoot namespaces of a sandbox seed (``mcm_sandbox/seed.py``: one API
server whose virtual clusters are the shoots, one kubelet simulator for all of them).

Each shoot gets a MachineClass and a MachineDeployment of 2; then one shoot scales to 5 while the
others stay as they are; then (unless ``--keep``) every MachineDeployment is deleted. A live view
shows the machines by phase per namespace and each shoot's Nodes; every step waits with a bounded
poll. It ends with a summary and how to look at the seed: its kubeconfigs, the admin CLI, Flower.
The seed's processes are children of the demo: without ``--keep`` they stop when it ends, with
``--keep`` the demo stays in the foreground until Ctrl-C (or a kill) and then stops them.
"""

from __future__ import annotations

import os
import shlex
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.table import Table

from mcm_sandbox.fleet import PHASES, Fleet, machine_class, machine_deployment, phase_of
from mcm_sandbox.seed import SHOOT_LABEL, Seed

NAME = "demo"
CLASS = "demo-small"
SECRET = "demo-secret"
#: what the first step creates in every shoot, and what the busy shoot scales to
REPLICAS, SCALED = 2, 5


def shoot_names(count: int) -> list[str]:
    return [f"shoot-{i}" for i in range(1, count + 1)]


def seed_table(title: str, fleets: dict[str, Fleet]) -> Table:
    """Machines by phase per shoot namespace, and the Nodes of each shoot's cluster."""
    table = Table(title=title, title_justify="left")
    rows = []
    for shoot, fleet in fleets.items():
        machines = fleet.machines()
        desired = sum(int(s.get("spec", {}).get("replicas") or 0) for s in fleet.machine_sets())
        rows.append((shoot, desired, Counter(phase_of(m) for m in machines), len(fleet.nodes())))
    columns = [p for p in PHASES if any(c[p] for _, _, c, _ in rows)] or ["Running"]
    others = [p for p in {p for _, _, c, _ in rows for p in c} if p not in columns]
    for name in ("namespace", "desired", *columns, *(["other"] if others else []), "nodes"):
        table.add_column(name, justify="left" if name == "namespace" else "right")
    for shoot, desired, counts, nodes in rows:
        other = [str(sum(counts[p] for p in others) or "")] if others else []
        table.add_row(shoot, str(desired), *(str(counts[p] or "") for p in columns), *other, str(nodes))
    total = sum(sum(c.values()) for _, _, c, _ in rows)
    table.caption = f"{total} machines, {len(rows)} shoots"
    return table


class SeedDemo:
    def __init__(self, seed: Seed, console: Console) -> None:
        self.seed, self.console = seed, console
        self.fleets = {s: Fleet(seed.kubeconfig, seed.shoot_kubeconfig(s), s) for s in seed.shoots}
        self.timings: list[tuple[str, float]] = []

    def close(self) -> None:
        for fleet in self.fleets.values():
            fleet.close()

    def step(self, title: str, action: Callable[[], None], done: Callable[[], bool], timeout: float) -> None:
        """Run the action, then refresh the seed view until ``done`` (bounded by ``timeout``)."""
        self.console.rule(f"[bold]{title}")
        start = time.monotonic()
        action()
        deadline = start + timeout
        with Live(seed_table("0s", self.fleets), console=self.console, refresh_per_second=4) as live:
            while not done():
                if time.monotonic() > deadline:
                    live.update(seed_table(f"timed out after {timeout:.0f}s", self.fleets))
                    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for: {title}")
                time.sleep(0.5)
                live.update(seed_table(f"{time.monotonic() - start:.0f}s", self.fleets))
            took = time.monotonic() - start
            live.update(seed_table(f"done in {took:.1f}s", self.fleets))
        self.timings.append((title, took))

    def all_running(self, counts: dict[str, int]) -> Callable[[], bool]:
        checks = [self.fleets[s].running(n) for s, n in counts.items()]
        return lambda: all(check() for check in checks)

    def run(self, keep: bool) -> None:
        shoots = list(self.fleets)

        def create() -> None:
            for fleet in self.fleets.values():
                fleet.create_secret(SECRET)
                fleet.create("machineclasses", machine_class(CLASS, "local.small", fleet.namespace, SECRET))
                fleet.create("machinedeployments", machine_deployment(NAME, fleet.namespace, REPLICAS, CLASS))

        wanted = dict.fromkeys(shoots, REPLICAS)
        self.step(
            f"a MachineDeployment of {REPLICAS} in each of {len(shoots)} shoots",
            create,
            self.all_running(wanted),
            180,
        )
        busy = shoots[0]
        wanted[busy] = SCALED
        self.step(
            f"scale {busy} to {SCALED}; the other shoots stay as they are",
            lambda: self.fleets[busy].scale(NAME, SCALED),
            self.all_running(wanted),
            120,
        )
        if keep:
            return

        def delete() -> None:
            for fleet in self.fleets.values():
                fleet.delete(NAME)

        def all_gone() -> bool:
            return all(not f.machines() and not f.nodes() for f in self.fleets.values())

        self.step("delete every shoot's MachineDeployment", delete, all_gone, 180)


def write_env(seed: Seed) -> Path:
    """``source``-able settings to reach the seed: kubectl at the control cluster, the admin CLI and
    Flower at its Redis and namespaces."""
    env = {
        "KUBECONFIG": str(seed.kubeconfig),
        "MCM_REDIS_URL": seed.redis_url,
        "MCM_CONTROL_KUBECONFIG": str(seed.kubeconfig),
        "MCM_NAMESPACE": "mcm-seed",
        "MCM_NAMESPACE_SELECTOR": f"{SHOOT_LABEL}=true",
    }
    path = seed.dir / "env"
    path.write_text("".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items()))
    return path


def how_to_look(seed: Seed, console: Console, keep: bool) -> None:
    if not keep:
        console.print(
            "\n[bold]next steps[/bold]\n"
            f"  make demo SHOOTS={len(seed.shoots)} KEEP=1   # the same, leaving the seed running\n"
            "                          # to look at with kubectl, the admin CLI and Flower"
        )
        return
    env = write_env(seed)
    first = seed.shoots[0]
    console.print(
        "\n[bold]how to look at the seed[/bold] (it runs until Ctrl-C)"
        f"\n  source {env}          # KUBECONFIG (the seed), MCM_REDIS_URL, MCM_NAMESPACE_SELECTOR\n"
        "  kubectl get mcd,mcs,mc -A                  # every shoot namespace's machine objects\n"
        f"  kubectl get ns -l {SHOOT_LABEL}=true       # the shoot namespaces served\n"
        f"  kubectl --kubeconfig {seed.shoot_kubeconfig(first)} get nodes   # {first}'s Nodes\n"
        f"  ls {seed.apiserver.clusters_dir if seed.apiserver else ''}   # every shoot's kubeconfig\n"
        "  mcm-tasks admin seed                       # the served namespaces (admin CLI)\n"
        "  mcm-tasks admin queues                     # one row per namespace; -n NAMESPACE: its queues\n"
        "  celery -A mcm_tasks.celery_app flower      # Flower on :5555; search args:NAMESPACE/\n"
        f"  ls {seed.logs}   # the processes' logs"
    )


def stop_on_signals(seed: Seed, console: Console) -> None:
    """Ctrl-C, a closed terminal or a kill stop the seed's processes too (they run in sessions of
    their own, so a terminal's signal reaches only the demo), from the handler itself, as the
    normal demo's ``stop_sandbox_on_signals``; ``--keep``'s wait ends so too."""

    def handler(signum: int, _frame: object) -> None:
        console.print(f"\n[bold red]stopped by signal {signum}[/bold red]: stopping the seed")
        seed.stop()
        os._exit(128 + signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)


def run(
    shoots: int, directory: Path, workers: int, keep: bool, env: dict[str, str], console: Console
) -> bool:
    """The seed demo; True when every step was done."""
    seed = Seed(directory, shoot_names(shoots), workers=workers, env={**env, "MCM_SEED_REFRESH_PERIOD": "1s"})
    stop_on_signals(seed, console)
    console.rule(f"[bold]mcm-tasks demo: a seed of {shoots} shoots")
    console.print(f"starting the seed in {directory}")
    start = time.monotonic()
    with console.status(
        f"starting Redis, one API server with {shoots} virtual clusters, the kubelet simulator, "
        f"informer (with beat), {workers} workers…"
    ):
        seed.start(timeout=120)
    started_in = time.monotonic() - start
    console.print(
        f"seed up in {started_in:.1f}s: {', '.join(sorted(seed.procs))} serving {', '.join(seed.shoots)}"
    )
    ok = False
    demo: SeedDemo | None = None
    try:
        demo = SeedDemo(seed, console)
        demo.run(keep)
        ok = True
    finally:
        if demo is not None:
            demo.close()
        console.rule("[bold]summary")
        console.print(f"seed started in {started_in:.1f}s")
        for title, took in demo.timings if demo else []:
            console.print(f"  {took:6.1f}s  {title}")
        how_to_look(seed, console, keep and ok)
        if keep and ok:
            console.print("\n[bold]the seed runs until Ctrl-C[/bold]")
            signal.pause()  # the handler stops the seed and exits
        seed.stop()
    return ok
