"""The Lua scripts that make each step of the contract atomic, one round trip each.

Scripts are compiled per kind: the kind's key names (QueueKeys) and the settings they need are
Lua constants in the source, so a call passes only what changes (key, message id, times,
messages). That matters: redis-py spends ~2 µs per argument, and BEGIN/END run once per
reconcile. The scripts therefore use key names they were not given as KEYS: fine on a single
Redis (not on a Redis Cluster, where the Celery Redis transport does not run either). Times are
epoch seconds from the caller's clock (the hosts of one installation are NTP-synced; the margins
involved are seconds, not milliseconds).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

from mcm_tasks.queue.messages import QueueKeys

#: client-go's workqueue histogram buckets: 10 ns … 10 s, ×10
BUCKETS = (1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0)

_PRELUDE = """
local PENDING, LOCKS, DIRTY, DELAYED = @PENDING@, @LOCKS@, @DIRTY@, @DELAYED@
local FAILURES, METRICS, LIST, DEADLETTER = @FAILURES@, @METRICS@, @LIST@, @DEADLETTER@
local SUPERSEDED, KIND = @SUPERSEDED@, @KIND@
local STALE, TTL, DEAD_AFTER = @STALE@, @TTL@, @DEAD_AFTER@
local BUCKETS = {@BUCKETS@}
local function split2(v)
  local p = string.find(v, '|', 1, true)
  return string.sub(v, 1, p - 1), string.sub(v, p + 1)
end
-- histogram: a count per bucket and the sum in microseconds (integer increments are cheap)
local function observe(name, v)
  if v < 0 then v = 0 end
  local i = #BUCKETS + 1
  for j = 1, #BUCKETS do if v <= BUCKETS[j] then i = j; break end end
  redis.call('HINCRBY', METRICS, name .. ':' .. i, 1)
  redis.call('HINCRBY', METRICS, name .. ':sum_us', math.floor(v * 1000000 + 0.5))
end
-- the lock's expiry and holder, or nil
local function lock_of(key)
  local v = redis.call('HGET', LOCKS, key)
  if not v then return nil, nil end
  local exp, rest = split2(v)
  local _, holder = split2(rest)
  return tonumber(exp), holder
end
-- "enqueued_at|id" / "due|id" younger than the stale limit
local function fresh(v, now)
  local t = split2(v)
  return tonumber(t) > now - STALE
end
-- An immediate add: mark dirty if the key runs, coalesce if a live message waits, else publish.
-- Returns 1 published, 2 marked dirty, 0 coalesced.
local function push_now(key, id, msg, now)
  local exp = lock_of(key)
  if exp and exp > now then
    if redis.call('SADD', DIRTY, key) == 1 then return 2 end
    return 0
  end
  local p = redis.call('HGET', PENDING, key)
  if p and fresh(p, now) then return 0 end
  redis.call('HSET', PENDING, key, now .. '|' .. id)
  redis.call('LPUSH', LIST, msg)
  return 1
end
-- A countdown add: the earliest live due time per key wins; later ones add no message.
local function schedule(key, due, id, msg, now)
  local d = redis.call('HGET', DELAYED, key)
  if d then
    local dd, did = split2(d)
    if tonumber(dd) <= due and tonumber(dd) > now - STALE then return 0 end
    -- the replaced message still fires later; remember to drop it then
    redis.call('SADD', SUPERSEDED, did)
  end
  redis.call('HSET', DELAYED, key, due .. '|' .. id)
  redis.call('LPUSH', LIST, msg)
  return 1
end
"""

# ARGV: now, then (key, id, message) triples. Returns the number of messages published.
_ENQUEUE = """
local now = tonumber(ARGV[1])
local published, adds = 0, 0
for i = 2, #ARGV, 3 do
  local r = push_now(ARGV[i], ARGV[i + 1], ARGV[i + 2], now)
  if r == 1 then published = published + 1 end
  if r > 0 then adds = adds + 1 end
end
if adds > 0 then redis.call('HINCRBY', METRICS, 'adds', adds) end
return published
"""

# ARGV: now, key, due, id, message. Returns 1 if a countdown message was published.
_SCHEDULE = """
return schedule(ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5], tonumber(ARGV[1]))
"""

# A message arrives at a worker. ARGV: key, id, now, delayed (1/0). Returns {status, consecutive
# failures}; status is run | busy | superseded | coalesced | duplicate | dead.
_BEGIN = """
local key, id, now = ARGV[1], ARGV[2], tonumber(ARGV[3])
local queued_at = nil
if ARGV[4] == '1' then
  local d = redis.call('HGET', DELAYED, key)
  local due, did = nil, nil
  if d then due, did = split2(d) end
  if did == id then
    redis.call('HDEL', DELAYED, key)
    queued_at = tonumber(due)
  elseif redis.call('SREM', SUPERSEDED, id) == 1 or d then
    return {'superseded', '0'}
  end
  local p = redis.call('HGET', PENDING, key)
  if p and fresh(p, now) then return {'coalesced', '0'} end
  redis.call('HINCRBY', METRICS, 'adds', 1)
else
  local p = redis.call('HGET', PENDING, key)
  if p then
    local t, pid = split2(p)
    if pid == id then
      queued_at = tonumber(t)
    elseif tonumber(t) > now - STALE then
      return {'duplicate', '0'}
    end
    redis.call('HDEL', PENDING, key)
  end
end
local failures = tonumber(redis.call('HGET', FAILURES, key) or '0')
local exp, holder = lock_of(key)
if holder == id then
  -- this very message started before and never finished: its worker died or overran the lock
  failures = redis.call('HINCRBY', FAILURES, key, 1)
  redis.call('HINCRBY', METRICS, 'retries', 1)
  if failures >= DEAD_AFTER then
    redis.call('HDEL', LOCKS, key)
    redis.call('SREM', DIRTY, key)
    redis.call('HSET', DEADLETTER, KIND .. ':' .. key, cjson.encode({kind = KIND, key = key,
      error = 'WorkerLost', message = 'the worker died or overran the lock during the reconcile',
      count = failures, time = now}))
    return {'dead', tostring(failures)}
  end
elseif exp and exp > now then
  redis.call('SADD', DIRTY, key)
  return {'busy', '0'}
end
redis.call('HSET', LOCKS, key, (now + TTL) .. '|' .. now .. '|' .. id)
redis.call('SREM', DIRTY, key)
if queued_at then observe('queue', now - queued_at) end
return {'run', tostring(failures)}
"""

# A reconcile ended. ARGV: key, id, "now|started|action|due|countdown id|immediate id|failures
# before" (action: done|requeue|retry|dead; due '' = at once), dead-letter entry, countdown
# message, immediate message. Returns the number of messages published.
_END = """
local key, id = ARGV[1], ARGV[2]
local f = {}
for part in string.gmatch(ARGV[3] .. '|', '([^|]*)|') do f[#f + 1] = part end
local now, started, action, due, later_id, now_id = tonumber(f[1]), tonumber(f[2]), f[3], f[4], f[5], f[6]
local _, holder = lock_of(key)
local mine = holder == id
if mine then redis.call('HDEL', LOCKS, key) end
observe('work', now - started)
if action == 'done' or action == 'requeue' then
  if f[7] ~= '0' then
    redis.call('HDEL', FAILURES, key)
    redis.call('HDEL', DEADLETTER, KIND .. ':' .. key)
  end
elseif action == 'retry' then
  redis.call('HINCRBY', FAILURES, key, 1)
  redis.call('HINCRBY', METRICS, 'retries', 1)
elseif action == 'dead' then
  redis.call('HINCRBY', FAILURES, key, 1)
  redis.call('HSET', DEADLETTER, KIND .. ':' .. key, ARGV[4])
end
local published = 0
if action == 'requeue' or action == 'retry' then
  if due == '' then
    local r = push_now(key, now_id, ARGV[6], now)
    if r == 1 then published = 1 end
    if r > 0 then redis.call('HINCRBY', METRICS, 'adds', 1) end
  else
    published = schedule(key, tonumber(due), later_id, ARGV[5], now)
  end
end
-- events that arrived during the run (already counted as adds): exactly one more reconcile
if mine and redis.call('SREM', DIRTY, key) == 1 then
  if push_now(key, now_id, ARGV[6], now) == 1 then published = published + 1 end
end
return published
"""


def lua_string(text: str) -> str:
    """A Lua string literal for any text (decimal escapes for everything but plain characters)."""
    plain = set(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:._-/ ")
    return '"' + "".join(chr(b) if b in plain else f"\\{b:03d}" for b in text.encode()) + '"'


class LuaScript:
    """EVALSHA with a reload when the server lost its script cache (a restarted Redis)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()

    def __call__(self, client: redis.Redis, keys: Sequence[str], args: Sequence[Any]) -> Any:
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            client.script_load(self.source)
            return client.evalsha(self.sha, len(keys), *keys, *args)

    def queue(self, pipe: Any, keys: Sequence[str], args: Sequence[Any]) -> None:
        pipe.evalsha(self.sha, len(keys), *keys, *args)


@dataclass(frozen=True)
class KindScripts:
    enqueue: LuaScript
    schedule: LuaScript
    begin: LuaScript
    end: LuaScript


_compiled: dict[tuple[QueueKeys, float, float, int], KindScripts] = {}


def kind_scripts(keys: QueueKeys, stale: float, lock_ttl: float, dead_after: int) -> KindScripts:
    """The four scripts of one kind's queue, compiled once per process and configuration."""
    ident = (keys, stale, lock_ttl, dead_after)
    found = _compiled.get(ident)
    if found is not None:
        return found
    constants = {
        "PENDING": lua_string(keys.pending),
        "LOCKS": lua_string(keys.locks),
        "DIRTY": lua_string(keys.dirty),
        "DELAYED": lua_string(keys.delayed),
        "FAILURES": lua_string(keys.failures),
        "METRICS": lua_string(keys.metrics),
        "LIST": lua_string(keys.broker_list),
        "DEADLETTER": lua_string(keys.deadletter),
        "SUPERSEDED": lua_string(keys.superseded),
        "KIND": lua_string(keys.kind),
        "STALE": repr(float(stale)),
        "TTL": repr(float(lock_ttl)),
        "DEAD_AFTER": str(int(dead_after)),
        "BUCKETS": ", ".join(repr(b) for b in BUCKETS),
    }
    prelude = _PRELUDE
    for name, value in constants.items():
        prelude = prelude.replace(f"@{name}@", value)
    found = KindScripts(*(LuaScript(prelude + body) for body in (_ENQUEUE, _SCHEDULE, _BEGIN, _END)))
    _compiled[ident] = found
    return found


def run_pipeline(client: redis.Redis, calls: Sequence[tuple[LuaScript, Sequence[Any]]]) -> list[Any]:
    """Run script calls in one non-transactional pipeline. Calls refused with NOSCRIPT (a script
    not yet loaded, or a restarted Redis) are loaded and run again; only those, so nothing runs
    twice."""
    pending = list(range(len(calls)))
    results: list[Any] = [None] * len(calls)
    for attempt in range(2):
        pipe = client.pipeline(transaction=False)
        for i in pending:
            script, args = calls[i]
            script.queue(pipe, (), args)
        replies = pipe.execute(raise_on_error=False)
        missing = []
        for i, reply in zip(pending, replies, strict=True):
            if isinstance(reply, redis.exceptions.NoScriptError) and not attempt:
                missing.append(i)
            elif isinstance(reply, Exception):
                raise reply
            else:
                results[i] = reply
        if not missing:
            break
        for script in {calls[i][0].sha: calls[i][0] for i in missing}.values():
            client.script_load(script.source)
        pending = missing
    return results
