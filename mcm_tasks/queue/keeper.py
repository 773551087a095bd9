"""The keeper: a thread in every worker's main process that makes the queues outlive any worker.

Five duties, each leader-free and idempotent (any number of workers run them at once):

1. **Publish due keys** (client-go's delaying queue ``waitingLoop``): requeue-afters and error
   backoffs wait in Redis, in each kind's delayed sorted set, not as Celery ETA messages in some
   worker's memory. The keeper sleeps until the first due time it knows of, as ``waitingLoop``
   does; a script that schedules a key before every other of its set publishes the due time on
   the wake channel (``messages.wake_channel``), which the keeper listens to, so an idle fleet
   costs no polling. It then moves due keys onto their queue (``producer.publish_due``, one Lua
   script per kind: a key moved by another worker first is no longer due here). A key due at once
   is published within ``delayed_publish_interval`` (a burst of notifications costs one read per
   interval); as a backstop (a notification missed while reconnecting) the keeper that repairs
   (duty 4) also learns every view's first due time, from the repair's survey, and reads the
   views whose time came; not every keeper at every sweep: at rest that read (one ZRANGE per kind)
   was most of a worker's Redis commands. (A keeper that resubscribes reads them at once itself.)
   In seed mode it keeps each namespace's next due time (a wake message names its set) and reads
   only the namespaces whose time came. While upstream's MCM holds its Lease
   (``mcm_tasks.standby``) nothing is published: the keeper looks again every
   ``UPSTREAM_RETRY_PERIOD``.
2. **Heartbeat and lease renewal**: kombu's Redis transport keeps each delivered, unacknowledged
   message in ``<prefix>:broker:unacked`` (tag → message) and ``…:unacked_index`` (tag → time of
   delivery) until its ack. The keeper sets the index time of every message this process holds
   (prefetched or running) to now, every ``worker_lost_timeout / 5``, and records the worker's
   heartbeat in ``<prefix>:q:workers``. A live worker's messages are therefore never older than a
   few seconds in the index, however long they wait or run.
3. **Sweep**: a message whose index time is older than ``worker_lost_timeout`` belongs to a worker
   that died (SIGKILL, OOM, a lost node): one Lua script moves it back onto its queue (as kombu's
   ``restore_visible`` does after ``visibility_timeout``, an hour by default) and counts it in its
   kind's metrics (``recovered``: ``mcm_workqueue_recovered_total``). The redelivered message then
   takes over its key's lock (the queue contract's BEGIN: same message id) and its recovery hooks
   drop what the dead run promised. The sweep runs when the oldest held message can first be found
   lost (its index time plus ``worker_lost_timeout``, read by the sweep itself), at most every
   ``worker_lost_timeout / 10``: an idle fleet sweeps once per ``worker_lost_timeout``.
4. **Repair lost messages**: a worker killed in the instant between kombu's BRPOP and its
   ``unacked`` write loses that message outright (kombu's Redis transport has no atomic fetch).
   Its key's pending marker would then coalesce every later event into nothing for
   ``visibility_timeout``; every ``worker_lost_timeout / 2`` the keeper finds markers older than
   ``worker_lost_timeout`` whose message is neither queued nor held, and publishes them again.
   The repair (and the backstop read of duty 1) looks at shared state, so one keeper of the fleet
   runs it per period, whichever takes the turn first (``take_repair_turn``). A turn first surveys
   every queue of every view in one script call (``survey``: each pending hash's size, each delayed
   set's head) and searches only the queues holding markers: a seed at rest has none.

5. **Age background messages**: an informer resync's messages wait on each queue's background list,
   behind every user-facing message (``messages.BACKGROUND_PRIORITY``); one keeper of the fleet per
   ``--background-aging`` / 2 moves those that waited ``--background-aging`` to the front of the
   user-facing list, so a steady stream of user-facing work cannot starve them
   (controller-runtime's priority queue starved them: #3496). A turn looks only at the queues the
   aging index names (``messages.aging_index_key``), and at every queue once a minute.

A Redis outage only pauses the keeper (logged once per outage); it never stops.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Sequence

import redis

from mcm_tasks import standby, tenancy_io
from mcm_tasks.broker import held_delivery_tags
from mcm_tasks.queue.messages import (
    aging_index_key,
    broker_prefix,
    build_message,
    new_id,
    queue_keys,
    wake_channel,
    workers_key,
)
from mcm_tasks.queue.producer import age_background, publish_due_many, publish_due_views, scripts_for
from mcm_tasks.queue.scripts import Call, LuaScript, run_pipeline
from mcm_tasks.redisdb import get_redis
from mcm_tasks.settings import QUEUES, Settings, get_settings
from mcm_tasks.standby import UPSTREAM_RETRY_PERIOD, Standby
from mcm_tasks.tenancy import tenant_settings

log = logging.getLogger(__name__)

#: one aging turn of the fleet per this period looks at every queue, the others at those of the
#: aging index only (``age_all``)
FULL_AGING_EVERY = 60.0
#: most messages one sweep call restores (more come on the next tick)
SWEEP_BATCH = 200
#: a dead worker's heartbeat entry is forgotten after this
FORGET_WORKERS_AFTER = 86400.0

# KEYS: unacked hash, unacked index. ARGV: deadline (index time below it = lost), limit, broker key
# prefix, key prefix (a queue ``<key prefix>.<kind>`` counts in ``<key prefix>:q:<kind>:metrics``, a
# tenant's ``<key prefix>:ns:<namespace>.<kind>`` in its own).
# kombu stores json.dumps([message, exchange, routing_key]); the message is pushed back as stored
# (the text between the outer "[" and the last two strings), onto the queues bound to (exchange,
# routing key), at the consuming end, as kombu's restore does.
_SWEEP = LuaScript(
    r"""
local tags = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local restored = 0
for _, tag in ipairs(tags) do
  local raw = redis.call('HGET', KEYS[1], tag)
  if not raw then
    redis.call('ZREM', KEYS[2], tag)  -- acknowledged meanwhile: nothing to restore
  else
    local ok, entry = pcall(cjson.decode, raw)
    local message = string.match(raw, '^%[(.*), "[^"]*", "[^"]*"%]$')
    -- an entry of another shape stays for kombu's own restore (after the visibility timeout)
    if ok and type(entry) == 'table' and message then
      redis.call('ZREM', KEYS[2], tag)
      redis.call('HDEL', KEYS[1], tag)
      local exchange, routing_key = tostring(entry[2]), tostring(entry[3])
      local queues = {}
      if exchange ~= '' then
        for _, binding in ipairs(redis.call('SMEMBERS', ARGV[3] .. '_kombu.binding.' .. exchange)) do
          local rk, _, queue = string.match(binding, '^(.-)\006\022(.-)\006\022(.*)$')
          if queue and rk == routing_key then queues[#queues + 1] = queue end
        end
      end
      if #queues == 0 then queues[1] = routing_key end
      for _, queue in ipairs(queues) do
        redis.call('RPUSH', ARGV[3] .. queue, message)
        -- <prefix>.<kind>, or a seed-mode tenant's <prefix>:ns:<namespace>.<kind>
        local owner, kind = string.match(queue, '^(.*)%.([^.]+)$')
        if owner and string.sub(owner, 1, #ARGV[4]) == ARGV[4] then
          redis.call('HINCRBY', owner .. ':q:' .. kind .. ':metrics', 'recovered', 1)
        end
      end
      restored = restored + 1
    end
  end
end
-- the oldest index time left: no message can be lost before it plus the timeout (the keeper's
-- next sweep); nil when nobody holds a message
local oldest = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
return {#tags, restored, oldest[2]}
"""
)


def renew(client: redis.Redis, worker: str, tags: list[str], now: float, settings: Settings) -> None:
    """The worker's heartbeat, and the index time of every message it holds set to ``now``
    (``XX``: a tag acknowledged meanwhile is not brought back)."""
    pipe = client.pipeline(transaction=False)
    pipe.zadd(workers_key(settings), {worker: now})
    if tags:
        pipe.zadd(broker_prefix(settings) + "unacked_index", dict.fromkeys(tags, now), xx=True)
    pipe.execute()


def repair_turn_key(settings: Settings) -> str:
    """Taken (``SET NX PX``) by the keeper whose turn it is to repair (see ``take_repair_turn``)."""
    return f"{settings.install_prefix}:q:keeper:repair"


def take_repair_turn(client: redis.Redis, worker: str, every: float, settings: Settings) -> bool:
    """Whether this keeper repairs now: the first of all workers' keepers to ask in each period of
    ``every`` seconds. The repair and the delayed sets' backstop read look at shared state, so one
    run per period serves the whole fleet; N workers used to run it N times (16 script calls each,
    most of a resting worker's Redis commands). A keeper that dies holding the turn costs one
    period: the key expires with it. Dead workers' heartbeat entries are forgotten here too."""
    if not client.set(repair_turn_key(settings), worker, nx=True, px=max(1, int(every * 1000))):
        return False
    client.zremrangebyscore(workers_key(settings), "-inf", time.time() - FORGET_WORKERS_AFTER)
    return True


def aging_turn_key(settings: Settings) -> str:
    return f"{settings.install_prefix}:q:keeper:aging"


def full_aging_turn_key(settings: Settings) -> str:
    return f"{settings.install_prefix}:q:keeper:aging-full"


def age_all(client: redis.Redis, worker: str, now: float, every: float, settings: Settings) -> int:
    """Duty 5, aging: one keeper of the fleet per period of ``every`` (``--background-aging`` / 2)
    promotes the background messages (a resync's) that waited ``--background-aging`` behind
    user-facing work, of every kind and namespace (``producer.age_background``). It looks only at
    the queues the aging index names (a seed at rest: none, where every kind of fifty namespaces
    cost 300 script calls a turn), and at all of them in one turn of the fleet per
    ``FULL_AGING_EVERY`` (a message put back by a sweep has no index entry). How many moved."""
    if not client.set(aging_turn_key(settings), worker, nx=True, px=max(1, int(every * 1000))):
        return 0
    if client.set(full_aging_turn_key(settings), worker, nx=True, px=int(FULL_AGING_EVERY * 1000)):
        return age_background(client, now, tenant_views(client, settings))
    waiting = {
        m.decode() if isinstance(m, bytes) else str(m) for m in client.smembers(aging_index_key(settings))
    }
    if not waiting:
        return 0
    return age_background(client, now, tenant_views(client, settings), only=waiting)


def repair_lost(client: redis.Redis, now: float, settings: Settings) -> int:
    """Publish again for keys whose pending marker outlived its message (lost in the instant
    between kombu's BRPOP and its ``unacked`` write, when a worker died right then): without this
    the marker would coalesce every later event of the key into nothing for ``visibility_timeout``.
    A message merely slow to come (a long backlog) is found on its queue and left alone; should one
    be replaced anyway, BEGIN drops the older copy as a duplicate. How many were published."""
    return repair_lost_many(client, now, [settings])


#: The repair turn's first look, one call for every view (seed mode: every served namespace) and
#: kind. KEYS: the queues' pending hashes, then their delayed sets, in the same order. Returns each
#: hash's marker count, then each set's first due time ('' when it is empty). A seed at rest has no
#: marker anywhere: the turn used to run a ghost search per queue and a due read per namespace
#: (350 script calls every worker_lost_timeout / 2 with fifty namespaces) to learn that.
_SURVEY = LuaScript(
    r"""
local n = #KEYS / 2
local out = {}
for i = 1, n do
  out[i] = redis.call('HLEN', KEYS[i])
  local head = redis.call('ZRANGE', KEYS[n + i], 0, 0, 'WITHSCORES')
  out[n + i] = head[2] or ''
end
return out
"""
)


def survey(client: redis.Redis, views: Sequence[Settings]) -> tuple[list[bool], list[float | None]]:
    """For every view and kind (views outer, ``QUEUES`` inner): whether its pending hash holds a
    marker; and for every view, the first due time of its delayed sets (None: nothing waits)."""
    keys = [queue_keys(kind, view) for view in views for kind in QUEUES]
    if not keys:
        return [], []
    reply = _SURVEY(client, [k.pending for k in keys] + [k.delayed for k in keys], ())
    busy = [int(count) > 0 for count in reply[: len(keys)]]
    firsts: list[float | None] = []
    for v in range(len(views)):
        dues = [float(raw) for raw in reply[len(keys) + v * len(QUEUES) :][: len(QUEUES)] if raw]
        firsts.append(min(dues) if dues else None)
    return busy, firsts


def repair_lost_many(client: redis.Redis, now: float, views: list[Settings]) -> int:
    """``repair_lost`` for several settings views (seed mode: every served namespace's queues)."""
    return repair_and_survey(client, now, views)[0]


def repair_and_survey(
    client: redis.Redis, now: float, views: list[Settings]
) -> tuple[int, list[float | None]]:
    """The repair turn: ``repair_lost`` for every view, searching only the queues the survey found
    markers in, and each view's first due time from the same survey (the keeper's backstop against
    a missed wake notification: ``Keeper.due_at``). How many were published, and the due times."""
    busy, firsts = survey(client, views)
    pairs = [(view, kind) for view in views for kind in QUEUES]
    searched = [pair for pair, has_markers in zip(pairs, busy, strict=True) if has_markers]
    calls: list[Call] = [
        (
            scripts_for(kind, view).ghosts,
            [now, now - view.worker_lost_timeout, broker_prefix(view) + "unacked"],
        )
        for view, kind in searched
    ]
    found_all = run_pipeline(client, calls) if calls else []
    published = 0
    for (settings, kind), found in zip(searched, found_all, strict=True):
        if not found:
            continue
        queue = settings.queue_name(kind)
        args: list[object] = [now]
        for n in range(0, len(found), 2):
            key, lost = (v.decode() if isinstance(v, bytes) else v for v in found[n : n + 2])
            mid = new_id()
            args += (key, lost, mid, build_message(kind, key, mid, queue))
        repaired = int(scripts_for(kind, settings).repair(client, (), args))
        if repaired:
            log.warning("%s: published again for %d keys whose message was lost", kind, repaired)
        published += repaired
    return published, firsts


def tenant_views(client: redis.Redis, settings: Settings) -> list[Settings]:
    """The settings each queue set is kept under: the installation's, or in seed mode each served
    namespace's (``mcm_tasks.tenancy``: a tenant's delayed sets and markers are its own)."""
    if not settings.seed_mode:
        return [settings]
    return [tenant_settings(settings, ns) for ns in tenancy_io.served(client, settings)]


def publish_due_all(client: redis.Redis, now: float, settings: Settings) -> tuple[int, float | None]:
    """``publish_due`` for every view of ``tenant_views``: the messages published, the first due time."""
    return publish_due_many(client, now, tenant_views(client, settings))


def sweep(client: redis.Redis, now: float, settings: Settings) -> int:
    """Put the messages of dead workers back on their queues; how many."""
    return sweep_until(client, now, settings)[0]


def sweep_until(client: redis.Redis, now: float, settings: Settings) -> tuple[int, float]:
    """``sweep``, and the earliest time a message can be found lost at the next one: the oldest
    index time left plus ``worker_lost_timeout``, or ``now`` plus it when no message is held (a
    message delivered later is indexed at its delivery, after ``now``; renewals only move index
    times later). A worker whose clock runs behind by d is found lost up to d late."""
    prefix = broker_prefix(settings)
    keys = (prefix + "unacked", prefix + "unacked_index")
    args = [now - settings.worker_lost_timeout, SWEEP_BATCH, prefix, settings.install_prefix]
    total = 0
    while True:
        scanned, restored, *oldest = _SWEEP(client, keys, args)
        total += int(restored)
        if int(scanned) < SWEEP_BATCH or not int(restored):
            first = float(oldest[0]) if oldest and oldest[0] is not None else now
            return total, min(first, now) + settings.worker_lost_timeout


def parse_wake(data: object) -> tuple[float, str | None] | None:
    """A wake message's due time and the key prefix of the view whose set it is in (None when the
    message names no set: read every view); None for anything else (``stop``)."""
    text = data.decode() if isinstance(data, bytes) else str(data)
    due_text, _, delayed = text.partition(" ")
    try:
        due = float(due_text)
    except ValueError:
        return None
    view, sep, _ = delayed.rpartition(":q:")
    return due, (view if sep else None)


class Wake:
    """The keeper's subscription to the wake channel: due times scheduled before every other of
    their set (``scripts.schedule``). Its own connection; dropped and made anew after an error."""

    def __init__(self, client: redis.Redis, channel: str) -> None:
        self.pubsub = client.pubsub(ignore_subscribe_messages=True)
        self.pubsub.subscribe(channel)

    def wait(self, timeout: float, stop: threading.Event) -> dict[str | None, float]:
        """Block until a due time is published or ``timeout`` passes: the earliest due time heard
        per view (its key prefix; None for a message that names no set), every message waiting read;
        empty if none."""
        deadline = time.monotonic() + timeout
        heard: dict[str | None, float] = {}
        while not stop.is_set():
            left = deadline - time.monotonic()
            message = self.pubsub.get_message(timeout=max(0.0, left) if not heard else 0.0)
            if message is None:
                if heard or left <= 0:
                    return heard
                continue  # a subscribe confirmation, skipped
            found = parse_wake(message["data"])
            if found is not None:
                due, view = found
                heard[view] = min(heard.get(view, due), due)
        return heard

    def close(self) -> None:
        with contextlib.suppress(redis.RedisError, OSError):
            self.pubsub.close()


class Keeper(threading.Thread):
    """The four duties on one daemon thread; ``stop()`` ends it and clears the heartbeat."""

    def __init__(self, worker: str, settings: Settings | None = None) -> None:
        super().__init__(name="mcm-keeper", daemon=True)
        self.worker = worker
        self.settings = settings or get_settings()
        self._stop_event = threading.Event()
        self.published = 0
        self.restored = 0
        self.repaired = 0
        #: background messages this keeper promoted after --background-aging (duty 5)
        self.aged = 0
        #: times the keeper read the delayed sets (publish_due): what an idle fleet pays for
        self.due_reads = 0
        #: views whose delayed sets those reads covered (seed mode: namespaces; else one a read)
        self.views_read = 0
        #: sweeps run (when a held message can first be lost, at most every ``worker_lost_timeout / 10``)
        self.sweeps = 0
        #: repairs (with the backstop read) this keeper ran: its turns, one per period fleet-wide
        self.repairs = 0
        #: the standby in force at the last publish pass (``mcm_tasks.standby``): nothing published
        self.standing_by: Standby | None = None
        #: each view's next due time as last read or heard (its key prefix → time; inf: nothing
        #: waits); a view not in it is read at the next publish pass
        self.due_at: dict[str, float] = {}

    def stop(self, timeout: float = 5.0) -> None:
        self._stop_event.set()
        with contextlib.suppress(redis.RedisError):
            get_redis().publish(wake_channel(self.settings), "stop")  # out of its wait at once
        if self.is_alive():
            self.join(timeout)
        with contextlib.suppress(redis.RedisError):
            get_redis().zrem(workers_key(self.settings), self.worker)

    def publish_due(self, client: redis.Redis, now: float) -> tuple[int, float]:
        """Duty 1 for the views whose due time came (or is unknown): the messages published and the
        next time a view is due (inf: nothing waits). Reading every served namespace's sets at each
        wake-up made the reads grow with the square of the namespaces in a seed's scale-up."""
        views = tenant_views(client, self.settings)
        due = [v for v in views if self.due_at.get(v.key_prefix, 0.0) <= now]
        published, firsts = publish_due_views(client, now, due)
        self.views_read += len(due)
        for view, first in zip(due, firsts, strict=True):
            self.due_at[view.key_prefix] = float("inf") if first is None else first
        if len(self.due_at) > len(views):  # namespaces no longer served
            served = {v.key_prefix for v in views}
            self.due_at = {k: v for k, v in self.due_at.items() if k in served}
        return published, min(self.due_at.values(), default=float("inf"))

    def run(self) -> None:
        s = self.settings
        beat_every = max(0.2, s.worker_lost_timeout / 5)
        # the sweep runs when the oldest held message can first be lost (``sweep_until``), at most
        # this often: an idle fleet sweeps once per worker_lost_timeout, not ten times
        sweep_every = max(0.2, min(s.worker_lost_timeout / 10, 2.0))
        repair_every = max(1.0, s.worker_lost_timeout / 2)
        aging_every = max(0.5, s.background_aging / 2)
        next_beat = next_sweep = next_due = 0.0
        next_aging = time.time() + aging_every
        next_repair = time.time() + repair_every
        wake: Wake | None = None
        down = False
        while not self._stop_event.is_set():
            try:
                client = get_redis()
                if wake is None:  # (re)subscribed: what was published meanwhile is unknown
                    wake = Wake(client, wake_channel(s))
                    next_due = 0.0
                    self.due_at.clear()
                now = time.time()
                if now >= next_beat:
                    renew(client, self.worker, held_delivery_tags(), now, s)
                    next_beat = now + beat_every
                if now >= next_sweep:
                    restored, lost_at = sweep_until(client, now, s)
                    if restored:
                        self.restored += restored
                        log.warning("restored %d messages of dead workers to their queues", restored)
                    next_sweep = max(now + sweep_every, lost_at)
                    self.sweeps += 1
                if now >= next_repair:
                    if take_repair_turn(client, self.worker, repair_every, s):
                        self.repairs += 1
                        tenants = tenant_views(client, s)
                        repaired, firsts = repair_and_survey(client, now, tenants)
                        self.repaired += repaired
                        # the backstop of a missed notification: every view's first due time, as
                        # the survey read it; the views whose time came are read at once
                        for tenant, first in zip(tenants, firsts, strict=True):
                            self.due_at[tenant.key_prefix] = float("inf") if first is None else first
                        next_due = min(next_due, min(self.due_at.values(), default=float("inf")))
                    next_repair = now + repair_every
                if now >= next_aging:
                    self.aged += age_all(client, self.worker, now, aging_every, s)
                    next_aging = now + aging_every
                if now >= next_due:
                    held = standby.read(client)
                    if held is not None:  # a Go MCM holds upstream's Lease: no key of ours moves
                        if self.standing_by is None:
                            log.warning("keeper: %s", held.describe())
                        self.standing_by = held
                        next_due = now + UPSTREAM_RETRY_PERIOD
                    else:
                        if self.standing_by is not None:
                            log.info("keeper: standby over, publishing delayed keys again")
                        self.standing_by = None
                        published, next_due = self.publish_due(client, now)
                        self.published += published
                        self.due_reads += 1
                if down:
                    log.info("keeper: Redis is back")
                    down = False
                wait = min(next_beat, next_sweep, next_repair, next_aging, next_due) - time.time()
                heard = wake.wait(max(0.0, wait), self._stop_event)
                for view, due in heard.items():
                    if view is None:  # a set not named: every view is read
                        self.due_at.clear()
                    elif view in self.due_at:
                        self.due_at[view] = min(self.due_at[view], due)
                    # no sooner than delayed_publish_interval after the notification, and a
                    # read already set for earlier stays: a burst of schedules (a scale-up)
                    # costs a read per interval, not one per notification
                    next_due = min(next_due, max(due, time.time() + s.delayed_publish_interval))
            except (redis.RedisError, OSError) as err:
                if not down:
                    log.warning("keeper: Redis unreachable, retrying: %s", err)
                    down = True
                if wake is not None:
                    wake.close()
                    wake = None
                self._stop_event.wait(1.0)
            except Exception:  # never die: the queues depend on this thread
                log.exception("keeper: unexpected error")
                self._stop_event.wait(1.0)
        if wake is not None:
            wake.close()
