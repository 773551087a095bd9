"""The queue contract with real Celery worker processes (two workers, two pool processes each),
a real redis-server and the recording reconciler (mcm_sandbox.testing.queue). The kill and shutdown
tests run on both pools (``ON_BOTH_POOLS``): the default ``threads`` (one process per worker, two
threads) and ``prefork`` (a main process and two pool processes); the rest on prefork.

Time is compressed through MCM_ settings in the workers' environment: lock TTL 4 s, visibility
timeout 8 s, a worker lost after 3 s of silence, retries in fractions of a second.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import redis
from kombu.exceptions import OperationalError
from kubernetes.client import ApiClient

from informers.sink import QueueSink
from mcm_sandbox.crds import install_crds
from mcm_sandbox.procs import ApiServer, ManagedProcess, RedisServer, wait_until
from mcm_sandbox.testing import fixtures as fx
from mcm_sandbox.testing.informers import InformerThread, sandbox_settings
from mcm_sandbox.testing.queue import RecorderKeys, Run, read_runs, set_behaviour
from mcm_tasks import kinds
from mcm_tasks.kube import ops
from mcm_tasks.queue import enqueue, enqueue_after, enqueue_many
from mcm_tasks.queue.messages import broker_prefix, queue_keys
from mcm_tasks.queue.producer import enqueue_many_after, enqueue_together
from mcm_tasks.queue.scripts import BUCKETS
from mcm_tasks.queue.state import failing
from mcm_tasks.queue.stats import read_stats
from mcm_tasks.redisdb import get_redis
from mcm_tasks.settings import configure, reset_settings

pytestmark = pytest.mark.integration

COMPRESSED = {
    "reconcile_lock_ttl": "4",
    "visibility_timeout": "8",
    "long_retry": "2",
    "resource_exhausted_retry": "2",
    "class_resync_period": "2",
    "medium_retry": "1",
    "short_retry": "0.5",
    "error_backoff_base": "0.02",
    "error_backoff_max": "0.3",
    "poison_after": "3",
    "worker_lost_timeout": "3",
    "expectations_timeout": "2",
    "background_aging": "1",
}
WORKERS = 2
#: a test that must hold on either worker layout: its own cluster per pool
ON_BOTH_POOLS = pytest.mark.parametrize("cluster", ["threads", "prefork"], indirect=True)


class Cluster:
    """Two worker processes on their own redis-server, restartable one by one."""

    def __init__(self, workdir: Path, pool: str = "prefork") -> None:
        self.workdir = workdir
        self.redis = RedisServer(workdir / "redis").start()
        self.env = {
            **os.environ,
            "MCM_WORKER_POOL": pool,
            "MCM_REDIS_URL": self.redis.url,
            "MCM_RECONCILER_MODULES": "mcm_sandbox.testing.queue:install_recorder",
            **{f"MCM_{k.upper()}": v for k, v in COMPRESSED.items()},
        }
        self.workers: list[ManagedProcess | None] = [None] * WORKERS
        self.pinger: Any = None
        self.starts = 0

    def start(self, i: int) -> None:
        self.starts += 1
        proc = ManagedProcess(
            [sys.executable, "-m", "mcm_tasks.worker_cli", "worker", "--concurrency", "2",
             "--loglevel", "warning", "--hostname", f"w{i}-{self.starts}@%h"],
            self.workdir / f"worker{i}.log",
            env=self.env,
        )  # fmt: skip
        proc.start()
        self.workers[i] = proc

    def ensure_running(self) -> None:
        for i, proc in enumerate(self.workers):
            if proc is None or not proc.alive():
                self.start(i)
        wait_until(self.all_answer, timeout=90, interval=0.5, what="workers to answer a ping")

    def all_answer(self) -> bool:
        from celery import Celery

        from mcm_tasks.celery_app import celery_config
        from mcm_tasks.settings import get_settings

        if (
            self.pinger is None
        ):  # an app of its own: the process-wide one may be bound to another cluster's Redis
            self.pinger = Celery("queue-contract-ping", set_as_current=False)
            self.pinger.conf.update(celery_config(get_settings()))
        app = self.pinger
        for proc in self.workers:
            if proc is not None and not proc.alive():
                raise RuntimeError(f"worker exited:\n{proc.log_tail()}")
        try:
            replies = app.control.ping(timeout=0.5) or []
        except (redis.exceptions.ConnectionError, OSError, OperationalError):
            return False  # our own broker connection died with a restarted Redis; the next poll reconnects
        return len(replies) >= WORKERS

    def worker_of(self, pid: int) -> ManagedProcess:
        group = os.getpgid(pid)
        return next(p for p in self.workers if p is not None and p.pid == group)

    def stop(self) -> None:
        for proc in self.workers:
            if proc is not None:
                proc.stop()
        if self.pinger is not None:
            self.pinger.close()
        self.redis.stop()


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    from mcm_tasks.celery_app import apply_settings

    pool = getattr(request, "param", "prefork")
    c = Cluster(tmp_path_factory.mktemp(f"queue-contract-{pool}"), pool)
    apply_settings(configure({"redis_url": c.redis.url, **COMPRESSED}))
    try:
        c.ensure_running()
        yield c
    finally:
        c.stop()
        reset_settings()


@pytest.fixture()
def client(cluster: Cluster) -> Iterator[redis.Redis]:
    cluster.ensure_running()
    r = get_redis()
    wait_until(lambda: quiet(r), timeout=60, what="the previous test's work to drain")
    for pattern in ("mcm:q:*", "mcm:test:*", "mcm:exp:*"):
        keys = list(r.scan_iter(pattern))
        if keys:
            r.delete(*keys)
    yield r


def quiet(r: redis.Redis) -> bool:
    busy = any(s.queued_messages or s.pending or s.delayed or s.running or s.dirty for s in read_stats(r))
    return not busy and r.hlen(broker_prefix() + "unacked") == 0


def runs_of(r: redis.Redis, key: str, after: float = 0.0) -> list[Run]:
    return [run for run in read_runs(r) if run.key == key and run.start > after]


def check_no_overlap(r: redis.Redis, runs: list[Run]) -> None:
    assert r.smembers(RecorderKeys.make().overlaps) == set()
    by_key: dict[tuple[str, str], list[Run]] = defaultdict(list)
    for run in runs:
        by_key[(run.kind, run.key)].append(run)
    for key, key_runs in by_key.items():
        key_runs.sort(key=lambda run: run.start)
        for before, after in itertools.pairwise(key_runs):
            assert after.start >= before.end, f"{key}: runs overlap {before} {after}"


def _more_runs_than(r: redis.Redis, n: int) -> bool:
    return int(r.llen(RecorderKeys.make().runs)) > n


def test_storm_of_10000_events_over_200_keys(client: redis.Redis) -> None:
    keys = [f"ns/m{i:03d}" for i in range(200)]
    client.hset(RecorderKeys.make().behaviour, "*", '{"sleep": 0.002}')
    rng = random.Random(4)
    last_event: dict[str, float] = {}
    broker_list = queue_keys("machine").broker_list
    runs_key = RecorderKeys.make().runs
    worst = 0
    for _ in range(100):
        batch = [("machine", rng.choice(keys)) for _ in range(100)]
        seen = int(client.llen(runs_key))
        sent_at = time.time()
        enqueue_many(batch)
        for _, key in batch:
            last_event[key] = sent_at
        waiting = client.llen(broker_list)
        worst = max(worst, waiting)
        assert waiting <= len(keys), "queue length beyond distinct keys"
        # let the workers make progress between batches so events keep landing on running keys
        wait_until(partial(_more_runs_than, client, seen), timeout=30, interval=0.002)
    wait_until(lambda: quiet(client), timeout=180, interval=0.2, what="the storm to drain")

    runs = read_runs(client)
    check_no_overlap(client, runs)
    last_start: dict[str, float] = {}
    for run in runs:
        last_start[run.key] = max(last_start.get(run.key, 0.0), run.start)
    missed = [key for key, at in last_event.items() if last_start.get(key, 0.0) <= at]
    assert missed == [], "events not followed by a reconcile that started after them"
    assert len(runs) < 10_000, "coalescing"
    assert len({os.getpgid(run.pid) for run in runs if _alive(run.pid)}) == WORKERS, "both workers took part"
    dirty_reruns = read_stats(client)[0].adds
    print(f"storm: {len(runs)} reconciles for 10000 events, worst queue length {worst}, adds {dirty_reruns}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


@ON_BOTH_POOLS
def test_events_during_a_reconcile_cause_exactly_one_more(client: redis.Redis) -> None:
    set_behaviour(client, "node", "n1", sleep=1.0, sleep_runs=1)
    enqueue("node", "n1")
    current = RecorderKeys.make().current
    wait_until(lambda: client.hexists(current, "node:n1"), timeout=20, what="the first reconcile")
    assert [enqueue("node", "n1") for _ in range(5)] == [False] * 5
    wait_until(lambda: len(runs_of(client, "n1")) == 2 and quiet(client), timeout=30)
    assert len(runs_of(client, "n1")) == 2
    check_no_overlap(client, read_runs(client))


def _start_victim(client: redis.Redis, key: str) -> int:
    set_behaviour(client, "machine", key, sleep=3.0, sleep_runs=1)
    enqueue("machine", key)
    current = RecorderKeys.make().current
    wait_until(lambda: client.hexists(current, f"machine:{key}"), timeout=20, what="the victim to start")
    return int(str(client.hget(current, f"machine:{key}")).split("|")[1])


def test_pool_process_killed_mid_reconcile_is_reconciled_again(client: redis.Redis) -> None:
    pid = _start_victim(client, "victim-1")
    killed_at = time.time()
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: bool(runs_of(client, "victim-1", after=killed_at)), timeout=30, what="the rerun")
    wait_until(lambda: quiet(client), timeout=30)
    assert len(runs_of(client, "victim-1")) == 1, "only the rerun completed"
    assert client.hget(queue_keys("machine").failures, "victim-1") is None, "success reset the count"


@ON_BOTH_POOLS
def test_worker_killed_mid_reconcile_is_reconciled_again(cluster: Cluster, client: redis.Redis) -> None:
    pid = _start_victim(client, "victim-2")
    killed_at = time.time()
    victim = cluster.worker_of(pid)
    victim.kill()  # the whole worker: main process and pool, SIGKILL
    # its unacknowledged message comes back after worker_lost_timeout (3 s), not the visibility
    # timeout (8 s), via the other worker's sweep
    wait_until(lambda: bool(runs_of(client, "victim-2", after=killed_at)), timeout=60, what="the rerun")
    [run] = runs_of(client, "victim-2")
    assert os.getpgid(run.pid) != victim.pid
    assert run.start - killed_at < 3 + 3, "back within worker_lost_timeout and a sweep, not visibility"
    assert read_stats(client)[0].recovered >= 1
    check_no_overlap(client, read_runs(client))


def test_redis_restarted_empty_then_resync_reconciles_every_key(
    cluster: Cluster, client: redis.Redis
) -> None:
    keys = [f"ns/r{i}" for i in range(50)]
    client.hset(RecorderKeys.make().behaviour, "*", '{"sleep": 0.05}')
    enqueue_many(("machineset", key) for key in keys)
    wait_until(lambda: read_stats(client)[2].running > 0, timeout=20, what="reconciles in flight")
    starts = cluster.starts
    restarted_at = time.time()
    cluster.redis.restart_empty()
    wait_until(cluster.all_answer, timeout=60, interval=0.5, what="workers to reconnect")
    assert enqueue_many(("machineset", key) for key in keys) == len(keys)  # the informer's resync

    def every_key_ran() -> bool:
        return {run.key for run in read_runs(client) if run.start > restarted_at} >= set(keys)

    wait_until(every_key_ran, timeout=60, what="every key reconciled after the restart")
    check_no_overlap(client, [run for run in read_runs(client) if run.start > restarted_at])
    # the same worker processes rode the outage out: none died and had to be started again. Each
    # answers a ping within a few polls: one 0.5 s ping was a race with the pool's last acks
    wait_until(cluster.all_answer, timeout=15, interval=0.5, what="workers to answer a ping")
    assert cluster.starts == starts


def _machine_in(namespace: str, name: str) -> dict[str, object]:
    body = fx.machine(name)
    meta = {k: v for k, v in body["metadata"].items() if k not in ("uid", "resourceVersion", "generation")}
    return {**{k: v for k, v in body.items() if k != "status"}, "metadata": {**meta, "namespace": namespace}}


def test_whole_chain_from_the_api_server_to_the_workers_survives_redis_loss(
    cluster: Cluster, client: redis.Redis, apiserver: ApiServer, kube_api: ApiClient
) -> None:
    """The sandbox API server, the informer with the queue sink and the two workers, with nothing
    enqueued by the test: every create and every spec change is followed by a reconcile of its key
    that started after it, and after Redis restarts empty the informer notices, re-lists and every
    key is reconciled again."""
    install_crds(kube_api)
    namespace = f"chain-{os.getpid()}-{int(time.time())}"
    ops.create(kube_api, kinds.NAMESPACE.resource, {"metadata": {"name": namespace}})
    names = [f"m{i:02d}" for i in range(20)]
    keys = [f"{namespace}/{name}" for name in names]

    def ran_since(moments: dict[str, float]) -> bool:
        runs = [run for run in read_runs(client) if run.kind == "machine"]
        return all(any(run.key == key and run.start > at for run in runs) for key, at in moments.items())

    settings = sandbox_settings(apiserver.kubeconfig, cluster.redis.url, namespace)
    with InformerThread(settings, identity="chain", sink=QueueSink()) as informer:
        wait_until(informer.synced, timeout=30, what="informer synced")
        created: dict[str, float] = {}
        for name, key in zip(names, keys, strict=True):
            created[key] = time.time()
            ops.create(kube_api, kinds.MACHINE.resource, _machine_in(namespace, name), namespace)
        wait_until(lambda: ran_since(created), timeout=60, what="a reconcile after every create")

        patched: dict[str, float] = {}
        for name, key in zip(names, keys, strict=True):
            patched[key] = time.time()
            ops.patch(
                kube_api, kinds.MACHINE.resource, name, {"spec": {"providerID": f"p-{name}"}}, namespace
            )
        wait_until(lambda: ran_since(patched), timeout=60, what="a reconcile after every spec change")

        restarted_at = time.time()
        cluster.redis.restart_empty()
        wait_until(cluster.all_answer, timeout=60, interval=0.5, what="workers to reconnect")
        wait_until(
            lambda: ran_since(dict.fromkeys(keys, restarted_at)),
            timeout=60,
            what="every key reconciled again after Redis came back empty",
        )
        assert informer.informer.counters["redis_lost"] >= 1
    check_no_overlap(client, [run for run in read_runs(client) if run.start > restarted_at])


def test_requeue_after_comes_back_by_countdown(client: redis.Redis) -> None:
    set_behaviour(client, "machineclass", "c1", requeue=0.5, requeue_runs=2)
    enqueue("machineclass", "c1")
    wait_until(lambda: len(runs_of(client, "c1")) == 3 and quiet(client), timeout=30)
    runs = sorted(runs_of(client, "c1"), key=lambda run: run.start)
    assert len(runs) == 3
    for before, after in itertools.pairwise(runs):
        assert after.start - before.end >= 0.45, "came back before its countdown"


def test_countdowns_per_key_keep_only_the_earliest(client: redis.Redis) -> None:
    for _ in range(5):
        enqueue_after("machineclass", "c2", 3.0)
    enqueue_after("machineclass", "c2", 0.5)
    wait_until(lambda: bool(runs_of(client, "c2")), timeout=20)
    wait_until(lambda: quiet(client), timeout=30, what="the superseded countdown to fire")
    assert len(runs_of(client, "c2")) == 1


def _cli(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mcm_tasks.worker_cli", "admin", *args],
        env=cluster.env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_failures_back_off_to_the_ceiling_and_keep_retrying(cluster: Cluster, client: redis.Redis) -> None:
    set_behaviour(client, "machine", "bad", fail=100, message="boom password=hunter2")
    enqueue("machine", "bad")
    # backoff 0.02 s doubling to the 0.3 s ceiling: well past where the dead letter used to stop it
    wait_until(lambda: len(runs_of(client, "bad")) >= 12, timeout=30, what="retries past the ceiling")
    [entry] = failing("machine", client)
    assert entry.error == "InjectedFailure" and entry.count >= 11 and "hunter2" not in entry.message

    listing = _cli(cluster, "deadletter", "ls")
    assert listing.returncode == 0 and "bad" in listing.stdout and "hunter2" not in listing.stdout
    set_behaviour(client, "machine", "bad")  # the fault clears: the next retry succeeds by itself
    wait_until(lambda: not failing("machine", client) and quiet(client), timeout=30)
    assert client.hget(queue_keys("machine").failures, "bad") is None
    queues = _cli(cluster, "queues")
    assert queues.returncode == 0 and "machine-termination" in queues.stdout


def test_garbage_messages_are_dropped_and_workers_carry_on(client: redis.Redis) -> None:
    from mcm_tasks.celery_app import app

    app.send_task("mcm.reconcile.machine", args=[123])
    app.send_task("mcm.reconcile.machine", args=["a", "b"])
    app.send_task("mcm.reconcile.machine", kwargs={"key": "x"})
    app.send_task("mcm.reconcile.bogus", args=["x"], queue="mcm.machine")
    app.send_task("mcm.reconcile.machine", args=["pickled"], serializer="pickle")  # JSON only: refused
    enqueue("machine", "after-garbage")
    wait_until(lambda: bool(runs_of(client, "after-garbage")) and quiet(client), timeout=30)
    assert {run.key for run in read_runs(client)} == {"after-garbage"}


def _rss_kb(group: int) -> int:
    """Resident memory of every process in a process group (a worker: main process and pool)."""
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[2]) != group:
                    continue
            with open(f"/proc/{entry.name}/status") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        except (OSError, StopIteration, ValueError):
            continue
    return total


def test_10000_delayed_keys_wait_in_redis_and_are_published_on_time(
    cluster: Cluster, client: redis.Redis
) -> None:
    """10 000 requeue-afters, due over 10 s from 8 s on: while they wait, no worker holds a message
    for them and no worker's memory grows; each is published within 1 s of its due time."""
    groups = [proc.pid for proc in cluster.workers if proc is not None]
    baseline = {group: _rss_kb(group) for group in groups}
    keys = [f"d{i:05d}" for i in range(10_000)]
    first_due = time.time() + 8
    for start in range(0, len(keys), 100):  # 100 keys per 0.1 s of due times
        due = first_due + start / 1000
        enqueue_many_after([("node", key) for key in keys[start : start + 100]], due - time.time())
    qk = queue_keys("node")
    assert client.zcard(qk.delayed) == 10_000
    wait_until(lambda: time.time() > first_due - 2, timeout=10, interval=0.2, what="the keys to wait")
    assert client.llen(qk.broker_list) == 0 and client.hlen(broker_prefix() + "unacked") == 0
    grown = {group: _rss_kb(group) - kb for group, kb in baseline.items()}
    assert all(kb < 10_000 for kb in grown.values()), f"worker memory grew while keys waited: {grown} KiB"

    wait_until(lambda: client.zcard(qk.delayed) == 0 and quiet(client), timeout=180, interval=0.5)
    assert {run.key for run in read_runs(client) if run.kind == "node"} >= set(keys)
    metrics = client.hgetall(qk.metrics)
    lags = [int(metrics.get(f"delay_lag:{i}", 0)) for i in range(1, len(BUCKETS) + 2)]
    assert sum(lags) == 10_000
    late = sum(lags[BUCKETS.index(1.0) + 1 :])
    assert late == 0, f"{late} keys published more than 1 s after their due time"
    print(f"memory growth while 10 000 keys waited: {grown} KiB; publish lag buckets: {lags}")


@ON_BOTH_POOLS
def test_sigterm_lets_running_reconciles_finish_and_hands_back_the_rest(
    cluster: Cluster, client: redis.Redis
) -> None:
    """A rolling update: SIGTERM is Celery's warm shutdown. The reconcile running on the worker
    finishes (no second run), what it had not started goes back to the queue at once, and every
    key runs exactly once."""
    keys = [f"term-{i}" for i in range(8)]
    for key in keys:
        set_behaviour(client, "machine", key, sleep=1.5)
    enqueue_many(("machine", key) for key in keys)
    current = RecorderKeys.make().current
    wait_until(lambda: client.hexists(current, "machine:term-0"), timeout=20, what="term-0 to start")
    victim = cluster.worker_of(int(str(client.hget(current, "machine:term-0")).split("|")[1]))
    stopped_at = time.time()
    os.kill(victim.pid, signal.SIGTERM)
    wait_until(lambda: not victim.alive(), timeout=30, what="the worker to exit after its runs")
    assert time.time() - stopped_at < 3 + 5, "the shutdown waited only for the running reconciles"
    wait_until(lambda: quiet(client), timeout=60, what="every key to run")
    runs = [run for run in read_runs(client) if run.key in keys]
    assert sorted(run.key for run in runs) == keys, "each key ran exactly once"
    assert all(run.end - run.start >= 1.4 for run in runs), "no run was cut short"


def test_a_resync_waits_behind_user_facing_work(client: redis.Redis) -> None:
    """An informer resync's keys (background priority) are taken after every user-facing message
    waiting: a user's change enqueued after 60 resync keys runs before most of them (the workers
    had already taken a few, prefetch included)."""
    resync = [f"resync-{i}" for i in range(60)]
    for key in [*resync, "user"]:
        set_behaviour(client, "machine", key, sleep=0.05)
    enqueue_together([("machine", key) for key in resync], (), 0.0, background=True)
    enqueue_many([("machine", "user")])
    wait_until(lambda: quiet(client), timeout=60, what="every key to run")
    order = [run.key for run in sorted(read_runs(client), key=lambda run: run.start)]
    assert sorted(order) == sorted([*resync, "user"])
    assert order.index("user") < 12, f"the user's key ran {order.index('user')}th"


def test_a_resync_is_not_starved_by_a_stream_of_user_facing_work(client: redis.Redis) -> None:
    """Aging (controller-runtime #3496): while user-facing keys keep every slot busy for 5 s, a
    resync's key still runs once it waited --background-aging (1 s here), well before the stream ends."""
    users = [f"stream-{i}" for i in range(200)]
    for key in users:
        set_behaviour(client, "machine", key, sleep=0.1)
    set_behaviour(client, "machine", "aged", sleep=0.01)
    enqueue_many(("machine", key) for key in users)
    started = time.time()
    enqueue_together([("machine", "aged")], (), 0.0, background=True)
    wait_until(lambda: quiet(client), timeout=90, what="every key to run")
    runs = sorted(read_runs(client), key=lambda run: run.start)
    aged = next(run for run in runs if run.key == "aged")
    assert aged.start - started < 1 + 0.5 + 1.5, f"the resync waited {aged.start - started:.1f}s"
    assert aged.start < runs[-1].start - 1, "it ran while user-facing work still waited"
    assert int(client.hget(queue_keys("machine").metrics, "aged") or 0) == 1
