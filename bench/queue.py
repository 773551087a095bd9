"""What the queue contract costs, measured on real workers in one run.

    .venv/bin/python bench/queue.py [--workers 2] [--concurrency 2] [--tasks 3000]

Starts its own redis-server and ``mcm-tasks worker`` processes (reconcilers from
``mcm_sandbox.testing.queue:install_bench``, Celery log level warning; bench/workers.py starts,
pauses and resumes them), then measures, on the same workers:

(a) ``empty_task_rate``: an empty Celery task (increments a Redis counter) published with
    ``send_task`` on one reused producer;
(b) ``noop_reconcile_rate``: a no-op reconcile through the whole contract: a synthetic watch event
    through the informer's write path (``mcm_sandbox.testing.bench_hook``: store → mirror → routing →
    ``enqueue_many``; plain ``enqueue_many`` with ``--no-informer`` or without the informers
    package) → BEGIN (lock) → the cache read (``mcm_tasks.cache`` reader) → END;
    ``ratio`` = b / a (target ≥ 0.7). Both are drain rates of a pre-filled queue (consumers
    paused while it fills, then resumed; first start to last end), best of the interleaved
    rounds; the same pair measured with publishing and consuming at the same time (so including
    the informer's and the publisher's CPU) is saved as ``*_e2e``. The machine is shared, so
    rates move with whatever else runs; the CPU time the workers and Redis spend per task
    (``cpu_ms_per_*``, ``ratio_cpu`` = CPU per empty task / CPU per reconcile) does not;
(c) ``enqueue_rate``: events/s through the informer's path (``mcm_sandbox.testing.bench_hook.enqueue_rate``),
    and ``enqueue_many_rate`` through ``enqueue_many`` alone: informer-sized batches over 3000
    keys (coalescing included), consumers paused;
(d) ``latency_p50_ms`` / ``latency_p99_ms``: event (just before it enters the informer's path) to
    reconcile start, one event every 5 ms (200 events/s) on distinct keys;
(e) ``delayed_publish_lag_ms_p50`` / ``_p99``: 1000 requeue-afters (``enqueue_after``), due one every
    5 ms from 2 s on, wait in the delayed set and are published by the workers' keepers; due time to
    reconcile start (which bounds the publish lag from above: it adds the delivery);
(f) ``recovery_seconds``: a third worker takes two slow reconciles (the others' consumers paused)
    and is SIGKILLed (main process and pool) mid-run; seconds from the kill until both keys run
    again on the other workers (the sweep after ``worker_lost_timeout``, default 15 s, plus the
    redelivery), with the default ``visibility_timeout`` of an hour.

Results go to stdout and bench/results/queue.json.
"""

from __future__ import annotations

import os
import sys

# Run as a script, this file's folder comes first on sys.path, and this file is named like the
# standard library's ``queue`` that redis and kombu import: take the folder off before anything else.
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)

import argparse
import json
import random
import signal
import socket
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.workers import (  # noqa: E402
    BENCH_QUEUE,
    KIND,
    Publisher,
    cpu_seconds,
    informer_path,
    make_publisher,
    pause,
    publish_empty,
    publish_reconciles,
    reset_tallies,
    resume,
    start_workers,
    wait_done,
)
from mcm_sandbox.procs import ManagedProcess, RedisServer, scratch_dir, wait_until  # noqa: E402
from mcm_sandbox.testing.queue import SLOW_SECONDS, bench_keys  # noqa: E402
from mcm_tasks.celery_app import app, apply_settings  # noqa: E402
from mcm_tasks.queue import enqueue_many  # noqa: E402
from mcm_tasks.queue.messages import queue_keys  # noqa: E402
from mcm_tasks.queue.producer import enqueue_many_after  # noqa: E402
from mcm_tasks.redisdb import get_redis  # noqa: E402
from mcm_tasks.settings import configure, get_settings  # noqa: E402


def drain_rate(
    client: redis.Redis, publish: Publisher, groups: list[int], n: int, empty: bool, tag: str
) -> tuple[float, float]:
    """Fill the queue with consumers paused, resume; (rate from first start to last end, CPU ms
    per task of workers and Redis while draining)."""
    reset_tallies(client)
    queue = BENCH_QUEUE if empty else f"mcm.{KIND}"
    workers = len(groups) - 1
    pause(queue, workers)
    if empty:
        publish_empty(n)
    else:
        publish_reconciles(publish, n, tag)
    cpu_before = cpu_seconds(groups)
    resume(queue, workers)
    first, last = wait_done(client, "empty_" if empty else "", n)
    return (n - 1) / (last - first), (cpu_seconds(groups) - cpu_before) * 1000 / n


def e2e_rate(client: redis.Redis, publish: Publisher, n: int, empty: bool, tag: str) -> float:
    """Publish and consume at the same time: rate from the first publish to the last end."""
    reset_tallies(client)
    started = time.time()
    if empty:
        publish_empty(n)
    else:
        publish_reconciles(publish, n, tag)
    _, last = wait_done(client, "empty_" if empty else "", n)
    return n / (last - started)


def enqueue_rate(client: redis.Redis, workers: int, use_informer: bool) -> tuple[float, float | None]:
    """Events/s through ``enqueue_many`` alone and through the informer's path (if present),
    informer-sized batches, 30 000 events over 3000 keys (repeats coalesce), consumers paused."""
    pause(f"mcm.{KIND}", workers)
    rng = random.Random(1)
    events = [(KIND, f"enq-{rng.randrange(3000)}") for _ in range(30_000)]
    started = time.perf_counter()
    for start in range(0, len(events), 500):
        enqueue_many(events[start : start + 500], client)
    raw_rate = len(events) / (time.perf_counter() - started)
    informer_rate = None
    if use_informer:
        try:
            from mcm_sandbox.testing.bench_hook import enqueue_rate as informer_enqueue_rate
        except ImportError:
            pass
        else:
            informer_rate = informer_enqueue_rate(get_redis(decode=False))
    qk = queue_keys(KIND)
    client.delete(qk.broker_list, qk.pending)  # nothing of this needs reconciling
    resume(f"mcm.{KIND}", workers)
    return raw_rate, informer_rate


def latency(
    client: redis.Redis, publish: Publisher, rate: float = 200.0, seconds: float = 6.0
) -> tuple[float, float]:
    reset_tallies(client)
    n = int(rate * seconds)
    sent: dict[str, float] = {}
    period = 1.0 / rate
    next_at = time.perf_counter()
    for i in range(n):
        key = f"lat-{i}"
        sent[key] = time.time()
        publish([(KIND, key)])
        next_at += period
        delay = next_at - time.perf_counter()
        if delay > 0:
            time.sleep(delay)  # pacing the load, not waiting for a condition
    wait_done(client, "", n)
    started = {k: float(v) for k, v in client.hgetall(bench_keys()["latency"]).items()}
    samples = sorted((started[k] - t) * 1000 for k, t in sent.items())
    return statistics.median(samples), samples[min(len(samples) - 1, int(len(samples) * 0.99))]


def delayed_publish_lag(client: redis.Redis, n: int = 1000, spacing: float = 0.005) -> tuple[float, float]:
    """Requeue-afters due one every ``spacing`` s from 2 s on: due time → reconcile start (ms)."""
    reset_tallies(client)
    start = time.time() + 2.0
    due = {f"lat-due-{i}": start + i * spacing for i in range(n)}
    for key, at in due.items():
        enqueue_many_after([(KIND, key)], at - time.time(), client)
    wait_done(client, "", n)
    started = {k: float(v) for k, v in client.hgetall(bench_keys()["latency"]).items()}
    samples = sorted(max(0.0, started[k] - at) * 1000 for k, at in due.items())
    return statistics.median(samples), samples[min(len(samples) - 1, int(len(samples) * 0.99))]


def recovery(client: redis.Redis, url: str, workdir: Path, workers: int, concurrency: int) -> float:
    """Seconds from SIGKILL of a whole worker holding two running reconciles to both running again."""
    [victim] = start_workers(url, workdir, 1, concurrency, name="victim")
    others = [f"bench{i}@{socket.gethostname()}" for i in range(workers)]
    queue = f"mcm.{KIND}"
    app.control.cancel_consumer(queue, destination=others, reply=True, timeout=2.0)
    client.delete(bench_keys()["latency"])
    keys = [f"slow-rec-{i}" for i in range(concurrency)]
    enqueue_many([(KIND, key) for key in keys], client)
    latency_key = bench_keys()["latency"]
    wait_until(lambda: client.hlen(latency_key) == len(keys), timeout=60, interval=0.01, what="slow runs")
    app.control.add_consumer(queue, destination=others, reply=True, timeout=2.0)
    killed_at = time.time()
    os.killpg(victim.pid, signal.SIGKILL)

    def ran_again() -> bool:
        return all(float(client.hget(latency_key, key) or 0) > killed_at for key in keys)

    wait_until(ran_again, timeout=120, interval=0.05, what="the dead worker's keys to run again")
    again = max(float(client.hget(latency_key, key) or 0) for key in keys)
    wait_until(lambda: int(client.get(bench_keys()["done"]) or 0) >= len(keys), timeout=60)
    victim.stop()
    return again - killed_at


def best(fn: Callable[[], float], rounds: int) -> float:
    return max(fn() for _ in range(rounds))


def calibrate(args: argparse.Namespace, rounds: int = 2, tasks: int = 1000) -> None:
    """The host calibration the sandbox benchmarks save beside their CPU figures: CPU (workers and
    Redis) per empty Celery task, the least of ``rounds`` drains of ``tasks`` after a warm-up."""
    workdir = scratch_dir("mcm-bench-calibration-")
    server = RedisServer(workdir / "redis").start()
    apply_settings(configure({"redis_url": server.url}))
    client = get_redis()
    procs: list[ManagedProcess] = []
    try:
        procs = start_workers(server.url, workdir, args.workers, args.concurrency)
        groups = [proc.pid for proc in procs] + [server.process.pid if server.process else -1]
        publish = make_publisher(client, False)
        drain_rate(client, publish, groups, 200, True, "warm")
        runs = [drain_rate(client, publish, groups, tasks, True, f"c{r}") for r in range(rounds)]
    finally:
        for proc in procs:
            proc.stop()
        server.stop()
    result = {
        "cpu_ms_per_empty_task": round(min(c for _, c in runs), 3),
        "empty_task_rate": round(max(r for r, _ in runs), 1),
        "rounds": [[round(r, 1), round(c, 3)] for r, c in runs],
        "workers": args.workers,
        "concurrency": args.concurrency,
        "pool": get_settings().worker_pool,  # the workers' (they inherit MCM_WORKER_POOL): the sandbox's
        "load_avg": os.getloadavg(),
    }
    print(json.dumps(result))
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--no-informer", action="store_true", help="Publish with enqueue_many only.")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "queue.json"))
    parser.add_argument(
        "--calibration", action="store_true", help="only the host calibration (CPU per empty task), 2 rounds"
    )
    args = parser.parse_args()
    if args.calibration:
        calibrate(args)
        return

    load_before = [round(x, 2) for x in os.getloadavg()]  # the machine is shared: say how busy it was
    workdir = scratch_dir("mcm-bench-queue-")
    server = RedisServer(workdir / "redis").start()
    apply_settings(configure({"redis_url": server.url}))
    client = get_redis()
    use_informer = not args.no_informer and informer_path() is not None
    publish = make_publisher(client, use_informer)
    procs: list[ManagedProcess] = []
    try:
        procs = start_workers(server.url, workdir, args.workers, args.concurrency)
        groups = [proc.pid for proc in procs] + [server.process.pid if server.process else -1]
        # warm up both paths (imports, connections, script cache)
        drain_rate(client, publish, groups, 200, True, "warm")
        drain_rate(client, publish, groups, 200, False, "warm")
        empty_runs, noop_runs = [], []
        for r in range(args.rounds):
            empty_runs.append(drain_rate(client, publish, groups, args.tasks, True, f"a{r}"))
            noop_runs.append(drain_rate(client, publish, groups, args.tasks, False, f"b{r}"))
        empty_e2e = e2e_rate(client, publish, args.tasks, True, "ea")
        noop_e2e = e2e_rate(client, publish, args.tasks, False, "eb")
        raw_enqueue, informer_enqueue = enqueue_rate(client, args.workers, use_informer)
        p50, p99 = latency(client, publish)
        lag50, lag99 = delayed_publish_lag(client)
        recovered_after = recovery(client, server.url, workdir, args.workers, args.concurrency)
    finally:
        for proc in procs:
            proc.stop()
        server.stop()

    empty_rate, noop_rate = max(r for r, _ in empty_runs), max(r for r, _ in noop_runs)
    empty_cpu, noop_cpu = min(c for _, c in empty_runs), min(c for _, c in noop_runs)
    results = {
        "empty_task_rate": round(empty_rate, 1),
        "noop_reconcile_rate": round(noop_rate, 1),
        "ratio": round(noop_rate / empty_rate, 3),
        "enqueue_rate": round(informer_enqueue if informer_enqueue is not None else raw_enqueue, 1),
        "enqueue_many_rate": round(raw_enqueue, 1),
        "latency_p50_ms": round(p50, 2),
        "latency_p99_ms": round(p99, 2),
        "delayed_publish_lag_ms_p50": round(lag50, 2),
        "delayed_publish_lag_ms_p99": round(lag99, 2),
        "recovery_seconds": round(recovered_after, 2),
        "recovery_slow_reconcile_seconds": SLOW_SECONDS,
        "empty_task_rate_e2e": round(empty_e2e, 1),
        "noop_reconcile_rate_e2e": round(noop_e2e, 1),
        "ratio_e2e": round(noop_e2e / empty_e2e, 3),
        "cpu_ms_per_empty_task": round(empty_cpu, 3),
        "cpu_ms_per_noop_reconcile": round(noop_cpu, 3),
        "ratio_cpu": round(empty_cpu / noop_cpu, 3),
        "rounds": {"empty_task": [[round(r, 1), round(c, 3)] for r, c in empty_runs],
                   "noop_reconcile": [[round(r, 1), round(c, 3)] for r, c in noop_runs]},
        "config": {"workers": args.workers, "concurrency": args.concurrency, "tasks": args.tasks,
                   "cpus": os.cpu_count(), "informer_path": use_informer, "pool": get_settings().worker_pool,
                   "loadavg_before": load_before, "loadavg_after": [round(x, 2) for x in os.getloadavg()]},
    }  # fmt: skip
    print(json.dumps(results, indent=2))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
