"""Controller expectations, as client-go's ControllerExpectations and
UIDTrackingControllerExpectations, shared by all processes through Redis.

A MachineSet reconcile that creates N machines or deletes some named ones records what it
expects to see; the informer's event handlers lower the counts as the creations and deletions
show up in the cache. Until they have (or ``expectations_timeout`` has passed), the MachineSet's
view of its machines is not trusted and it does not create or delete again, so a lagging cache
cannot cause double creation. Each record is one hash whose Redis TTL is the timeout: an expired
record is gone, and a missing record means "satisfied", exactly as an expired one upstream.
Owner keys are the queue keys of the owner (e.g. ``namespace/name``).
"""

from __future__ import annotations

from collections.abc import Iterable

import redis

from mcm_tasks.queue.scripts import Call, LuaScript
from mcm_tasks.redisdb import get_redis, rkey
from mcm_tasks.settings import get_settings

# KEYS[1] record. ARGV: adds, ttl ms, then names expected to be deleted. Replaces the record.
_SET = LuaScript(
    """
redis.call('DEL', KEYS[1])
local names = #ARGV - 2
redis.call('HSET', KEYS[1], 'add', ARGV[1], 'del', names)
for i = 3, #ARGV do redis.call('HSET', KEYS[1], 'n:' .. ARGV[i], 1) end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""
)

# KEYS[1] record. ARGV: count. Lowers 'add' if the record exists (creation observed).
_CREATED = LuaScript(
    """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
return redis.call('HINCRBY', KEYS[1], 'add', -tonumber(ARGV[1]))
"""
)

# KEYS[1] record. ARGV: name. Lowers 'del' once per expected name (deletion observed).
_DELETED = LuaScript(
    """
if redis.call('HDEL', KEYS[1], 'n:' .. ARGV[1]) == 0 then return 0 end
redis.call('HINCRBY', KEYS[1], 'del', -1)
return 1
"""
)


def _key(owner_key: str) -> str:
    return rkey("exp", owner_key)


def _ttl_ms() -> int:
    return max(1, int(get_settings().expectations_timeout * 1000))


def _client(client: redis.Redis | None) -> redis.Redis:
    return client or get_redis()


def observed_calls(creations: Iterable[tuple[str, int]], deletions: Iterable[tuple[str, str]]) -> list[Call]:
    """``creation_observed`` and ``deletion_observed`` as script calls, for the informer to pipeline
    with the keys it enqueues (they run first: a MachineSet woken by the batch finds its
    expectations lowered)."""
    calls: list[Call] = [(_CREATED, [count], [_key(owner)]) for owner, count in creations]
    calls += [(_DELETED, [name], [_key(owner)]) for owner, name in deletions]
    return calls


def expect_creations(owner_key: str, n: int, client: redis.Redis | None = None) -> None:
    """The owner is about to create ``n`` children (replaces earlier expectations, as upstream)."""
    _SET(_client(client), [_key(owner_key)], [max(0, int(n)), _ttl_ms()])


def expect_deletions(owner_key: str, names: Iterable[str], client: redis.Redis | None = None) -> None:
    """The owner is about to delete these children; each counts once, however often it is seen."""
    unique = list(dict.fromkeys(names))
    _SET(_client(client), [_key(owner_key)], [0, _ttl_ms(), *unique])


def creation_observed(owner_key: str, count: int = 1, client: redis.Redis | None = None) -> None:
    """A child of the owner appeared in the cache (or a create was skipped/failed: lower it too)."""
    _CREATED(_client(client), [_key(owner_key)], [count])


def deletion_observed(owner_key: str, name: str, client: redis.Redis | None = None) -> None:
    _DELETED(_client(client), [_key(owner_key)], [name])


def satisfied(owner_key: str, client: redis.Redis | None = None) -> bool:
    """True when nothing is pending: no record, record expired, or all observed."""
    adds, dels = _client(client).hmget(_key(owner_key), "add", "del")
    if adds is None and dels is None:
        return True
    return int(adds or 0) <= 0 and int(dels or 0) <= 0


def delete_expectations(owner_key: str, client: redis.Redis | None = None) -> None:
    """The owner is gone."""
    _client(client).delete(_key(owner_key))


#: how long expectations of a reconcile that died stay trusted: the informer mirrors what that run
#: created or deleted well within it, after which the redelivered run reads the cache afresh
RECHECK_GRACE = 2.0


def recheck_soon(owner_key: str, client: redis.Redis | None = None) -> None:
    """The reconcile that recorded these expectations died (its worker was killed): expire them
    within ``RECHECK_GRACE`` instead of ``expectations_timeout``, so the redelivered reconcile
    re-checks the cache shortly rather than waiting minutes for creations that may never come.
    Creations it did make are still observed meanwhile, and lower the counts as usual."""
    _client(client).pexpire(_key(owner_key), int(RECHECK_GRACE * 1000), lt=True)


def expires_in(owner_key: str, client: redis.Redis | None = None) -> float | None:
    """Seconds until the owner's expectations expire, or None when there are none."""
    ttl = int(_client(client).pttl(_key(owner_key)))
    return None if ttl < 0 else ttl / 1000.0
