"""Namespace leases in Redis, so that each namespace is run by one informer process at a time (seed
mode; ``informers.shards`` decides who should run what).

Keys, under ``<key_prefix>:shards:``:

- ``members``: a sorted set, member id → the Redis server's time of its last heartbeat (ms). A
  member whose heartbeat is older than the lease is dead and is dropped by the next tick of anyone.
- ``lease:<namespace>``: the member id running the namespace, with a TTL of the lease duration.

A member ticks every ``renew_every`` seconds: one Lua script writes its heartbeat, drops the dead,
renews the leases it holds (compare-and-set on its id, so a lease that expired, and may have been
taken, is found lost), deletes the leases it gave up on its previous tick (compare-and-delete) and
answers the live members; the plan (``shards.plan``) follows, and only when it wants namespaces this
member does not hold, a second script takes them (``SET NX PX``). An idle tick is one round trip.

Safety rests on the order of acts: a namespace is taken in Redis before the tick reports it
``started``, and it is reported ``stopped`` one tick before its lease is deleted, so the caller (who
stops what a tick reports stopped before calling ``tick`` again) never runs a namespace whose lease
another member could hold. A lease lost to expiry (the member did not tick for a whole lease) is
reported on the next tick; in between, ``Ownership.valid_until`` (this process's monotonic clock,
read before the renewal was sent, plus the lease) says when the caller must stop by itself.

Handover: a member that should no longer run a namespace (another joined, or it is no longer
wanted) gives it up on its next tick; a member that stopped ticking (killed) drops out of the
members and its leases expire at the same time, a lease after its last renewal, so the others take
its namespaces within ``lease_seconds + renew_every``; ``stop()`` (graceful shutdown) leaves the
members and deletes its leases at once, so the others take them on their next tick.

Times that members compare are the Redis server's (``TIME`` in the script, ``PX`` on the leases), never
the hosts' clocks. Key names are built by the caller and passed as KEYS.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import redis
from prometheus_client import Counter, Gauge

from informers.shards import plan
from mcm_tasks.queue.scripts import LuaScript

log = logging.getLogger(__name__)

SHARD_NAMESPACES = Gauge(
    "mcm_informer_shard_namespaces",
    "Namespaces this informer process runs: the shard leases it holds (seed mode)",
)
SHARD_HANDOVERS = Counter(
    "mcm_informer_shard_handovers_total",
    "Namespace leases this informer process took (acquired), gave up to another member or because "
    "the namespace is no longer served (released), or found expired or taken while it held them (lost)",
    ["direction"],
)
#: every direction is exported from the start, at 0
HANDOVER_DIRECTIONS = ("acquired", "released", "lost")
for _direction in HANDOVER_DIRECTIONS:
    SHARD_HANDOVERS.labels(direction=_direction)

#: KEYS[1] the members; KEYS[2 .. 1+n] the leases held (renewed); the rest, leases to delete.
#: ARGV: member id, lease (ms), n. Answers {indexes (1-based) of the held leases lost, live members}.
_TICK = LuaScript("""
if redis.replicate_commands then redis.replicate_commands() end
local me, lease, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now, me)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - lease))
redis.call('PEXPIRE', KEYS[1], 2 * lease)
local lost = {}
for i = 2, n + 1 do
  if redis.call('GET', KEYS[i]) == me then
    redis.call('PEXPIRE', KEYS[i], lease)
  else
    lost[#lost + 1] = i - 1
  end
end
for i = n + 2, #KEYS do
  if redis.call('GET', KEYS[i]) == me then redis.call('DEL', KEYS[i]) end
end
return {lost, redis.call('ZRANGE', KEYS[1], 0, -1)}
""")

#: KEYS: leases to take. ARGV: member id, lease (ms). Answers the indexes (1-based) taken. A lease
#: already ours (a previous answer lost on the way) is renewed and counts as taken.
_ACQUIRE = LuaScript("""
local me, lease = ARGV[1], ARGV[2]
local got = {}
for i = 1, #KEYS do
  if redis.call('SET', KEYS[i], me, 'NX', 'PX', lease) then
    got[#got + 1] = i
  elseif redis.call('GET', KEYS[i]) == me then
    redis.call('PEXPIRE', KEYS[i], lease)
    got[#got + 1] = i
  end
end
return got
""")

#: KEYS[1] the members; the rest, leases to delete if still ours. ARGV: member id.
_LEAVE = LuaScript("""
redis.call('ZREM', KEYS[1], ARGV[1])
for i = 2, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1] then redis.call('DEL', KEYS[i]) end
end
return 0
""")


def new_member_id() -> str:
    """A member id unique to this process's life: ``<host>-<pid>-<random>``. Two live processes
    must never share one (the second would renew the first one's leases)."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def members_key(prefix: str) -> str:
    return f"{prefix}:shards:members"


def lease_key(prefix: str, namespace: str) -> str:
    return f"{prefix}:shards:lease:{namespace}"


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def holders(client: redis.Redis, prefix: str) -> dict[str, str]:
    """namespace → the member holding its lease, as Redis holds them now (for tests and the admin
    CLI; it scans, so not for a loop)."""
    start = len(lease_key(prefix, ""))
    keys = [_text(k) for k in client.scan_iter(match=lease_key(prefix, "*"), count=500)]
    values = client.mget(keys) if keys else []
    return {k[start:]: _text(v) for k, v in zip(keys, values, strict=True) if v is not None}


@dataclass(frozen=True)
class Ownership:
    """What a tick leaves this member running, and the change the caller applies: stop every
    namespace of ``stopped`` before the next tick, start those of ``started``."""

    owned: frozenset[str]
    started: frozenset[str]
    stopped: frozenset[str]
    #: monotonic time until which ``owned`` is safe without another successful tick
    valid_until: float


class ShardKeeper:
    """One informer process's namespace leases. ``tick`` and ``stop`` may be called from different
    threads; each call is serialized."""

    def __init__(
        self,
        client: redis.Redis,
        prefix: str,
        member_id: str,
        lease_seconds: float = 15.0,
        renew_every: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 < renew_every < lease_seconds:
            raise ValueError(
                f"renew_every ({renew_every}) must be positive and below lease_seconds ({lease_seconds})"
            )
        self.client = client
        self.prefix = prefix
        self.member_id = member_id
        self.lease_seconds = lease_seconds
        self.renew_every = renew_every
        self.clock = clock
        self._lease_ms = max(1, round(lease_seconds * 1000))
        self._members = members_key(prefix)
        self._held: set[str] = set()
        #: given up on the last tick (reported stopped), deleted on the next
        self._releasing: set[str] = set()
        self._lock = threading.Lock()
        self.valid_until = float("-inf")
        #: the live members as the last tick saw them
        self.members: tuple[str, ...] = ()

    @property
    def owned(self) -> frozenset[str]:
        """The namespaces this member holds, as of its last tick."""
        return frozenset(self._held)

    def owned_at(self, now: float | None = None) -> frozenset[str]:
        """The namespaces this member may run at ``now`` (monotonic): none once its leases may have
        expired without a tick noticing."""
        now = self.clock() if now is None else now
        with self._lock:
            return frozenset(self._held) if now < self.valid_until else frozenset()

    def _leases(self, namespaces: Sequence[str]) -> list[str]:
        return [lease_key(self.prefix, ns) for ns in namespaces]

    def tick(self, wanted: Collection[str], now: float | None = None) -> Ownership:
        """Heartbeat, renew, give up and take per the plan; ``now`` is this process's monotonic
        clock (default ``clock()``), read before anything is sent. Redis errors are logged, not
        raised: the leases held stay owned until ``valid_until``, then are reported lost."""
        with self._lock:
            now = self.clock() if now is None else now
            held, releasing = sorted(self._held), sorted(self._releasing)
            try:
                lost_at, live = _TICK(
                    self.client,
                    [self._members, *self._leases(held), *self._leases(releasing)],
                    [self.member_id, self._lease_ms, len(held)],
                )
            except redis.RedisError as err:
                log.warning("shard member %s: tick failed: %s", self.member_id, err)
                return self._unrenewed()
            self._releasing.clear()
            self.valid_until = now + self.lease_seconds
            lost = {held[i - 1] for i in lost_at}
            self._held -= lost
            self.members = tuple(sorted(_text(m) for m in live))
            decided = plan(wanted, self.members, self.member_id, self._held)
            self._held -= decided.release
            self._releasing |= decided.release
            started = self._acquire(sorted(decided.acquire - lost))
            self._held |= started
            if lost:
                log.warning("shard member %s lost the leases of %s", self.member_id, ", ".join(sorted(lost)))
            return self._report(started, decided.release, lost)

    def _acquire(self, namespaces: list[str]) -> set[str]:
        if not namespaces:
            return set()
        try:
            got = _ACQUIRE(self.client, self._leases(namespaces), [self.member_id, self._lease_ms])
        except redis.RedisError as err:  # whatever was taken is adopted by the next tick
            log.warning("shard member %s: taking leases failed: %s", self.member_id, err)
            return set()
        return {namespaces[i - 1] for i in got}

    def _unrenewed(self) -> Ownership:
        """A tick that reached no Redis: what is held stays owned until its leases may expire."""
        if self.clock() < self.valid_until or not self._held:
            return Ownership(frozenset(self._held), frozenset(), frozenset(), self.valid_until)
        lost = set(self._held)
        self._held.clear()
        log.warning(
            "shard member %s: leases unrenewed for %.1fs, stopping %d",
            self.member_id,
            self.lease_seconds,
            len(lost),
        )
        return self._report(set(), set(), lost)

    def _report(self, started: set[str], released: Collection[str], lost: set[str]) -> Ownership:
        for direction, count in (
            ("acquired", len(started)),
            ("released", len(released)),
            ("lost", len(lost)),
        ):
            if count:
                SHARD_HANDOVERS.labels(direction=direction).inc(count)
        SHARD_NAMESPACES.set(len(self._held))
        if started or released:
            log.info(
                "shard member %s runs %d namespaces (+%d, -%d)",
                self.member_id,
                len(self._held),
                len(started),
                len(released),
            )
        return Ownership(
            frozenset(self._held), frozenset(started), frozenset(released) | lost, self.valid_until
        )

    def stop(self) -> frozenset[str]:
        """Leave: drop out of the members and delete every lease held, so the others take them on
        their next tick. Call it once the namespaces are stopped; answers those that were held."""
        with self._lock:
            held = frozenset(self._held)
            try:
                _LEAVE(
                    self.client,
                    [self._members, *self._leases(sorted(held | self._releasing))],
                    [self.member_id],
                )
            except redis.RedisError as err:  # they expire within the lease
                log.warning("shard member %s: leaving failed: %s", self.member_id, err)
            self._held.clear()
            self._releasing.clear()
            self.valid_until = float("-inf")
            if held:
                SHARD_HANDOVERS.labels(direction="released").inc(len(held))
            SHARD_NAMESPACES.set(0)
            return held

    def run(
        self,
        wanted: Callable[[], Collection[str]],
        apply: Callable[[Ownership], None],
        stop: threading.Event,
    ) -> None:
        """Tick every ``renew_every`` until ``stop`` is set, handing each change to ``apply`` (which
        stops the namespaces of ``stopped`` before it returns), then stop everything and leave.
        While ticks fail, the next one comes at ``valid_until`` at the latest, so the leases are
        found lost (and the namespaces stopped) as they may expire."""
        try:
            while True:
                ownership = self.tick(wanted())
                if ownership.started or ownership.stopped:
                    apply(ownership)
                wait = self.renew_every
                if ownership.owned:
                    wait = max(0.0, min(wait, ownership.valid_until - self.clock()))
                if stop.wait(wait):
                    break
        finally:
            held = self.owned
            if held:
                apply(Ownership(frozenset(), frozenset(), held, self.valid_until))
            self.stop()
