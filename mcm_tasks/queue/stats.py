"""A snapshot of every queue read from Redis in one round trip: the admin CLI's table and the
Prometheus collector both read it, so they agree."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from mcm_tasks.kinds import QUEUES
from mcm_tasks.queue.messages import QUARANTINE, queue_keys
from mcm_tasks.queue.scripts import BUCKETS
from mcm_tasks.redisdb import get_redis
from mcm_tasks.settings import Settings, get_settings


@dataclass
class Histogram:
    #: non-cumulative counts per bucket of BUCKETS, then +Inf
    counts: list[int]
    total: float

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, int]]:
        out, running = [], 0
        for bound, n in zip([*(repr(b) for b in BUCKETS), "+Inf"], self.counts, strict=True):
            running += n
            out.append((bound, running))
        return out


@dataclass
class QueueStats:
    kind: str
    queued_messages: int  # messages in the broker list (immediate and not yet fetched countdowns)
    pending: int  # keys with an immediate message on its way: the workqueue depth
    delayed: int  # keys in the delayed set (requeue-after, error backoff)
    running: int
    dirty: int
    failing: int  # keys whose last reconcile failed (retried at the backoff, forever)
    quarantined: int  # poison keys held until their retry at long-retry
    adds: int
    retries: int
    recovered: int  # messages restored from dead workers (``count_recovered``)
    unfinished_seconds: float
    longest_running_seconds: float
    queue_duration: Histogram = field(repr=False)
    work_duration: Histogram = field(repr=False)


#: the field of ``mcm:q:<kind>:metrics`` counting messages restored from dead workers
RECOVERED_FIELD = "recovered"


def count_recovered(kind: str, n: int = 1, client: redis.Redis | None = None) -> None:
    """Count ``n`` messages of ``kind`` restored from a dead worker (``mcm_workqueue_recovered_total``).
    A Lua script may do the same in its own atomic step: ``HINCRBY <metrics key> recovered n``."""
    if n:
        (client or get_redis()).hincrby(queue_keys(kind).metrics, RECOVERED_FIELD, n)


def _histogram(metrics: dict[str, str], name: str) -> Histogram:
    counts = [int(metrics.get(f"{name}:{i}", 0)) for i in range(1, len(BUCKETS) + 2)]
    return Histogram(counts, int(metrics.get(f"{name}:sum_us", 0)) / 1e6)


_QUEUED = "return redis.call('LLEN', KEYS[1]) + redis.call('LLEN', KEYS[2])"


def read_stats(client: redis.Redis | None = None, settings: Settings | None = None) -> list[QueueStats]:
    """Every queue of the installation, or of the tenant whose work runs here (seed mode)."""
    return read_many(client, [settings or get_settings()])[0]


def read_many(client: redis.Redis | None, views: Sequence[Settings]) -> list[list[QueueStats]]:
    """``read_stats`` for each settings view (seed mode: each tenant's), in one round trip."""
    client = client or get_redis()
    pipe = client.pipeline(transaction=False)
    for settings in views:
        for kind in QUEUES:
            qk = queue_keys(kind, settings)
            pipe.eval(_QUEUED, 2, qk.broker_list, qk.background_list)  # user-facing and background
            pipe.hlen(qk.pending)
            pipe.zcard(qk.delayed)
            pipe.hgetall(qk.locks)
            pipe.scard(qk.dirty)
            pipe.hlen(qk.failing)
            pipe.hgetall(qk.metrics)
    replies = pipe.execute()
    now = time.time()
    step = 7 * len(QUEUES)
    return [_parse(replies[i * step : (i + 1) * step], now) for i in range(len(views))]


def _parse(replies: list[Any], now: float) -> list[QueueStats]:
    out = []
    for i, kind in enumerate(QUEUES):
        llen, pending, delayed, locks, dirty, failing, metrics = replies[i * 7 : i * 7 + 7]
        metrics = {_text(k): _text(v) for k, v in metrics.items()}
        ages, quarantined = [], 0
        for value in locks.values():
            expires, started, holder = _text(value).split("|", 2)
            if holder == QUARANTINE:
                quarantined += float(expires) > now
            elif float(expires) > now:
                ages.append(max(0.0, now - float(started)))
        out.append(
            QueueStats(
                kind=kind,
                queued_messages=llen,
                pending=pending,
                delayed=delayed,
                running=len(ages),
                dirty=dirty,
                failing=failing,
                quarantined=quarantined,
                adds=int(metrics.get("adds", 0)),
                retries=int(metrics.get("retries", 0)),
                recovered=int(metrics.get(RECOVERED_FIELD, 0)),
                unfinished_seconds=sum(ages),
                longest_running_seconds=max(ages, default=0.0),
                queue_duration=_histogram(metrics, "queue"),
                work_duration=_histogram(metrics, "work"),
            )
        )
    return out


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
