"""What the queues hold right now, per key: read functions for the admin CLI, metrics and tests.

Everything is read from Redis (nothing lives only in a worker), so any process sees the same:

- ``failing``: keys whose last reconcile failed (or whose worker died under them), with the
  streak's count, first and last time, error and next retry. They are retried at the backoff
  ceiling forever; a quarantined key (a poison message) at long-retry.
- ``delayed``: keys waiting in the delayed sets (requeue-after, error backoff) and when they are due.
- ``running``: keys whose reconcile holds the lock, since when and under which message.
- ``workers``: the workers' heartbeats (a worker silent for ``worker_lost_timeout`` is dead and its
  messages are restored by the sweep).
- ``replay`` / ``replay_failing``: forget a key's failure streak and reconcile it now.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import orjson
import redis
from pydantic import BaseModel

from mcm_tasks.kinds import QUEUES
from mcm_tasks.queue.messages import QUARANTINE, queue_keys, workers_key
from mcm_tasks.queue.producer import enqueue
from mcm_tasks.redisdb import get_redis


class Failing(BaseModel):
    """A key whose reconciles fail (``mcm:q:<kind>:failing``)."""

    kind: str
    key: str
    #: error class (``WorkerLost`` when the worker died during the reconcile)
    error: str
    #: redacted message (no secret values, at most policy.MAX_MESSAGE characters)
    message: str
    #: consecutive failures
    count: int
    #: first failure of the streak, last failure (epoch seconds)
    since: float
    time: float
    #: a poison message: its worker died ``poison_after`` times in a row; held until ``retry_at``
    quarantined: bool = False
    #: when the next attempt is due (epoch seconds)
    retry_at: float = 0.0
    #: the streak's Warning Event was written on the object (False: owed, written later)
    reported: bool = True


class Delayed(BaseModel):
    kind: str
    key: str
    due: float


class Running(BaseModel):
    kind: str
    key: str
    started: float
    #: the lock's expiry: a reconcile cannot run past it (time limits sit below)
    expires: float
    message_id: str


class Worker(BaseModel):
    name: str
    last_beat: float


def _kinds(kind: str | None) -> Iterable[str]:
    if kind is None:
        return QUEUES
    queue_keys(kind)  # raises ValueError for an unknown kind
    return (kind,)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def failing(kind: str | None = None, client: redis.Redis | None = None) -> list[Failing]:
    """Failing keys of one kind (or all), ordered by kind and key."""
    client = client or get_redis()
    out: list[Failing] = []
    for k in _kinds(kind):
        for raw in client.hvals(queue_keys(k).failing):
            try:
                out.append(Failing.model_validate(orjson.loads(raw)))
            except ValueError:
                continue  # a foreign or garbled entry is not a failing key
    return sorted(out, key=lambda f: (f.kind, f.key))


def failing_counts(client: redis.Redis | None = None) -> dict[str, int]:
    """kind → number of failing keys (one round trip)."""
    client = client or get_redis()
    pipe = client.pipeline(transaction=False)
    for k in QUEUES:
        pipe.hlen(queue_keys(k).failing)
    return dict(zip(QUEUES, (int(n) for n in pipe.execute()), strict=True))


def delayed(kind: str | None = None, limit: int = 1000, client: redis.Redis | None = None) -> list[Delayed]:
    """The ``limit`` earliest delayed keys per kind, earliest first."""
    client = client or get_redis()
    out: list[Delayed] = []
    for k in _kinds(kind):
        entries: list[tuple[str | bytes, float]] = client.zrange(  # type: ignore[assignment]
            queue_keys(k).delayed, 0, limit - 1, withscores=True
        )
        out.extend(Delayed(kind=k, key=_text(member), due=float(score)) for member, score in entries)
    return sorted(out, key=lambda d: d.due)


def due_of(kind: str, key: str, client: redis.Redis | None = None) -> float | None:
    """When the key's delayed entry is due, or None if it has none."""
    score = (client or get_redis()).zscore(queue_keys(kind).delayed, key)
    return None if score is None else float(score)


def running(kind: str | None = None, client: redis.Redis | None = None) -> list[Running]:
    """Keys whose reconcile runs now (live locks; a quarantined key holds no reconcile)."""
    client = client or get_redis()
    now = time.time()
    out: list[Running] = []
    for k in _kinds(kind):
        for key, value in client.hgetall(queue_keys(k).locks).items():
            expires, started, holder = _text(value).split("|", 2)
            if float(expires) > now and holder != QUARANTINE:
                out.append(Running(kind=k, key=_text(key), started=float(started),
                                   expires=float(expires), message_id=holder))  # fmt: skip
    return sorted(out, key=lambda r: r.started)


def workers(client: redis.Redis | None = None) -> list[Worker]:
    """Workers by their last heartbeat, newest first (a dead one stays listed for a day)."""
    beats: list[tuple[str | bytes, float]] = (client or get_redis()).zrange(  # type: ignore[assignment]
        workers_key(), 0, -1, withscores=True
    )
    return sorted((Worker(name=_text(n), last_beat=float(t)) for n, t in beats), key=lambda w: -w.last_beat)


def replay(kind: str, key: str, client: redis.Redis | None = None) -> bool:
    """Forget the key's failure streak (and a quarantine) and reconcile it now; False if it was
    not failing."""
    client = client or get_redis()
    qk = queue_keys(kind)
    pipe = client.pipeline(transaction=True)
    pipe.hdel(qk.failing, key)
    pipe.hdel(qk.failures, key)
    pipe.hdel(qk.deaths, key)
    pipe.hget(qk.locks, key)
    removed, _, _, lock = pipe.execute()
    if lock and _text(lock).endswith("|" + QUARANTINE):
        client.hdel(qk.locks, key)
    enqueue(kind, key, client)
    return bool(removed)


def replay_failing(kind: str | None = None, client: redis.Redis | None = None) -> int:
    """``replay`` every failing key (of one kind); how many there were."""
    client = client or get_redis()
    return sum(replay(f.kind, f.key, client) for f in failing(kind, client))
