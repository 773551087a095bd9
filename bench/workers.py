"""The workers the queue benchmark and the host calibration measure (bench/queue.py), and how it
drives them: ``mcm-tasks worker`` processes started on the benchmark's own Redis with the bench
reconcilers (``mcm_sandbox.testing.queue:install_bench``), their consumers paused and resumed over
Celery's remote control so a queue can be filled before it drains, publishers (through the
informer's write path, or ``enqueue_many``), the tallies the bench reconcilers keep in Redis, and the
CPU time of the workers' and Redis's process groups, which, unlike a rate, does not move with
whatever else the machine runs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import redis

from mcm_sandbox.procs import ManagedProcess, wait_until
from mcm_sandbox.testing.queue import bench_keys
from mcm_tasks.celery_app import app
from mcm_tasks.kinds import QUEUES
from mcm_tasks.queue import enqueue_many
from mcm_tasks.redisdb import get_redis

BENCH_QUEUE = "mcm.bench"
Publisher = Callable[[list[tuple[str, str]]], object]
KIND = "machine"


def informer_path() -> Callable[[list[tuple[str, str]]], object] | None:
    """The informer's write path (store → mirror → routing → ``enqueue_many``), or None when the
    informers package is not importable (then events go straight to ``enqueue_many``)."""
    try:
        from mcm_sandbox.testing.bench_hook import mirror_and_enqueue
    except ImportError:
        return None
    raw = get_redis(decode=False)
    return lambda items: mirror_and_enqueue(raw, items)


def make_publisher(client: redis.Redis, use_informer: bool) -> Callable[[list[tuple[str, str]]], object]:
    path = informer_path() if use_informer else None
    return path or (lambda items: enqueue_many(items, client))


def start_workers(
    url: str, workdir: Path, workers: int, concurrency: int, name: str = "bench"
) -> list[ManagedProcess]:
    env = {
        **os.environ,
        "MCM_REDIS_URL": url,
        "MCM_RECONCILER_MODULES": "mcm_sandbox.testing.queue:install_bench",
    }
    procs = []
    for i in range(workers):
        proc = ManagedProcess(
            [sys.executable, "-m", "mcm_tasks.worker_cli", "worker",
             "--queues", ",".join([*QUEUES, BENCH_QUEUE]), "--concurrency", str(concurrency),
             "--loglevel", "warning", "--hostname", f"{name}{i}@%h"],
            workdir / f"{name}{i}.log",
            env=env,
        )  # fmt: skip
        proc.start()
        procs.append(proc)
    expected = len(app.control.ping(timeout=0.5) or []) + workers if name != "bench" else workers

    def ready() -> bool:
        for proc in procs:
            if not proc.alive():
                raise RuntimeError(f"worker exited:\n{proc.log_tail()}")
        return len(app.control.ping(timeout=0.5) or []) >= expected

    wait_until(ready, timeout=120, interval=0.5, what="workers")
    return procs


def pause(queue: str, workers: int) -> None:
    replies = app.control.cancel_consumer(queue, reply=True, timeout=2.0)
    assert len(replies) >= workers, f"cancel_consumer {queue}: {replies}"


def resume(queue: str, workers: int) -> None:
    replies = app.control.add_consumer(queue, reply=True, timeout=2.0)
    assert len(replies) >= workers, f"add_consumer {queue}: {replies}"


def reset_tallies(client: redis.Redis) -> None:
    client.delete(*bench_keys().values())


def wait_done(client: redis.Redis, prefix: str, n: int, timeout: float = 300) -> tuple[float, float]:
    keys = bench_keys()
    wait_until(lambda: int(client.get(keys[f"{prefix}done"]) or 0) >= n, timeout=timeout, interval=0.05)
    return float(client.get(keys[f"{prefix}first"]) or 0), float(client.get(keys[f"{prefix}last"]) or 0)


def publish_empty(n: int) -> None:
    with app.producer_or_acquire() as producer:
        for _ in range(n):
            app.send_task("mcm.bench.empty", queue=BENCH_QUEUE, producer=producer)


def publish_reconciles(publish: Publisher, n: int, tag: str, batch: int = 100) -> None:
    for start in range(0, n, batch):
        publish([(KIND, f"{tag}-{i}") for i in range(start, min(n, start + batch))])


def cpu_seconds(groups: list[int]) -> float:
    """CPU time (user + system) used so far by every process in these process groups: the
    workers (main and pool processes) and redis-server. Unlike a rate, it does not depend on what
    else the machine runs at the time."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) in groups:  # pgrp; then utime, stime at fields[11], fields[12]
            total += int(fields[11]) + int(fields[12])
    return total / tick
