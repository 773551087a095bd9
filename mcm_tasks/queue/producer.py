"""Adding keys to the queues: at once (coalesced) or after a countdown (earliest wins)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

import redis

from mcm_tasks.queue import scripts
from mcm_tasks.queue.messages import build_message, new_id, queue_keys
from mcm_tasks.queue.policy import clamp_countdown
from mcm_tasks.redisdb import get_redis
from mcm_tasks.settings import Settings, get_settings

log = logging.getLogger(__name__)

#: keys per script call: long enough to amortise the round trip, short enough not to block Redis
CHUNK = 500
MAX_KEY_LENGTH = 1024


def stale_after(settings: Settings) -> float:
    """A pending marker or countdown entry older than this belongs to a lost message: a new add
    publishes again instead of coalescing into it (so no key is blocked for good)."""
    return settings.visibility_timeout


def check_key(key: object) -> str:
    if not isinstance(key, str) or not key or len(key) > MAX_KEY_LENGTH:
        raise ValueError(f"a queue key is a non-empty string of at most {MAX_KEY_LENGTH} characters")
    return key


def _group(items: Iterable[tuple[str, str]]) -> dict[str, dict[str, None]]:
    """Per kind, the distinct keys in first-seen order: repeats within a batch coalesce here."""
    groups: dict[str, dict[str, None]] = {}
    for kind, key in items:
        group = groups.get(kind)
        if group is None:
            queue_keys(kind)  # rejects unknown kinds before anything is published
            group = groups[kind] = {}
        group[check_key(key)] = None
    return groups


_by_settings: dict[str, tuple[Settings, scripts.KindScripts]] = {}


def scripts_for(kind: str, settings: Settings | None = None) -> scripts.KindScripts:
    """The kind's scripts for these settings (looked up once per reconcile: kept cheap)."""
    s = settings or get_settings()
    cached = _by_settings.get(kind)
    if cached is not None and cached[0] is s:
        return cached[1]
    found = scripts.kind_scripts(
        queue_keys(kind, s), stale_after(s), s.reconcile_lock_ttl, s.dead_letter_after
    )
    _by_settings[kind] = (s, found)
    return found


def enqueue_many(items: Iterable[tuple[str, str]], client: redis.Redis | None = None) -> int:
    """Add many (kind, key) at once, one round trip per batch; the number of messages published."""
    settings = get_settings()
    groups = _group(items)
    if not groups:
        return 0
    client = client or get_redis()
    now = time.time()
    calls: list[tuple[scripts.LuaScript, list[object]]] = []
    for kind, keys in groups.items():
        script = scripts_for(kind, settings).enqueue
        queue = settings.queue_name(kind)
        ordered = list(keys)
        for start in range(0, len(ordered), CHUNK):
            args: list[object] = [now]
            for key in ordered[start : start + CHUNK]:
                mid = new_id()
                args += (key, mid, build_message(kind, key, mid, queue))
            calls.append((script, args))
    return sum(int(n) for n in scripts.run_pipeline(client, calls))


def enqueue(kind: str, key: str, client: redis.Redis | None = None) -> bool:
    """Add one key; True if a message was published, False if it coalesced into a waiting or
    running one."""
    return enqueue_many([(kind, key)], client) == 1


def enqueue_many_after(
    items: Iterable[tuple[str, str]], seconds: float, client: redis.Redis | None = None
) -> None:
    """``enqueue_after`` for many (kind, key) at once, one round trip; a key with an earlier
    countdown or a waiting message keeps it (a batch never delays what is already due)."""
    settings = get_settings()
    delay = clamp_countdown(seconds, settings)
    groups = _group(items)
    if delay <= 0:
        enqueue_many([(kind, key) for kind, keys in groups.items() for key in keys], client)
        return
    now = time.time()
    due = now + delay
    calls: list[tuple[scripts.LuaScript, list[object]]] = []
    for kind, keys in groups.items():
        script = scripts_for(kind, settings).schedule
        queue = settings.queue_name(kind)
        for key in keys:
            mid = new_id()
            calls.append((script, [now, key, due, mid, build_message(kind, key, mid, queue, eta=due)]))
    if calls:
        scripts.run_pipeline(client or get_redis(), calls)


def enqueue_after(kind: str, key: str, seconds: float, client: redis.Redis | None = None) -> None:
    """Add a key after a countdown; only the earliest pending countdown per key has a message."""
    settings = get_settings()
    script = scripts_for(kind, settings).schedule
    check_key(key)
    delay = clamp_countdown(seconds, settings)
    if delay < seconds:
        log.warning("countdown %.0fs for %s %s capped at %.0fs", seconds, kind, key, delay)
    if delay <= 0:
        enqueue(kind, key, client)
        return
    now = time.time()
    due = now + delay
    mid = new_id()
    message = build_message(kind, key, mid, settings.queue_name(kind), eta=due)
    script(client or get_redis(), (), [now, key, due, mid, message])
