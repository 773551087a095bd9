"""Adding keys to the queues: at once (coalesced) or after a countdown (earliest wins)."""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Iterable, Sequence

import redis

from mcm_tasks.kinds import QUEUES
from mcm_tasks.queue import scripts
from mcm_tasks.queue.history import HISTORY_TTL
from mcm_tasks.queue.messages import BACKGROUND_PRIORITY, build_message, new_id, queue_keys
from mcm_tasks.redisdb import get_redis
from mcm_tasks.settings import Settings, get_settings

log = logging.getLogger(__name__)

#: keys per script call: long enough to amortise the round trip, short enough not to block Redis
CHUNK = 500
MAX_KEY_LENGTH = 1024


def stale_after(settings: Settings) -> float:
    """A pending marker older than this belongs to a lost message: a new add publishes again
    instead of coalescing into it (so no key is blocked for good)."""
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


#: per (key prefix, kind): a seed mode's tenants each have their own keys
_by_settings: dict[tuple[str, str], tuple[Settings, scripts.KindScripts]] = {}


def scripts_for(kind: str, settings: Settings | None = None) -> scripts.KindScripts:
    """The kind's scripts for these settings (looked up once per reconcile: kept cheap)."""
    s = settings or get_settings()
    cached = _by_settings.get((s.key_prefix, kind))
    if cached is not None and cached[0] is s:
        return cached[1]
    limits = scripts.Limits(
        stale_after(s), s.reconcile_lock_ttl, s.poison_after, s.long_retry,
        history_length=s.history_length, history_ttl=HISTORY_TTL, concurrent_syncs=s.concurrent_syncs,
    )  # fmt: skip
    found = scripts.kind_scripts(queue_keys(kind, s), limits)
    _by_settings[(s.key_prefix, kind)] = (s, found)
    return found


def _enqueue_calls(
    groups: dict[str, dict[str, None]], settings: Settings, background: bool = False
) -> list[scripts.Call]:
    now = time.time()
    calls: list[scripts.Call] = []
    priority = BACKGROUND_PRIORITY if background else 0
    for kind, keys in groups.items():
        found = scripts_for(kind, settings)
        script = found.enqueue_background if background else found.enqueue
        queue = settings.queue_name(kind)
        ordered = list(keys)
        for start in range(0, len(ordered), CHUNK):
            args: list[object] = [now]
            for key in ordered[start : start + CHUNK]:
                mid = new_id()
                args += (key, mid, build_message(kind, key, mid, queue, priority))
            calls.append((script, args))
    return calls


def _schedule_calls(
    groups: dict[str, dict[str, None]], settings: Settings, seconds: float, floored: bool = False
) -> list[scripts.Call]:
    """SCHEDULE calls; ``floored``: SCHEDULE_BATCHED, each key not before its floor."""
    due = repr(time.time() + float(seconds))
    calls: list[scripts.Call] = []
    for kind, keys in groups.items():
        found = scripts_for(kind, settings)
        script = found.schedule_batched if floored else found.schedule
        ordered = list(keys)
        for start in range(0, len(ordered), CHUNK):
            args: list[object] = []
            for key in ordered[start : start + CHUNK]:
                args += (key, due)
            calls.append((script, args))
    return calls


def enqueue_many(items: Iterable[tuple[str, str]], client: redis.Redis | None = None) -> int:
    """Add many (kind, key) at once, one round trip per batch; the number of messages published."""
    return enqueue_together(items, (), 0.0, client=client)


def enqueue_together(
    now: Iterable[tuple[str, str]],
    later: Iterable[tuple[str, str]],
    seconds: float,
    first: Iterable[scripts.Call] = (),
    client: redis.Redis | None = None,
    background: bool = False,
    floored: bool = False,
) -> int:
    """``first`` (other script calls, e.g. expectations), then ``enqueue_many(now)`` and
    ``enqueue_many_after(later, seconds)``, in that order and in one round trip: what the informer
    does with each batch of events. The number of messages published. A key refused (``ValueError``)
    refuses every key, after ``first`` ran on its own. ``background`` (an informer's resync):
    the messages wait behind every user-facing one, for at most ``--background-aging``.
    ``floored`` (the informer's batched wakes): a key of ``later`` also waits for its floor, the
    time its last pass asked the next one woken this way to wait for (``QueueKeys.floor``)."""
    settings = get_settings()
    client = client or get_redis()
    before = list(first)
    try:
        groups, delayed = _group(now), _group(later)
    except ValueError:
        if before:
            scripts.run_pipeline(client, before)
        raise
    if seconds <= 0:  # nothing to wait for: at once, as enqueue_many_after does
        for kind, keys in delayed.items():
            groups.setdefault(kind, {}).update(keys)
        delayed = {}
    adds = _enqueue_calls(groups, settings, background)
    calls = before + adds + (_schedule_calls(delayed, settings, seconds, floored) if delayed else [])
    if not calls:
        return 0
    replies = scripts.run_pipeline(client, calls)
    return sum(int(n) for n in replies[len(before) : len(before) + len(adds)])


def enqueue(kind: str, key: str, client: redis.Redis | None = None) -> bool:
    """Add one key; True if a message was published, False if it coalesced into a waiting or
    running one."""
    return enqueue_many([(kind, key)], client) == 1


def enqueue_many_after(
    items: Iterable[tuple[str, str]],
    seconds: float,
    client: redis.Redis | None = None,
    *,
    floored: bool = False,
) -> None:
    """``enqueue_after`` for many (kind, key) at once, one round trip; a key with an earlier due
    time keeps it (a batch never delays what is already due). ``floored``: as ``enqueue_together``."""
    enqueue_together((), items, seconds, client=client, floored=floored)


def enqueue_after(kind: str, key: str, seconds: float, client: redis.Redis | None = None) -> None:
    """client-go's ``AddAfter``: the key goes into the kind's delayed set (in Redis, so it outlives
    any worker) and is published when due by a worker's publisher; the earliest due time per key
    wins. Upstream: ``enqueueMachineAfter``, ``enqueueMachineSetAfter``, ``enqueueMachineDeploymentAfter``.
    """
    enqueue_many_after([(kind, key)], seconds, client)


#: every kind's due keys (at most CHUNK) and its next due time after now ('' when none waits), in
#: QUEUES order: {next, key, key, …} per kind. ARGV: now. The delayed sets are constants (@SETS@).
#: The earliest entry alone answers for a kind with nothing due (most kinds, most passes: every
#: worker's keeper runs this several times a second): one command instead of two.
_DUE = f"""
local now = tonumber(ARGV[1])
local out = {{}}
for i, set in ipairs({{@SETS@}}) do
  local first = redis.call('ZRANGE', set, 0, 0, 'WITHSCORES')
  if not first[2] or tonumber(first[2]) > now then
    out[i] = {{first[2] or ''}}
  else
    local found = redis.call('ZRANGEBYSCORE', set, '-inf', ARGV[1], 'LIMIT', 0, {CHUNK})
    local after = redis.call('ZRANGEBYSCORE', set, '(' .. ARGV[1], '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    table.insert(found, 1, after[2] or '')
    out[i] = found
  end
end
return out
"""

_due_scripts: dict[str, scripts.LuaScript] = {}


def _due_script(settings: Settings) -> scripts.LuaScript:
    found = _due_scripts.get(settings.key_prefix)
    if found is None:
        sets = ", ".join(scripts.lua_string(queue_keys(kind, settings).delayed) for kind in QUEUES)
        found = _due_scripts[settings.key_prefix] = scripts.LuaScript(_DUE.replace("@SETS@", sets))
    return found


def publish_due(
    client: redis.Redis | None = None, now: float | None = None, settings: Settings | None = None
) -> tuple[int, float | None]:
    """Publish the keys of every kind's delayed set that are due (client-go's ``waitingLoop``).
    Any number of processes may call it at once: a key is moved by exactly one of them. Returns the
    messages published and the next due time still waiting (None if no key waits). One script call
    finds what is due in every kind (every worker's keeper runs this several times a second), and
    one more round trip publishes it when something is."""
    return publish_due_many(
        client or get_redis(), time.time() if now is None else now, [settings or get_settings()]
    )


def publish_due_many(client: redis.Redis, now: float, views: Sequence[Settings]) -> tuple[int, float | None]:
    """``publish_due`` for several settings views (seed mode: every served namespace's queues) in
    two round trips whatever their number: one finds what is due in each, one publishes it."""
    published, firsts = publish_due_views(client, now, views)
    waiting = [first for first in firsts if first is not None]
    return published, min(waiting) if waiting else None


def publish_due_views(
    client: redis.Redis, now: float, views: Sequence[Settings]
) -> tuple[int, list[float | None]]:
    """``publish_due_many``, with each view's next due time (None: nothing waits in its sets): the
    keeper reads next time only the views whose due time came, not every namespace's sets on every
    wake-up (with 50 namespaces that read was most of Redis's work in a scale-up)."""
    if not views:
        return 0, []
    replies = scripts.run_pipeline(client, [(_due_script(view), [repr(now)]) for view in views])
    calls: list[scripts.Call] = []
    firsts: list[float | None] = []
    for settings, reply in zip(views, replies, strict=True):
        next_due: float | None = None
        for kind, (first, *due_keys) in zip(QUEUES, reply, strict=True):
            if len(due_keys) >= CHUNK:
                next_due = now  # more are due than one call takes: come back at once
            elif first and float(first) > now:
                at = float(first)
                next_due = at if next_due is None else min(next_due, at)
            if not due_keys:
                continue
            queue = settings.queue_name(kind)
            args: list[object] = [now]
            for raw in due_keys:
                key = raw.decode() if isinstance(raw, bytes) else raw
                mid = new_id()
                args += (key, mid, build_message(kind, key, mid, queue))
            calls.append((scripts_for(kind, settings).promote, args))
        firsts.append(next_due)
    published = sum(int(n) for n in scripts.run_pipeline(client, calls)) if calls else 0
    return published, firsts


def age_background(
    client: redis.Redis, now: float, views: Sequence[Settings], only: Collection[str] | None = None
) -> int:
    """Promote the background messages of every kind that waited ``--background-aging``, in each
    settings view (seed mode: every served namespace's queues): they are taken next. ``only``: the
    kinds whose aging set is named there (the aging index), the others left alone. One round trip
    (none when nothing is left to look at); any number of keepers may run it. How many moved."""
    calls: list[scripts.Call] = [
        (scripts_for(kind, view).age, [now - view.background_aging, CHUNK])
        for view in views
        for kind in QUEUES
        if only is None or queue_keys(kind, view).aging in only
    ]
    return sum(int(n) for n in scripts.run_pipeline(client, calls)) if calls else 0
