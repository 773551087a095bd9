"""Reconcilers for the contract's tests and benchmark, loaded into real workers through
``MCM_RECONCILER_MODULES=mcm_sandbox.testing.queue:install_recorder`` (or ``:install_bench``).

The recorder writes what it sees to Redis, so a test in another process can check the contract:
every run as ``kind|key|start|end|pid`` in a list, the run in progress per key, and in a set the
keys whose run started while another live process was inside a run of the same key. What a
key's run does (sleep, fail, requeue) is set per key, or for all keys under ``*``, in a
behaviour hash.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import orjson
import redis

from mcm_tasks.kinds import QUEUES
from mcm_tasks.queue.policy import Requeue
from mcm_tasks.queue.registry import Reconciler, register_reconciler
from mcm_tasks.redisdb import get_redis, rkey


class InjectedFailure(RuntimeError):
    pass


@dataclass(frozen=True)
class RecorderKeys:
    runs: str
    overlaps: str
    current: str
    behaviour: str
    counts: str

    @classmethod
    def make(cls) -> RecorderKeys:
        return cls(*(rkey("test", name) for name in ("runs", "overlaps", "current", "behaviour", "counts")))


def set_behaviour(client: redis.Redis, kind: str, key: str, **behaviour: Any) -> None:
    """``sleep`` seconds (for the first ``sleep_runs`` runs, default all), ``fail`` the first n runs
    (with ``message``), ``requeue`` seconds (for the first ``requeue_runs`` runs, default all).
    ``key`` ``*``: every key of ``kind`` without a behaviour of its own."""
    client.hset(RecorderKeys.make().behaviour, f"{kind}:{key}", orjson.dumps(behaviour))


@dataclass(frozen=True)
class Run:
    kind: str
    key: str
    start: float
    end: float
    pid: int


def read_runs(client: redis.Redis) -> list[Run]:
    out = []
    for raw in client.lrange(RecorderKeys.make().runs, 0, -1):
        text = raw.decode() if isinstance(raw, bytes) else raw
        kind, rest = text.split("|", 1)
        key, start, end, pid = rest.rsplit("|", 3)
        out.append(Run(kind, key, float(start), float(end), int(pid)))
    return out


_RELEASE = "if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then redis.call('HDEL', KEYS[1], ARGV[1]) end"


def _alive(pid: int) -> bool:
    """Whether a pid runs (a killed reconcile leaves its entry behind; that is not an overlap)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def recording_reconciler(kind: str) -> Reconciler:
    def reconcile(key: str) -> Requeue | None:
        client = get_redis()
        keys = RecorderKeys.make()
        name = f"{kind}:{key}"
        start = time.time()
        me = f"{start}|{os.getpid()}"
        pipe = client.pipeline(transaction=True)  # read the previous holder and take its place at once
        pipe.hget(keys.current, name)
        pipe.hset(keys.current, name, me)
        pipe.hincrby(keys.counts, name, 1)
        pipe.hmget(keys.behaviour, name, f"{kind}:*", "*")
        previous, _, run_number, (own, kind_default, default) = pipe.execute()
        if previous and _alive(int(previous.split("|")[1])):
            client.sadd(keys.overlaps, name)  # another process is inside this key's reconcile
        behaviour = orjson.loads(own or kind_default or default or b"{}")
        try:
            if behaviour.get("sleep") and run_number <= behaviour.get("sleep_runs", 1 << 30):
                time.sleep(float(behaviour["sleep"]))
            if run_number <= int(behaviour.get("fail", 0)):
                raise InjectedFailure(behaviour.get("message", f"injected failure {run_number}"))
            if behaviour.get("requeue") is not None and run_number <= behaviour.get("requeue_runs", 1 << 30):
                return Requeue(float(behaviour["requeue"]))
            return None
        finally:
            pipe = client.pipeline(transaction=False)
            pipe.eval(_RELEASE, 1, keys.current, name, me)
            pipe.rpush(keys.runs, f"{kind}|{key}|{start}|{time.time()}|{os.getpid()}")
            pipe.execute()

    return reconcile


def install_recorder() -> None:
    for kind in QUEUES:
        register_reconciler(kind, recording_reconciler(kind))


# --- benchmark ---------------------------------------------------------------------------------


def bench_keys() -> dict[str, str]:
    names = ("done", "first", "last", "latency", "empty_done", "empty_first", "empty_last")
    return {name: rkey("bench", name) for name in names}


def _tally(client: redis.Redis, prefix: str, started: float) -> None:
    keys = bench_keys()
    pipe = client.pipeline(transaction=False)
    pipe.set(keys[f"{prefix}first"], started, nx=True)
    pipe.incr(keys[f"{prefix}done"])
    pipe.set(keys[f"{prefix}last"], time.time())
    pipe.execute()


#: how long a ``slow-`` key's reconcile takes
SLOW_SECONDS = 5.0

#: the cache kind a no-op reconcile reads per queue (others read a plain key)
_CACHE_KIND = {"machine": "machines", "machine-termination": "machines", "machineset": "machinesets"}


def noop_reconciler(kind: str) -> Reconciler:
    """Reads its object from the informers' cache (``mcm_tasks.cache``) and is done; keys starting
    with ``lat-`` also record their start time for the latency figure, keys starting with ``slow-``
    record it and take ``SLOW_SECONDS`` (the recovery figure)."""
    from mcm_tasks.cache import get_reader

    cache_kind = _CACHE_KIND.get(kind)

    def reconcile(key: str) -> Requeue | None:
        started = time.time()
        client = get_redis()
        if key.startswith("slow-"):  # the recovery figure: long enough to be killed in the middle
            client.hset(bench_keys()["latency"], key, started)
            time.sleep(SLOW_SECONDS)
        if cache_kind:
            get_reader().get(cache_kind, key)
        else:
            client.get(rkey("cache", kind, key))
        if key.startswith("lat-"):
            client.hset(bench_keys()["latency"], key, started)
        _tally(client, "", started)
        return None

    return reconcile


def install_bench() -> None:
    from mcm_tasks.celery_app import app

    for kind in QUEUES:
        register_reconciler(kind, noop_reconciler(kind))

    @app.task(name="mcm.bench.empty", ignore_result=True, typing=False)
    def empty() -> None:
        _tally(get_redis(), "empty_", time.time())
