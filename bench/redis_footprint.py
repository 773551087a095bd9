"""What one Redis carries: memory per 1000 machines and Redis commands per machine lifecycle.

Run: ``.venv/bin/python bench/redis_footprint.py [--scale 0.1]``. Prints the figures and saves
bench/results/redis_footprint.json. The whole sandbox runs (2 worker processes, informer, kubelet
simulator, two API servers, Redis); 200 standalone Machines, each Node with 10 pods (what the
mirror holds of a fleet is mostly pods), created, then deleted.

- memory_bytes_per_1000_machines: Redis ``used_memory`` with the fleet Running minus before it
  was created, per 1000 machines (the machines, their nodes and pods in the mirror with indexes,
  queue state, task history, locks, events state; the sandbox's own cloud keys left out).
- keys_per_machine and memory by kind of key (``by_area``: the key's part after ``mcm:``), from
  ``MEMORY USAGE`` of every key.
- commands_per_machine_lifecycle: Redis commands (``INFO commandstats``) from the first create to
  the last VM gone, less what the idle system issues in the same time (informer loop, workers'
  keeper sweeps, the kubelet simulator's polling, measured for 20 s before), per machine; by
  command in ``commands_by_name``. ``commands_per_second_create``: the rate while creating.
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/ must not be on sys.path: bench/queue.py would shadow the standard library's queue
ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]

import time  # noqa: E402
from collections import Counter  # noqa: E402
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
PODS_PER_NODE = 10
IDLE_SECONDS = 20.0
#: the sandbox's cloud (the local provider's VMs) lives in Redis; a real cloud does not
SANDBOX_AREAS = ("localcloud", "kubelet")


def machine(name: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "Machine",
        "metadata": {"name": name, "namespace": NS, "labels": {"bench": "redis"}},
        "spec": {"class": class_ref(CLASS)},
    }


def client(bench: Bench) -> Any:
    from mcm_tasks.redisdb import get_redis

    return get_redis(bench.sandbox.redis_url, decode=True)


#: what this script itself asks of Redis (left out of the counts)
OWN_COMMANDS = ("memory|usage", "scan", "info", "hlen")


def command_counts(bench: Bench) -> Counter[str]:
    stats = client(bench).info("commandstats")
    counts = Counter({name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()})
    for name in OWN_COMMANDS:
        counts.pop(name, None)
    return counts


def used_memory(bench: Bench) -> int:
    return int(client(bench).info("memory")["used_memory"])


def keyspace(bench: Bench) -> dict[str, dict[str, int]]:
    """Per area (``mcm:<area>:…``): keys and ``MEMORY USAGE`` bytes."""
    redis = client(bench)
    out: dict[str, dict[str, int]] = {}
    keys = list(redis.scan_iter(count=2000))
    pipe = redis.pipeline(transaction=False)
    for key in keys:
        pipe.memory_usage(key, samples=0)
    for key, size in zip(keys, pipe.execute(), strict=True):
        parts = key.split(":")
        area = parts[1] if len(parts) > 1 else parts[0]
        if area == "cache" and len(parts) > 2:
            area = f"cache:{parts[2]}"
        entry = out.setdefault(area, {"keys": 0, "bytes": 0})
        entry["keys"] += 1
        entry["bytes"] += int(size or 0)
    return dict(sorted(out.items()))


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    count = scaled(200, args.scale)
    names = [f"bench-{i:04d}" for i in range(count)]
    with running_sandbox(args) as bench:
        ctx = context(args)
        bench.secret_and_classes(CLASS)
        tracker = bench.tracker
        time.sleep(2.0)  # the class and secret reconciles settle

        idle_before, idle_start = command_counts(bench), time.monotonic()
        time.sleep(IDLE_SECONDS)
        idle = command_counts(bench) - idle_before
        idle_rate = sum(idle.values()) / (time.monotonic() - idle_start)

        memory_before, keys_before = used_memory(bench), keyspace(bench)
        commands_before, start = command_counts(bench), time.monotonic()
        print(f"creating {count} machines", flush=True)
        bench.create("control", kinds.MACHINE.resource, (machine(name) for name in names))

        def all_running() -> bool:
            ms = tracker.machines()
            return len(ms) == count and all(phase_of(m) == "Running" for m in ms)

        tracker.wait(all_running, args.timeout, "all Running", lambda: machine_summary(tracker))
        create_seconds = time.monotonic() - start
        create_commands = sum((command_counts(bench) - commands_before).values())
        with tracker.cond:
            nodes = [name for _, name in tracker.objects.get("target/nodes", {})]
        bench.create(
            "target",
            kinds.POD.resource,
            (pod_on(node, f"app-{node}-{i}") for node in nodes for i in range(PODS_PER_NODE)),
        )
        pods_wanted = len(nodes) * PODS_PER_NODE

        def pods_mirrored() -> bool:
            return int(client(bench).hlen("mcm:cache:pods")) >= pods_wanted

        wait_until(pods_mirrored, args.timeout, interval=0.5, what="pods in the mirror")
        time.sleep(3.0)  # the fleet at rest: requeues of the creation done
        memory_full, keys_full = used_memory(bench), keyspace(bench)

        print(f"deleting {count} machines", flush=True)
        bench.delete("control", kinds.MACHINE.resource, names)
        tracker.wait(
            lambda: not tracker.machines() and tracker.count("target/nodes") == 0,
            args.timeout,
            "all gone",
            lambda: machine_summary(tracker),
        )
        wait_until(lambda: bench.live_vms() == 0, 120, interval=0.5, what="no VM left")
        elapsed = time.monotonic() - start
        lifecycle = command_counts(bench) - commands_before
        ctx.update(
            machines=count, pods_per_node=PODS_PER_NODE, idle_commands_by_name=dict(idle.most_common(15))
        )

    sandbox_bytes = sum(v["bytes"] for k, v in keys_full.items() if k in SANDBOX_AREAS) - sum(
        v["bytes"] for k, v in keys_before.items() if k in SANDBOX_AREAS
    )
    grown = memory_full - memory_before - sandbox_bytes
    new_keys = sum(v["keys"] for k, v in keys_full.items() if k not in SANDBOX_AREAS) - sum(
        v["keys"] for k, v in keys_before.items() if k not in SANDBOX_AREAS
    )
    net = sum(lifecycle.values()) - idle_rate * elapsed
    figures = {
        "memory_bytes_per_1000_machines": round(grown / count * 1000),
        "memory_mib_per_1000_machines": round(grown / count * 1000 / 2**20, 1),
        "keys_per_machine": round(new_keys / count, 2),
        "commands_per_machine_lifecycle": round(net / count, 1),
        "commands_per_second_create": round(create_commands / create_seconds, 1),
        "idle_commands_per_second": round(idle_rate, 1),
    }
    ctx["by_area"] = {
        area: {
            **sizes,
            "bytes_per_machine": round((sizes["bytes"] - keys_before.get(area, {}).get("bytes", 0)) / count),
        }
        for area, sizes in keys_full.items()
    }
    ctx["commands_by_name"] = dict(lifecycle.most_common(25))
    ctx["create_seconds"] = round(create_seconds, 1)
    ctx["lifecycle_seconds"] = round(elapsed, 1)
    save("redis_footprint", args, figures, ctx)


if __name__ == "__main__":
    main()
