"""Controller expectations, as client-go's ControllerExpectations and
UIDTrackingControllerExpectations, shared by all processes through Redis.

A MachineSet reconcile that creates N machines or deletes some named ones records what it
expects to see; the informer's event handlers lower the counts as the creations and deletions
show up in the cache. Until they have (or ``expectations_timeout`` has passed), the MachineSet's
view of its machines is not trusted and it does not create or delete again, so a lagging cache
cannot cause double creation. Each record is one hash whose Redis TTL is the timeout: an expired
record is gone, and a missing record means "satisfied", exactly as an expired one upstream.
Owner keys are the queue keys of the owner (e.g. ``namespace/name``).

Not in client-go: a record outlives the pass that wrote it. Upstream keeps expectations in the
controller's memory, so a controller that dies mid-creation takes them with it and its successor
never waits on creations that will never come. Here the pass that records expectations marks the
record *open* until it has issued every create or delete it expected (``issued``; the ones that
failed or were skipped lowered at the same time). A pass of the owner runs under the owner's
reconcile lock, so a record still open when the next pass begins (``satisfied_for_pass``) was left
by a pass that died mid-way (its worker SIGKILLed, its pool process killed at the hard time limit,
an exception between the record and the writes), however the key came to run again (the dead
message's redelivery, or another message after the dead pass's lock expired). Such a record ends on
evidence (``state_for_pass`` → ABANDONED): the MachineSet lists its machines from the API server,
which holds whatever the dead pass created, and drops the record, so a lagging informer cannot make
it create again, and it waits for nothing. (``satisfied_for_pass`` keeps the older rule for callers
without evidence: trusted for ``ABANDONED_GRACE``, then expired.) A record whose pass finished stays
trusted until observed or timed out, as upstream, however long the informer lags.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

import redis

from mcm_tasks.queue.scripts import Call, LuaScript
from mcm_tasks.redisdb import get_redis, rkey
from mcm_tasks.settings import get_settings

# KEYS[1] record. ARGV: adds, ttl ms, then names expected to be deleted. Replaces the record, open
# (its pass has not issued its writes yet).
_SET = LuaScript(
    """
redis.call('DEL', KEYS[1])
local names = #ARGV - 2
redis.call('HSET', KEYS[1], 'add', ARGV[1], 'del', names, 'open', 1)
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


# KEYS[1] record. ARGV: creations that will not be observed (skipped or failed). The recording pass
# issued its writes: lowers 'add' by the count and closes the record, if it still exists.
_ISSUED = LuaScript(
    """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if tonumber(ARGV[1]) > 0 then redis.call('HINCRBY', KEYS[1], 'add', -tonumber(ARGV[1])) end
redis.call('HDEL', KEYS[1], 'open')
return 1
"""
)

# KEYS[1] record. ARGV: grace ms. The counts, read by the owner's next pass; a record still open was
# left by a pass that died: it expires within the grace (never later than it would anyway, and a
# later pass within the grace changes nothing; PEXPIRE's LT without needing Redis 7). Returns {}
# without a record, else {add, del}.
_CHECK = LuaScript(
    """
local v = redis.call('HMGET', KEYS[1], 'add', 'del', 'open')
if not v[1] and not v[2] then return {} end
if v[3] then
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl < 0 or ttl > tonumber(ARGV[1]) then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
end
return {v[1] or '0', v[2] or '0'}
"""
)

# KEYS[1] record. The counts and whether the record is still open, read by the owner's next pass:
# {} without a record, else {add, del, open (0 or 1)}.
_STATE = LuaScript(
    """
local v = redis.call('HMGET', KEYS[1], 'add', 'del', 'open')
if not v[1] and not v[2] then return {} end
return {v[1] or '0', v[2] or '0', v[3] and 1 or 0}
"""
)

#: how long expectations left open by a pass that died stay trusted when the caller cannot read the
#: evidence itself (``satisfied_for_pass``); the MachineSet reads it (``state_for_pass``)
ABANDONED_GRACE = 2.0


class PassState(StrEnum):
    """What the owner's pass may trust, asked at its start under the owner's reconcile lock."""

    #: nothing pending: the mirror's view may be acted on
    SATISFIED = "satisfied"
    #: a finished pass's creations or deletions are not observed yet: wait for them (upstream)
    PENDING = "pending"
    #: a pass died before issuing its writes: the mirror cannot be trusted to have seen them, and
    #: waiting a fixed grace is a guess (a watch 3 s late outlasts 2 s); read the API server's own
    #: list of the children, which holds whatever the dead pass created, and end the record
    ABANDONED = "abandoned"


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


def issued(owner_key: str, unobserved: int = 0, client: redis.Redis | None = None) -> None:
    """The owner's pass issued every write it expected; ``unobserved``: creations it skipped or that
    failed, which will never be observed. Until this, the record is open: a later pass that finds
    it so knows its recording pass died (``satisfied_for_pass``)."""
    _ISSUED(_client(client), [_key(owner_key)], [max(0, int(unobserved))])


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


def pending(owner_key: str, client: redis.Redis | None = None) -> tuple[int, int] | None:
    """(creations, deletions) still expected, or None without a record; for ``admin why``."""
    adds, dels = _client(client).hmget(_key(owner_key), "add", "del")
    if adds is None and dels is None:
        return None
    return int(adds or 0), int(dels or 0)


def satisfied_for_pass(owner_key: str, client: redis.Redis | None = None) -> bool:
    """``satisfied`` as the owner's pass asks it at its start, holding the owner's reconcile lock
    (upstream: ``SatisfiedExpectations``). A record still open was left by a pass that died
    before issuing its writes: it now expires within ``ABANDONED_GRACE`` (the pass comes back for
    that, ``expires_in``) instead of ``expectations_timeout``. One round trip."""
    found = _CHECK(_client(client), [_key(owner_key)], [int(ABANDONED_GRACE * 1000)])
    if not found:
        return True
    adds, dels = found
    return int(adds) <= 0 and int(dels) <= 0


def state_for_pass(owner_key: str, client: redis.Redis | None = None) -> PassState:
    """The owner's pass asks this at its start, holding its reconcile lock (upstream:
    ``SatisfiedExpectations``, plus the dead pass's case): a record still open was left by a pass
    that died mid-way. The caller answers ABANDONED with evidence (a live list of the children)
    and then ``delete_expectations``. One round trip."""
    found = _STATE(_client(client), [_key(owner_key)], [])
    if not found:
        return PassState.SATISFIED
    adds, dels, open_ = found
    if int(open_):
        return PassState.ABANDONED
    return PassState.SATISFIED if int(adds) <= 0 and int(dels) <= 0 else PassState.PENDING


def delete_expectations(owner_key: str, client: redis.Redis | None = None) -> None:
    """The owner is gone."""
    _client(client).delete(_key(owner_key))


def expires_in(owner_key: str, client: redis.Redis | None = None) -> float | None:
    """Seconds until the owner's expectations expire, or None when there are none."""
    ttl = int(_client(client).pttl(_key(owner_key)))
    return None if ttl < 0 else ttl / 1000.0
