"""The informer at rest and per Node status heartbeat: the writer's own loop, not a cycle of changes.

Run: ``.venv/bin/python bench/informer_idle.py [--scale 0.3] [--seconds 20] [--rate 20]``. Prints the
figures and saves bench/results/informer_idle.json. One process against a redis-server of its own,
no API server and no workers: the informer's real writer loop (``Informer._write_loop``, with its
batching, status hash and sentinel check) and one unstarted reflector per kind (their stats go in
the status hash; their ``_handle`` decodes the lines as a watch does). 1000 Running Machines and
their Nodes are listed first (healthy: their conditions match, so a heartbeat wakes nothing). Then:

- ``rest``: ``--seconds`` with no event: ``informer_cpu_ms_per_s_rest`` (this process's CPU,
  ``process_time``), ``redis_commands_per_s_rest`` and the commands by name;
- ``heartbeats``: ``--rate`` Node status heartbeats a second for ``--seconds`` (a MODIFIED Node whose
  conditions' lastHeartbeatTime and resourceVersion moved, nothing else), each line decoded by its
  reflector as it arrives: ``informer_cpu_ms_per_heartbeat`` and ``redis_commands_per_heartbeat``,
  both with the rest's figure over the same time taken off. The lines are encoded before the window
  (that is the API server's work).

A real kubelet reports every 5 min (nodeStatusReportFrequency): 1000 Nodes are 3.3 heartbeats a
second; ``--rate`` compresses that so the per-event figures stand out of the fixed cost. Real
kubelets report each on its own clock; the sandbox's kubelet simulator posts the heartbeats due at
each tick (0.5 s) one after another: ``--burst 10`` at ``--rate 20`` is that.
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/ must not be on sys.path: bench/queue.py would shadow the standard library's queue
ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]

import queue  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from typing import Any  # noqa: E402

import orjson  # noqa: E402
import redis  # noqa: E402

from bench.common import context, parse_args, save, scaled  # noqa: E402
from bench.informer import machine, node  # noqa: E402
from informers.informer import Reflector  # noqa: E402
from informers.processor import Item, Processor, Relisted  # noqa: E402
from informers.resources import ALL, BY_KIND  # noqa: E402
from informers.runner import Informer  # noqa: E402
from informers.sink import QueueSink  # noqa: E402
from informers.store import Store  # noqa: E402
from mcm_sandbox.procs import RedisServer, wait_until  # noqa: E402
from mcm_tasks import kinds  # noqa: E402
from mcm_tasks.api.constants import NODE_FINALIZER  # noqa: E402
from mcm_tasks.cache import layout  # noqa: E402
from mcm_tasks.redisdb import get_redis  # noqa: E402
from mcm_tasks.settings import configure  # noqa: E402

NS = "default"


def _calls(client: redis.Redis) -> Counter[str]:
    stats = client.info("commandstats").items()
    return Counter({k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats})


def _redis_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def joined(i: int, rv: int) -> dict[str, Any]:
    """Node ``i`` of a Running machine: MCM's finalizer on it, nothing for the node task to do."""
    n = node(i, rv, 0)
    n["metadata"]["finalizers"] = [NODE_FINALIZER]
    return n


def heartbeat(i: int, rv: int, second: int) -> dict[str, Any]:
    """Node ``i`` as its kubelet's status report leaves it: only the heartbeat times moved."""
    n = joined(i, rv)
    stamp = f"2026-11-25T{20 + second // 3600:02d}:{second // 60 % 60:02d}:{second % 60:02d}Z"
    for condition in n["status"]["conditions"]:
        condition["lastHeartbeatTime"] = stamp
    return n


def window(
    client: redis.Redis, seconds: float, writer: int, feed: Any = None
) -> tuple[float, float, Counter[str], int, float]:
    """(our CPU s, Redis CPU s, commands, events fed, the writer thread's CPU s) over ``seconds``."""
    clock = time.pthread_getcpuclockid(writer)
    calls, redis_before = _calls(client), _redis_cpu(client)
    before, writer_before = time.process_time(), time.clock_gettime(clock)
    fed = feed() if feed is not None else time.sleep(seconds) or 0
    spent, writer_spent = time.process_time() - before, time.clock_gettime(clock) - writer_before
    redis_spent = _redis_cpu(client) - redis_before
    # the INFO calls of the measurement itself are not the informer's
    return spent, redis_spent, _calls(client) - calls - Counter({"info": 2}), fed, writer_spent


def main() -> None:
    def extra(parser: Any) -> None:
        parser.add_argument("--seconds", type=float, default=20.0, help="length of each window")
        parser.add_argument("--rate", type=float, default=20.0, help="heartbeats a second")
        parser.add_argument(
            "--burst", type=int, default=1, help="heartbeats arriving together, 1 ms apart (a kubelet tick)"
        )

    args = parse_args(__doc__.splitlines()[0], extra)
    machines = scaled(1000, args.scale)
    with tempfile.TemporaryDirectory(prefix="mcm-bench-informer-idle-") as tmp:
        server = RedisServer(Path(tmp)).start()
        stop = threading.Event()
        try:
            settings = configure({"redis_url": server.url, "min_resync_period": 3600.0})
            client = get_redis(server.url, decode=False)
            inbox: queue.Queue[Item] = queue.Queue()
            runner = Informer(settings, {}, client, QueueSink(), "bench", resources=[])
            reflectors = {
                res.kind: Reflector(res, None, NS, inbox.put, settings, stop)  # type: ignore[arg-type]
                for res in ALL
            }
            processor = Processor(Store(NS))
            rv = 1000
            listed = [machine(i, rv, 3) for i in range(machines)]
            inbox.put(Relisted(kinds.MACHINE.mirror, listed, str(rv), initial=True))
            inbox.put(Relisted(kinds.NODE.mirror, [joined(i, rv) for i in range(machines)], str(rv), True))
            for kind in BY_KIND:
                if kind not in (kinds.MACHINE.mirror, kinds.NODE.mirror):
                    inbox.put(Relisted(kind, [], str(rv), initial=True))
            writer = threading.Thread(
                target=runner._write_loop, args=(stop, processor, inbox, list(reflectors.values()), None)
            )
            writer.start()
            nodes = layout.objects_key(kinds.NODE.mirror)
            wait_until(lambda: client.hlen(nodes) == machines and inbox.empty(), 60, what="the first list")
            time.sleep(3.0)  # past the list's own writes and enqueues
            rest = window(client, args.seconds, writer.ident or 0)

            count = int(args.seconds * args.rate)
            lines = []
            for n in range(count):
                rv += 1
                obj = heartbeat(n % machines, rv, 60 + n // machines)
                lines.append(orjson.dumps({"type": "MODIFIED", "object": obj}))
            reflector = reflectors[kinds.NODE.mirror]

            def feed() -> int:
                start = time.monotonic()
                for n, line in enumerate(lines):
                    delay = start + (n - n % args.burst) / args.rate - time.monotonic()
                    time.sleep(max(delay, 0.001 if n % args.burst else 0.0))
                    reflector._handle(line)
                wait_until(inbox.empty, 10, interval=0.01, what="the heartbeats taken")
                left = start + args.seconds - time.monotonic()
                if left > 0:
                    time.sleep(left)
                return len(lines)

            beats = window(client, args.seconds, writer.ident or 0, feed)
            time.sleep(2.5)  # the last deferred writes land
            last = orjson.loads(lines[-1])["object"]["metadata"]
            stored = orjson.loads(client.hget(nodes, layout.object_key(None, last["name"])) or b"{}")
            mirrored = stored.get("metadata", {}).get("resourceVersion") == last["resourceVersion"]
        finally:
            stop.set()
            server.stop()
    seconds = args.seconds
    cpu_rest, redis_rest, calls_rest, _, writer_rest = rest
    cpu_hb, redis_hb, calls_hb, fed, writer_hb = beats
    extra_calls = calls_hb - Counter({k: round(v) for k, v in calls_rest.items()})
    figures: dict[str, Any] = {
        "machines": machines,
        "seconds": seconds,
        "heartbeats": fed,
        "informer_cpu_ms_per_s_rest": round(cpu_rest / seconds * 1e3, 3),
        "redis_cpu_ms_per_s_rest": round(redis_rest / seconds * 1e3, 3),
        "redis_commands_per_s_rest": round(sum(calls_rest.values()) / seconds, 2),
        "informer_cpu_ms_per_heartbeat": round((cpu_hb - cpu_rest) / fed * 1e3, 3),
        "writer_cpu_ms_per_s_rest": round(writer_rest / seconds * 1e3, 3),
        "writer_cpu_ms_per_heartbeat": round((writer_hb - writer_rest) / fed * 1e3, 3),
        "redis_cpu_us_per_heartbeat": round((redis_hb - redis_rest) / fed * 1e6, 1),
        "redis_commands_per_heartbeat": round(sum(extra_calls.values()) / fed, 2),
        "mirror_holds_last_heartbeat": mirrored,
    }
    ctx = context(args)
    ctx["redis_calls_rest_per_s"] = {k: round(v / seconds, 2) for k, v in calls_rest.most_common()}
    ctx["redis_calls_heartbeats_per_event"] = {k: round(v / fed, 2) for k, v in calls_hb.most_common()}
    ctx["informer_counters"] = dict(runner.counters)
    save("informer_idle", args, figures, ctx)


if __name__ == "__main__":
    main()
