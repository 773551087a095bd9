"""Machine controller benchmark: 500 standalone Machines created at once, then deleted with a pod each.

Run: ``.venv/bin/python bench/machines.py [--scale 0.1]``. Prints the figures and saves
bench/results/machines.json. The whole sandbox runs (2 worker processes, informer, kubelet
simulator, two API servers, Redis); no MachineSet, a MachineClass with zero boot delay.

- create_seconds: from the first create request until every Machine is Running (its Node Ready).
- tasks_per_machine: reconciles run on all queues during the creation phase, per machine.
- writes_per_machine: API writes of the controller (control + target) during the creation phase,
  per machine; the benchmark's own creates and the kubelet simulator's writes are not counted.
- delete_seconds: once every node runs one pod (bound with ``spec.nodeName``, Running), from the
  first delete request until every Machine, Node and VM is gone (each drain evicts its pod).

The JSON's ``phases`` hold both phases in detail: writes by resource and by the part of the object
they changed, reconciles per queue, the kubelet simulator's actions and CPU seconds per process.

``--profile DIR`` samples the worker processes with py-spy during each phase and adds a summary
(share of task time per reconciler and per function) under ``context.profile``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/ must not be on sys.path: bench/queue.py would shadow the standard library's queue
ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]

import time  # noqa: E402
from typing import Any  # noqa: E402

from bench.common import (  # noqa: E402
    NS,
    Bench,
    class_ref,
    context,
    parse_args,
    pod_on,
    running_sandbox,
    save,
    scaled,
)
from bench.watch import machine_summary, phase_of  # noqa: E402
from mcm_sandbox.procs import wait_until  # noqa: E402
from mcm_tasks import kinds  # noqa: E402
from mcm_tasks.api import API_VERSION  # noqa: E402

CLASS = "bench-class"


def machine(name: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "Machine",
        "metadata": {"name": name, "namespace": NS, "labels": {"bench": "machines"}},
        "spec": {"class": class_ref(CLASS)},
    }


def create_phase(bench: Bench, names: list[str], timeout: float) -> tuple[float, dict[str, Any]]:
    tracker, n = bench.tracker, len(names)

    def all_running() -> bool:
        ms = tracker.machines()
        return len(ms) == n and all(phase_of(m) == "Running" for m in ms)

    before = bench.snapshot()
    start = time.monotonic()
    bench.create("control", kinds.MACHINE.resource, (machine(name) for name in names))
    tracker.wait(all_running, timeout, "all Running", lambda: machine_summary(tracker))
    seconds = time.monotonic() - start
    return seconds, bench.report(before, bench.snapshot(), n)


def pods_on_every_node(bench: Bench, timeout: float) -> None:
    tracker = bench.tracker
    with tracker.cond:
        nodes = [name for _, name in tracker.objects.get("target/nodes", {})]
    bench.create("target", kinds.POD.resource, (pod_on(node, f"app-{node}") for node in nodes))

    def pods_running() -> bool:
        pods = tracker.objects.get("target/pods", {}).values()
        return sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running") == len(nodes)

    tracker.wait(pods_running, timeout, "pods Running", lambda: f"{tracker.count('target/pods')} pods")


def delete_phase(bench: Bench, names: list[str], timeout: float) -> tuple[float, dict[str, Any]]:
    tracker = bench.tracker

    def all_gone() -> bool:
        return not tracker.machines() and tracker.count("target/nodes") == 0

    before = bench.snapshot()
    start = time.monotonic()
    bench.delete("control", kinds.MACHINE.resource, names)
    tracker.wait(all_gone, timeout, "all gone", lambda: machine_summary(tracker))
    wait_until(lambda: bench.live_vms() == 0, 60, interval=0.2, what="no VM left")
    seconds = time.monotonic() - start
    return seconds, bench.report(before, bench.snapshot(), len(names))


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    count = scaled(500, args.scale)
    names = [f"bench-{i:04d}" for i in range(count)]
    with running_sandbox(args) as bench:
        ctx = context(args)
        bench.secret_and_classes(CLASS)
        print(f"creating {count} machines", flush=True)
        with bench.profiler.phase("create"):
            create_seconds, created = create_phase(bench, names, args.timeout)
        print(f"  all Running in {create_seconds:.1f}s", flush=True)
        pods_on_every_node(bench, args.timeout)
        print(f"deleting {count} machines, one pod each", flush=True)
        with bench.profiler.phase("delete"):
            delete_seconds, deleted = delete_phase(bench, names, args.timeout)
        print(f"  all gone in {delete_seconds:.1f}s", flush=True)
        ctx.update(machines=count, tracker_relists=bench.tracker.relists, profile=bench.profiler.summaries)
    figures = {
        "create_seconds": round(create_seconds, 1),
        "tasks_per_machine": created["tasks_per_machine"],
        "writes_per_machine": created["writes_per_machine"],
        "delete_seconds": round(delete_seconds, 1),
    }
    ctx["phases"] = {"create": created, "delete": deleted}
    save("machines", args, figures, ctx)


if __name__ == "__main__":
    main()
