"""The dead letter: keys that failed ``dead_letter_after`` times in a row stop retrying on their
own and wait here for an operator (``mcm-tasks admin deadletter``). A later event still reconciles
such a key (once per event, no retry loop); a success removes its entry."""

from __future__ import annotations

import json

import redis
from pydantic import BaseModel

from mcm_tasks.queue.messages import queue_keys
from mcm_tasks.queue.producer import enqueue
from mcm_tasks.redisdb import get_redis, rkey


class DeadLetter(BaseModel):
    kind: str
    key: str
    error: str
    message: str
    count: int
    time: float


def _hash() -> str:
    return rkey("q", "deadletter")


def list_dead_letters(client: redis.Redis | None = None) -> list[DeadLetter]:
    raw = (client or get_redis()).hgetall(_hash())
    entries = [DeadLetter.model_validate(json.loads(value)) for value in raw.values()]
    return sorted(entries, key=lambda e: (e.kind, e.key))


def replay(kind: str, key: str, client: redis.Redis | None = None) -> bool:
    """Forget the key's failures and enqueue it; False if it was not dead-lettered."""
    client = client or get_redis()
    qk = queue_keys(kind)
    pipe = client.pipeline(transaction=True)
    pipe.hdel(qk.deadletter, f"{kind}:{key}")
    pipe.hdel(qk.failures, key)
    removed, _ = pipe.execute()
    if removed:
        enqueue(kind, key, client)
    return bool(removed)


def replay_all(client: redis.Redis | None = None) -> int:
    client = client or get_redis()
    return sum(replay(e.kind, e.key, client) for e in list_dead_letters(client))
