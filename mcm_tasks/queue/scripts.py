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

from mcm_tasks.queue.messages import QUARANTINE, QueueKeys

#: client-go's workqueue histogram buckets: 10 ns … 10 s, ×10
BUCKETS = (1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0)

#: a ``--concurrent-syncs`` slot (concurrency.py): take one if fewer than ``cap`` hold one, the
#: holders older than ``ttl`` (killed mid-reconcile) not counted. 1 taken, 0 every slot busy. Those
#: are dropped only when the count reaches the cap: below it they change nothing, and every BEGIN
#: would pay a command for them.
TAKE_SLOT = """
local function take_slot(slots, holder, now, ttl, cap)
  if redis.call('ZCARD', slots) >= cap then
    redis.call('ZREMRANGEBYSCORE', slots, '-inf', now - ttl)
    if redis.call('ZCARD', slots) >= cap then return 0 end
  end
  redis.call('ZADD', slots, now, holder)
  return 1
end
"""

_PRELUDE = """
local PENDING, LOCKS, DIRTY, DELAYED = @PENDING@, @LOCKS@, @DIRTY@, @DELAYED@
local FAILURES, FAILING, DEATHS, METRICS, LIST = @FAILURES@, @FAILING@, @DEATHS@, @METRICS@, @LIST@
local LOW_LIST, AGING, AGING_INDEX = @LOW_LIST@, @AGING@, @AGING_INDEX@
local KIND, QUARANTINE = @KIND@, @QUARANTINE@
local STALE, TTL, POISON_AFTER, LONG_RETRY = @STALE@, @TTL@, @POISON_AFTER@, @LONG_RETRY@
local HISTORY, HISTORY_LENGTH, HISTORY_TTL, FLOOR = @HISTORY@, @HISTORY_LENGTH@, @HISTORY_TTL@, @FLOOR@
local SLOTS, CAP, WAKE, STANDBY = @SLOTS@, @CAP@, @WAKE@, @STANDBY@
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
-- "enqueued_at|id" younger than the stale limit
local function fresh(v, now)
  local t = split2(v)
  return tonumber(t) > now - STALE
end
-- An immediate add: mark dirty if the key runs (or is quarantined), coalesce if a live message
-- waits, else publish. Returns 1 published, 2 marked dirty, 0 coalesced.
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
-- the set's first due time as this script found it (read once per call; false: none waits)
local first_due = nil
-- AddAfter: the delayed set keeps the earliest due time per key. Returns 1 if it moved earlier.
-- ``stale``: the due time a run saw when it began ('' none); still the key's due time at its end,
-- it was scheduled before the run began, which decided afresh: the run's own due time replaces it.
-- A due time before every other in the set is published on WAKE with the set's name: the keepers
-- sleep until the first due time they know of (keeper.py), learn of an earlier one only this way,
-- and read only the namespaces (seed mode) whose time came.
-- An AddAfter from outside (``stale`` false: an event's batched wake) that joins the due time of a
-- key whose reconcile runs marks that due time as its own: moved a microsecond earlier, it no longer
-- equals what BEGIN saw, so the run's END keeps it (the run may have read the state before the event).
local function schedule(key, due, stale)
  local cur = redis.call('ZSCORE', DELAYED, key)
  if cur and tonumber(cur) <= due and cur ~= stale then
    if stale == false and redis.call('HEXISTS', LOCKS, key) == 1 then
      redis.call('ZADD', DELAYED, string.format('%.17g', tonumber(cur) - 0.000001), key)
    end
    return 0
  end
  if first_due == nil then
    local head = redis.call('ZRANGE', DELAYED, 0, 0, 'WITHSCORES')
    first_due = head[2] and tonumber(head[2]) or false
  end
  redis.call('ZADD', DELAYED, due, key)
  if first_due == false or due < first_due then
    redis.call('PUBLISH', WAKE, string.format('%.6f %s', due, DELAYED))
    first_due = due
  end
  return 1
end
-- a key's history (history.py): a run is added at the head when it starts, bounded, with a TTL
local function history_start(key, entry)
  if HISTORY_LENGTH == 0 then return end
  local list = HISTORY .. key
  if redis.call('LPUSH', list, entry) > HISTORY_LENGTH then
    redis.call('LTRIM', list, 0, HISTORY_LENGTH - 1)
  end
  redis.call('EXPIRE', list, HISTORY_TTL)
end
-- complete the run at the head if it is this message's, else add it (its start was lost, e.g. the
-- history expired meanwhile); an empty entry drops it instead (a delivery that handed its key back
-- without running). Entries begin {"id":"<message id>" (history.entry writes the id first).
local function history_finish(key, id, entry)
  if HISTORY_LENGTH == 0 then return end
  local list = HISTORY .. key
  local head = redis.call('LINDEX', list, 0)
  local prefix = '{"id":"' .. id .. '"'
  local mine = head and string.sub(head, 1, #prefix) == prefix
  if entry == '' then
    if mine then redis.call('LPOP', list) end
  elseif mine then
    redis.call('LSET', list, 0, entry)  -- the start set the list's expiry
  else
    history_start(key, entry)
  end
end
-- the start of the key's failure streak (kept across entries) or now, and its last error or ''
local function streak(key, now)
  local prev = redis.call('HGET', FAILING, key)
  if prev then
    local ok, entry = pcall(cjson.decode, prev)
    if ok and type(entry) == 'table' then
      return tonumber(entry.since) or now, tostring(entry.error or '')
    end
  end
  return now, ''
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

# The same add at background priority (an informer's resync): compiled with LIST the queue's
# background list, each message published there is also noted in AGING with its time, so that the
# keepers promote it after --background-aging (_AGE). ARGV as _ENQUEUE's.
_ENQUEUE_BACKGROUND = """
local now = tonumber(ARGV[1])
local published, adds = 0, 0
for i = 2, #ARGV, 3 do
  local r = push_now(ARGV[i], ARGV[i + 1], ARGV[i + 2], now)
  if r == 1 then
    published = published + 1
    redis.call('ZADD', AGING, now, ARGV[i + 1])
  end
  if r > 0 then adds = adds + 1 end
end
if adds > 0 then redis.call('HINCRBY', METRICS, 'adds', adds) end
if published > 0 then redis.call('SADD', AGING_INDEX, AGING) end
return published
"""

# Aging (the cure for starvation, controller-runtime #3496): background messages older than
# ARGV[1] (now - --background-aging) move to the right end of the user-facing list, where the next
# BRPOP takes them. The background list is first in, first out from its right end, so the old
# messages are a run at that end; the first younger one ends the move. Ids in AGING that are gone
# from the list (taken by a worker) and older than the cutoff are dropped; a set left empty leaves
# the aging index. ARGV: cutoff, at most how many to move. Returns how many moved.
_AGE = """
local cutoff, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
local moved = 0
while moved < limit do
  local item = redis.call('LINDEX', LOW_LIST, -1)
  if not item then break end
  local id = string.match(item, '"id":%s*"([^"]+)"')
  local since = id and redis.call('ZSCORE', AGING, id)
  if since and tonumber(since) > cutoff then break end
  redis.call('LMOVE', LOW_LIST, LIST, 'RIGHT', 'RIGHT')
  if id then redis.call('ZREM', AGING, id) end
  moved = moved + 1
end
redis.call('ZREMRANGEBYSCORE', AGING, '-inf', cutoff)
if redis.call('ZCARD', AGING) == 0 then redis.call('SREM', AGING_INDEX, AGING) end
if moved > 0 then redis.call('HINCRBY', METRICS, 'aged', moved) end
return moved
"""

# ARGV: (key, due) pairs. Returns how many keys got an earlier (or a first) due time.
_SCHEDULE = """
local moved = 0
for i = 1, #ARGV, 2 do moved = moved + schedule(ARGV[i], tonumber(ARGV[i + 1]), false) end
return moved
"""

# A child's change waking its owner (the informer's batched wakes): SCHEDULE, but not before the
# key's floor (FLOOR .. key: a time, set with a TTL by the owner's last pass when it only recounted,
# ``machineset/spacing_io``), so that a burst of its children's changes joins one pass per floor.
# ARGV: (key, due) pairs. Returns how many keys got an earlier (or a first) due time.
_SCHEDULE_BATCHED = """
local moved = 0
for i = 1, #ARGV, 2 do
  local due = tonumber(ARGV[i + 1])
  local floor = tonumber(redis.call('GET', FLOOR .. ARGV[i]) or '')
  if floor and floor > due then due = floor end
  moved = moved + schedule(ARGV[i], due, false)
end
return moved
"""

# The publisher: keys whose due time has come move from the delayed set to the queue (a key that
# waits or runs already coalesces, as client-go's waitingLoop adding to the queue). Idempotent and
# leader-free: a key another publisher moved first is no longer due here. ARGV: now, then (key,
# id, message) triples. Returns the number of messages published.
_PROMOTE = """
local now = tonumber(ARGV[1])
local published, adds = 0, 0
for i = 2, #ARGV, 3 do
  local due = redis.call('ZSCORE', DELAYED, ARGV[i])
  if due and tonumber(due) <= now then
    redis.call('ZREM', DELAYED, ARGV[i])
    local r = push_now(ARGV[i], ARGV[i + 1], ARGV[i + 2], now)
    if r == 1 then published = published + 1 end
    if r > 0 then adds = adds + 1 end
    observe('delay_lag', now - tonumber(due))
  end
end
if adds > 0 then redis.call('HINCRBY', METRICS, 'adds', adds) end
return published
"""

# Markers whose message is gone (lost between kombu's BRPOP and its ``unacked`` write when its worker
# was killed at that instant): older than ARGV[2] (now - worker_lost_timeout), still fresh, and
# their message neither on the queue nor held by a worker (kombu's ``unacked`` hash, ARGV[3];
# delivery tags are ``<id>.d``). ARGV: now, deadline, unacked key. Scans the queue only when such
# old markers exist (a backlog older than worker_lost_timeout, or a loss). Returns key, id pairs.
_GHOSTS = """
local now, deadline = tonumber(ARGV[1]), tonumber(ARGV[2])
local old, n = {}, 0
local flat = redis.call('HGETALL', PENDING)
for i = 1, #flat, 2 do
  local t, id = split2(flat[i + 1])
  t = tonumber(t)
  if t < deadline and t > now - STALE and redis.call('HEXISTS', ARGV[3], id .. '.d') == 0 then
    old[id] = flat[i]
    n = n + 1
  end
end
if n == 0 then return {} end
for _, list in ipairs({LIST, LOW_LIST}) do
  local len = redis.call('LLEN', list)
  for start = 0, len - 1, 1000 do
    for _, item in ipairs(redis.call('LRANGE', list, start, start + 999)) do
      local id = string.match(item, '"id":%s*"([^"]+)"')
      if id and old[id] then
        old[id] = nil
        n = n - 1
      end
    end
    if n == 0 then return {} end
  end
end
local out = {}
for id, key in pairs(old) do
  out[#out + 1] = key
  out[#out + 1] = id
end
return out
"""

# Replace a lost message: ARGV now, then (key, lost id, new id, message) quads; a marker that
# changed meanwhile (its message ran, or another keeper repaired it) is left alone.
_REPAIR = """
local now = tonumber(ARGV[1])
local published = 0
for i = 2, #ARGV, 4 do
  local p = redis.call('HGET', PENDING, ARGV[i])
  if p then
    local _, id = split2(p)
    if id == ARGV[i + 1] then
      redis.call('HDEL', PENDING, ARGV[i])
      published = published + push_now(ARGV[i], ARGV[i + 2], ARGV[i + 3], now)
    end
  end
end
return published
"""

# A message arrives at a worker. ARGV: key, id, now, the run's history entry. Returns {status,
# consecutive failures, recovered (1: the key's previous run died mid-reconcile), the
# streak's error before, slot (1: a --concurrent-syncs slot taken, 0: every slot busy), the key's
# due time in the delayed set as the run begins ('' none: END's ``stale``), standby (1: the
# standby marker is set, a Go MCM holds upstream's Lease: the caller hands the key back unrun),
# read-ahead}; status is run | busy | duplicate | quarantined. A run that got its slot is added to
# the key's history. Read-ahead (only on a run, only when KEYS are given: the reconciler's
# ``registry.ReadAhead``): {the field names of the hash KEYS[1], then for each further KEYS[i] its
# field ARGV[3 + i] (false: none)}, what the pass reads first, in the round trip that starts it.
_BEGIN = """
local key, id, now = ARGV[1], ARGV[2], tonumber(ARGV[3])
local queued_at = nil
local p = redis.call('HGET', PENDING, key)
if p then
  local t, pid = split2(p)
  if pid == id then
    queued_at = tonumber(t)
  elseif tonumber(t) > now - STALE then
    return {'duplicate', '0', '0', '', '0', ''}
  end
  redis.call('HDEL', PENDING, key)
end
local failures = tonumber(redis.call('HGET', FAILURES, key) or '0')
local exp, holder = lock_of(key)
local recovered, prev_error = '0', ''
-- A run of the key began and never ended (END drops the lock it holds): its worker died or it
-- overran the lock. Its message's redelivery finds the lock under its own id, live or expired;
-- any other message finds it once it expired (no worker took the redelivery within the TTL), and
-- takes the recovery over: reported once, as the lock then names the new run. A quarantine's
-- expired hold is no run.
if holder == id or (holder and holder ~= QUARANTINE and exp <= now) then
  recovered = '1'
  failures = redis.call('HINCRBY', FAILURES, key, 1)
  redis.call('HINCRBY', METRICS, 'retries', 1)
  local deaths = redis.call('HINCRBY', DEATHS, key, 1)
  local poison = deaths >= POISON_AFTER
  local retry_at = now
  if poison then retry_at = now + LONG_RETRY end
  local since
  since, prev_error = streak(key, now)
  redis.call('HSET', FAILING, key, cjson.encode({kind = KIND, key = key, error = 'WorkerLost',
    message = 'the worker died during the reconcile (' .. deaths .. ' in a row)', count = failures,
    since = since, time = now, quarantined = poison, retry_at = retry_at}))
  if poison then
    -- a poison message: hold the key (adds mark it dirty) until its retry at LongRetry
    redis.call('HSET', LOCKS, key, retry_at .. '|' .. now .. '|' .. QUARANTINE)
    schedule(key, retry_at, false)
    return {'quarantined', tostring(failures), recovered, prev_error, '0', ''}
  end
elseif exp and exp > now then
  redis.call('SADD', DIRTY, key)
  return {'busy', '0', '0', '', '0', ''}
end
redis.call('HSET', LOCKS, key, (now + TTL) .. '|' .. now .. '|' .. id)
redis.call('SREM', DIRTY, key)
if queued_at then observe('queue', now - queued_at) end
local slot = take_slot(SLOTS, id, now, TTL, CAP)
if slot == 1 then history_start(key, ARGV[4]) end
local ahead = {}
if #KEYS > 0 then
  ahead[1] = redis.call('HKEYS', KEYS[1])
  for i = 2, #KEYS do ahead[i] = redis.call('HGET', KEYS[i], ARGV[3 + i]) end
end
return {'run', tostring(failures), recovered, prev_error, tostring(slot),
  redis.call('ZSCORE', DELAYED, key) or '', tostring(redis.call('EXISTS', STANDBY)), ahead}
"""

# A reconcile ended. ARGV: key, id, "now|started|action|due|immediate id|failures before|stale"
# (action: done|requeue|retry; due '' = at once; stale: the due time BEGIN saw, '' none), failing
# entry (retry), immediate message, the finished run's history entry ('' drops its start). A requeue
# or retry replaces a due time scheduled before the run began (still ``stale``: the run decided
# afresh), else the earliest wins. Gives back the delivery's --concurrent-syncs slot. Returns the
# number of messages published.
_END = """
local key, id = ARGV[1], ARGV[2]
local f = {}
for part in string.gmatch(ARGV[3] .. '|', '([^|]*)|') do f[#f + 1] = part end
local now, started, action, due, now_id = tonumber(f[1]), tonumber(f[2]), f[3], f[4], f[5]
local stale = f[7] or ''
local _, holder = lock_of(key)
local mine = holder == id
if mine then redis.call('HDEL', LOCKS, key) end
redis.call('ZREM', SLOTS, id)
history_finish(key, id, ARGV[6])
observe('work', now - started)
if action == 'retry' then
  redis.call('HINCRBY', FAILURES, key, 1)
  redis.call('HINCRBY', METRICS, 'retries', 1)
  redis.call('HSET', FAILING, key, ARGV[4])
  redis.call('HDEL', DEATHS, key)
elseif f[6] ~= '0' then
  redis.call('HDEL', FAILURES, key)
  redis.call('HDEL', FAILING, key)
  redis.call('HDEL', DEATHS, key)
end
local published = 0
if action == 'requeue' or action == 'retry' then
  if due == '' then
    if stale ~= '' and redis.call('ZSCORE', DELAYED, key) == stale then
      redis.call('ZREM', DELAYED, key)  -- the run's own requeue at once replaces it
    end
    local r = push_now(key, now_id, ARGV[5], now)
    if r == 1 then published = 1 end
    if r > 0 then redis.call('HINCRBY', METRICS, 'adds', 1) end
  else
    schedule(key, tonumber(due), stale)
  end
end
-- events that arrived during the run (already counted as adds): exactly one more reconcile
if mine and redis.call('SREM', DIRTY, key) == 1 then
  if push_now(key, now_id, ARGV[5], now) == 1 then published = published + 1 end
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
    enqueue_background: LuaScript
    age: LuaScript
    schedule: LuaScript
    promote: LuaScript
    begin: LuaScript
    end: LuaScript
    ghosts: LuaScript
    repair: LuaScript
    schedule_batched: LuaScript


@dataclass(frozen=True)
class Limits:
    """The settings a kind's scripts carry as constants."""

    stale: float  # a pending marker older than this belongs to a lost message
    lock_ttl: float
    poison_after: int
    long_retry: float
    history_length: int = 0
    history_ttl: int = 0
    concurrent_syncs: int = 1


_compiled: dict[tuple[QueueKeys, Limits], KindScripts] = {}


def kind_scripts(keys: QueueKeys, limits: Limits) -> KindScripts:
    """The scripts of one kind's queue, compiled once per process and configuration."""
    ident = (keys, limits)
    found = _compiled.get(ident)
    if found is not None:
        return found
    constants = {
        "PENDING": lua_string(keys.pending),
        "LOCKS": lua_string(keys.locks),
        "DIRTY": lua_string(keys.dirty),
        "DELAYED": lua_string(keys.delayed),
        "FAILURES": lua_string(keys.failures),
        "FAILING": lua_string(keys.failing),
        "DEATHS": lua_string(keys.deaths),
        "METRICS": lua_string(keys.metrics),
        "LIST": lua_string(keys.broker_list),
        "LOW_LIST": lua_string(keys.background_list),
        "AGING": lua_string(keys.aging),
        "AGING_INDEX": lua_string(keys.aging_index),
        "KIND": lua_string(keys.kind),
        "QUARANTINE": lua_string(QUARANTINE),
        "STALE": repr(float(limits.stale)),
        "TTL": repr(float(limits.lock_ttl)),
        "POISON_AFTER": str(int(limits.poison_after)),
        "LONG_RETRY": repr(float(limits.long_retry)),
        "HISTORY": lua_string(keys.history),
        "FLOOR": lua_string(keys.floor),
        "HISTORY_LENGTH": str(int(limits.history_length)),
        "HISTORY_TTL": str(int(limits.history_ttl)),
        "SLOTS": lua_string(keys.slots),
        "CAP": str(int(limits.concurrent_syncs)),
        "WAKE": lua_string(keys.wake),
        "STANDBY": lua_string(keys.standby),
        "BUCKETS": ", ".join(repr(b) for b in BUCKETS),
    }
    prelude = _prelude(constants)
    # the background add publishes onto the background list: push_now's LIST is that list there
    background = _prelude({**constants, "LIST": constants["LOW_LIST"], "LOW_LIST": constants["LIST"]})
    found = KindScripts(
        LuaScript(prelude + _ENQUEUE),
        LuaScript(background + _ENQUEUE_BACKGROUND),
        LuaScript(prelude + _AGE),
        *(
            LuaScript(prelude + body)
            for body in (_SCHEDULE, _PROMOTE, _BEGIN, _END, _GHOSTS, _REPAIR, _SCHEDULE_BATCHED)
        ),
    )
    _compiled[ident] = found
    return found


def _prelude(constants: dict[str, str]) -> str:
    prelude = TAKE_SLOT + _PRELUDE
    for name, value in constants.items():
        prelude = prelude.replace(f"@{name}@", value)
    return prelude


#: a script call to pipeline: (script, ARGV) or (script, ARGV, KEYS)
Call = tuple[LuaScript, Sequence[Any]] | tuple[LuaScript, Sequence[Any], Sequence[str]]


def run_pipeline(client: redis.Redis, calls: Sequence[Call]) -> list[Any]:
    """Run script calls in one non-transactional pipeline, in order. Calls refused with NOSCRIPT (a
    script not yet loaded, or a restarted Redis) are loaded and run again; only those, so nothing
    runs twice."""
    pending = list(range(len(calls)))
    results: list[Any] = [None] * len(calls)
    for attempt in range(2):
        pipe = client.pipeline(transaction=False)
        for i in pending:
            script, args, *keys = calls[i]
            script.queue(pipe, keys[0] if keys else (), args)
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
