"""The informer's writer path per watch event: its CPU and Redis's, and Redis commands per event.

Run: ``.venv/bin/python bench/informer.py [--scale 0.3]``. Prints the figures and saves
bench/results/informer.json. One process against a redis-server of its own, no API server and no
workers: the watch lines of a 0 → 1000 → 0 cycle (each Machine added, modified four times, deleted
after two more changes; its Node added, modified, then deleted after two more changes; shapes as
the sandbox's objects, managedFields included) go through what the informer does with them: the
line decoded (the reflector), the event processed (store, index values, routing), the batch
written to the mirror and its keys enqueued through the queue contract (``QueueSink``). Nothing
consumes the queues, so enqueues after the first coalesce into the waiting message.

- ``informer_us_per_event_*``: this process's CPU per event (``process_time``), best of three;
- ``redis_us_per_event_*``: Redis's CPU (``used_cpu_*``) per event;
- ``redis_commands_per_event_*`` and ``redis_calls_per_event``: ``INFO commandstats`` per event
  (commands run inside scripts included);
- per batch size (``_b1``: one event per batch, what a writer faster than its watches sees;
  ``_b8``, ``_b64``: what arrives together under load).
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/ must not be on sys.path: bench/queue.py would shadow the standard library's queue
ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]

import copy  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from typing import Any  # noqa: E402

import orjson  # noqa: E402
import redis  # noqa: E402

from bench.common import context, parse_args, save, scaled  # noqa: E402
from informers.events import Routing  # noqa: E402
from informers.mirror import Mirror  # noqa: E402
from informers.processor import Processor, WatchEvent  # noqa: E402
from informers.sink import QueueSink, send_routing  # noqa: E402
from informers.store import Store  # noqa: E402
from mcm_sandbox.procs import RedisServer  # noqa: E402
from mcm_tasks import kinds  # noqa: E402
from mcm_tasks.redisdb import get_redis  # noqa: E402
from mcm_tasks.settings import configure  # noqa: E402

NS = "default"
BATCHES = (1, 8, 64)
ROUNDS = 3


def _managed(manager: str, n: int) -> list[dict[str, Any]]:
    return [
        {"manager": manager, "operation": "Update", "apiVersion": "v1", "time": "2026-11-25T20:00:00Z",
         "fieldsType": "FieldsV1", "fieldsV1": {f"f:metadata{i}": {"f:labels": {".": {}, "f:x": {}}}}}
        for i in range(n)
    ]  # fmt: skip


def machine(i: int, rv: int, step: int) -> dict[str, Any]:
    name = f"big-abcde-{i:05d}"
    m: dict[str, Any] = {
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "Machine",
        "metadata": {
            "name": name, "namespace": NS, "uid": f"uid-{i}", "resourceVersion": str(rv), "generation": 1,
            "creationTimestamp": "2026-11-25T20:00:00Z",
            "labels": {"name": "big", "machine-template-hash": "abcde"},
            "ownerReferences": [{"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet",
                                 "name": "big-abcde", "uid": "set-uid", "controller": True,
                                 "blockOwnerDeletion": True}],
            "finalizers": ["machine.sapcloud.io/machine-controller-manager"],
            "managedFields": _managed("mcm-tasks", 3),
        },
        "spec": {"class": {"kind": "MachineClass", "name": "class-a"}, "nodeTemplate": {"metadata": {}}},
        "status": {"currentStatus": {"phase": "Pending", "lastUpdateTime": "2026-11-25T20:00:01Z"},
                   "lastOperation": {"description": "Creating machine on cloud provider",
                                     "state": "Processing", "type": "Create",
                                     "lastUpdateTime": "2026-11-25T20:00:01Z"}},
    }  # fmt: skip
    if step >= 1:
        m["spec"]["providerID"] = f"local:///vm/i-{i:08x}"
        m["metadata"]["labels"]["node"] = name
        m["metadata"]["annotations"] = {"machine.sapcloud.io/last-applied-anno": "x"}
    if step >= 3:
        m["status"]["currentStatus"]["phase"] = "Running"
        m["status"]["conditions"] = [
            {"type": t, "status": "False", "reason": "KubeletReady"}
            for t in ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")
        ]
    if step >= 5:
        m["metadata"]["deletionTimestamp"] = "2026-11-25T20:10:00Z"
        m["status"]["currentStatus"]["phase"] = "Terminating"
    return m


def node(i: int, rv: int, step: int) -> dict[str, Any]:
    name = f"big-abcde-{i:05d}"
    n: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": f"node-uid-{i}", "resourceVersion": str(rv),
                     "labels": {"kubernetes.io/hostname": name,
                                "node.machine.sapcloud.io/machine-name": name},
                     "managedFields": _managed("kubelet", 2)},
        "spec": {"providerID": f"local:///vm/i-{i:08x}"},
        "status": {
            "conditions": [{"type": t, "status": "False", "lastHeartbeatTime": "2026-11-25T20:00:02Z",
                            "lastTransitionTime": "2026-11-25T20:00:02Z", "reason": "x", "message": "y"}
                           for t in ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")],
            "addresses": [{"type": "InternalIP", "address": f"10.0.{i // 250}.{i % 250}"}],
            "capacity": {"cpu": "2", "memory": "8Gi", "pods": "110"},
            "nodeInfo": {"kubeletVersion": "v1.30.0", "osImage": "sandbox"},
            "images": [{"names": [f"registry/image-{k}:v1"], "sizeBytes": 1000} for k in range(5)],
        },
    }  # fmt: skip
    if step >= 1:
        n["metadata"]["finalizers"] = ["node.machine.sapcloud.io/drain"]
    if step >= 2:
        n["spec"]["unschedulable"] = True
    return n


def lines(machines: int) -> list[tuple[str, bytes]]:
    """The watch lines of a cycle, as kind and line, interleaved as the sandbox's arrive."""
    out: list[tuple[str, bytes]] = []
    rv = 1000

    def add(kind: str, type_: str, obj: dict[str, Any]) -> None:
        out.append((kind, orjson.dumps({"type": type_, "object": obj})))

    for step in range(5):  # up: ADDED, then four MODIFIED per Machine; the Node on step 2 and 4
        for i in range(machines):
            rv += 1
            add(kinds.MACHINE.mirror, "ADDED" if step == 0 else "MODIFIED", machine(i, rv, step))
            if step in (2, 4):
                rv += 1
                add(kinds.NODE.mirror, "ADDED" if step == 2 else "MODIFIED", node(i, rv, step // 4))
    for step in (5, 6):  # down: the deletion marked, a drain on the Node, then both gone
        for i in range(machines):
            rv += 1
            add(kinds.MACHINE.mirror, "MODIFIED", machine(i, rv, step))
            rv += 1
            add(kinds.NODE.mirror, "MODIFIED", node(i, rv, step - 3))
    for i in range(machines):
        rv += 1
        add(kinds.NODE.mirror, "DELETED", node(i, rv, 2))
        rv += 1
        add(kinds.MACHINE.mirror, "DELETED", machine(i, rv, 5))
    return out


def _redis_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def _calls(client: redis.Redis) -> Counter[str]:
    stats = client.info("commandstats").items()
    return Counter({k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats})


def run(
    client: redis.Redis, events: list[tuple[str, bytes]], batch: int
) -> tuple[float, float, Counter[str]]:
    """(our CPU s, Redis CPU s, commands) for the whole sequence in batches of ``batch`` events."""
    client.flushall()
    processor, mirror, sink = Processor(Store(NS)), Mirror(client), QueueSink()
    calls, redis_before, before = _calls(client), _redis_cpu(client), time.process_time()
    for start in range(0, len(events), batch):
        items = []
        for kind, line in events[start : start + batch]:
            event = orjson.loads(line)  # the reflector's decode
            items.append(WatchEvent(kind, event["type"], event["object"]))
        outcome = processor.process(items)
        mirror.write(outcome.commit)
        routing: Routing = outcome.routing
        if routing:
            send_routing(sink, routing)
    spent, redis_spent = time.process_time() - before, _redis_cpu(client) - redis_before
    return spent, redis_spent, _calls(client) - calls


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    machines = scaled(1000, args.scale)
    events = lines(machines)
    with tempfile.TemporaryDirectory(prefix="mcm-bench-informer-") as tmp:
        server = RedisServer(Path(tmp)).start()
        try:
            configure({"redis_url": server.url, "machine_updates_batch_period": 1.0})
            client = get_redis(server.url, decode=False)
            figures: dict[str, Any] = {"events": len(events), "machines": machines}
            by_name: dict[str, dict[str, float]] = {}
            for batch in BATCHES:
                best = min((run(client, copy.copy(events), batch) for _ in range(ROUNDS)), key=lambda r: r[0])
                spent, redis_spent, calls = best
                n = len(events)
                figures[f"informer_us_per_event_b{batch}"] = round(spent / n * 1e6, 1)
                figures[f"redis_us_per_event_b{batch}"] = round(redis_spent / n * 1e6, 1)
                figures[f"redis_commands_per_event_b{batch}"] = round(sum(calls.values()) / n, 2)
                by_name[f"b{batch}"] = {k: round(v / n, 2) for k, v in calls.most_common(14)}
        finally:
            server.stop()
    ctx = context(args)
    ctx["redis_calls_per_event"] = by_name
    save("informer", args, figures, ctx)


if __name__ == "__main__":
    main()
