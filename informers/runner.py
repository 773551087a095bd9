"""The active informer: one reflector thread per resource, one writer (this thread) for everything.

The writer takes events in batches (whatever arrives within ``BATCH_LINGER`` of the first, up to
``BATCH_MAX``), applies them to the store, writes the batch to Redis in one MULTI and only then
enqueues its keys in one call, so a reconcile always finds at least the state that woke it. Redis
errors are retried with backoff (writes are idempotent), never dropped. A batch of Node status
heartbeats only (``Change.lazy``: they wake nothing) is neither lingered over nor written at once:
its writes join the next commit, at most ``SENTINEL_EVERY`` later (an idle fleet's 1000 Nodes
report every 5 min, 3 a second, each of which was a commit of its own).

Redis losing its data is noticed through the sentinel: the writer reads it back with every commit
(and every ``SENTINEL_EVERY`` when idle); gone or changed means the mirror is no longer what the store
believes, so the store is dropped and every resource re-listed as if starting, which enqueues every
key again. The periodic resync (``min_resync_period``, jittered like MCM's informer factory)
enqueues every key from the store, so a lost message costs at most one period.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import partial
from math import inf
from typing import Any, TypeVar

import redis
from kubernetes.client import ApiClient

from informers.events import Routing
from informers.informer import Backoff, Reflector
from informers.mirror import Commit, Mirror
from informers.problems import ProblemReporter
from informers.processor import Item, Outcome, Processor, WatchEvent
from informers.resources import BY_KIND, WatchedResource, resource_version, watch_namespace, watched_resources
from informers.routing import full_resync
from informers.sink import Sink, send_routing
from informers.store import Store
from mcm_tasks import kinds, tracing
from mcm_tasks.api import Obj
from mcm_tasks.kinds import QUEUES
from mcm_tasks.memory import Trimmer
from mcm_tasks.probes import INFORMER_LAG_KEY_PARTS, PROGRESS
from mcm_tasks.queue.messages import queue_keys
from mcm_tasks.redisdb import master_address, rkey
from mcm_tasks.settings import Settings

log = logging.getLogger(__name__)

BATCH_MAX = 500
#: how long the writer waits for more events after the first of a batch. A writer faster than its
#: watches otherwise writes one event per batch, and a batch's fixed cost (a MULTI with the
#: sentinel check, a round trip to enqueue, redis-py's pipeline) is most of an event's: measured
#: (bench/informer.py) 214 µs of informer CPU and 40 µs of Redis per event alone, 96 and 21 in
#: eights. A few milliseconds against reconciles that take tens of them.
BATCH_LINGER = 0.01
QUEUE_MAX = 50_000
IDLE_CHECK = 0.5
#: put into a writer's inbox by ``Informer.wake``: no event, it only ends the writer's wait
WAKE: Any = object()
#: how often a writer with nothing to write still checks the sentinel (Redis lost its data). Every
#: idle wakeup did (0.5 s): four Redis commands a wakeup, half the informer's Redis traffic at rest.
SENTINEL_EVERY = 2.0
STATUS_EVERY = 1.0
STATUS_TTL = 60
#: how often the status hash's TTL is renewed (with whatever changed in it, the restless counters too)
STATUS_REFRESH = STATUS_TTL / 3
#: status fields that change at every wakeup: written with the others, never a reason to write
_RESTLESS = frozenset({"idle_wakeups"})

T = TypeVar("T")


def lag_key() -> str:
    """The hash of the mirror's watch lag per kind (``mcm_informer_lag_seconds``): ``<kind>`` the
    seconds, ``<kind>:at`` when it was seen (epoch seconds)."""
    return rkey(*INFORMER_LAG_KEY_PARTS)


#: the lag hash is written at most this often
LAG_EVERY = 1.0
#: a kind's lag is written again when it moved this much (the lag's resolution: managedFields times
#: are whole seconds)
LAG_RESOLUTION = 1.0
#: a lag at or over the threshold is written again at least this often, well inside the readers'
#: ``lagging.SIGNAL_WINDOW`` (30 s)
LAG_REFRESH = 10.0


def status_key(identity: str) -> str:
    return rkey("informer", "status", identity)


class Informer:
    """The informer process's work while it leads: list+watch every kind, mirror, route, resync.

    Upstream: the informers of ``NewController`` and ``Run``; the reconciling ``worker`` loops run in
    the Celery workers instead.
    """

    def __init__(
        self,
        settings: Settings,
        apis: Mapping[str, ApiClient],
        client: redis.Redis,
        sink: Sink,
        identity: str = "",
        resources: list[WatchedResource] | None = None,
        trimmer: Trimmer | None = None,
        pace: float = 1.0,
        woken: bool = False,
    ) -> None:
        self.settings = settings
        self.apis = apis
        self.mirror = Mirror(client)
        self.redis = client
        self.sink = sink
        self.identity = identity or uuid.uuid4().hex
        self.resources = resources if resources is not None else watched_resources(settings)
        self.reflectors: list[Reflector] = []
        self.counters = {
            "batches": 0, "events": 0, "enqueued": 0, "resyncs": 0, "redis_lost": 0,
            "redis_failovers": 0, "object_problems": 0, "idle_wakeups": 0,
        }  # fmt: skip
        #: the Redis master this writer last wrote to (Sentinel only)
        self._master: Any = None
        #: the status hash as last written, and when its TTL is next renewed
        self._published: dict[str, str] = {}
        self._status_refresh = 0.0
        #: the largest watch lag per kind since the lag hash was last written
        self._lag: dict[str, float] = {}
        self._lag_due = 0.0
        #: kind → (seconds, epoch seconds) as last written to the lag hash (``lag_update``)
        self._lag_published: dict[str, tuple[float, float]] = {}
        self.problems = ProblemReporter(self._record_problem)
        #: gives back the heap a burst of events left (mcm_tasks/memory.py); started when leading
        #: how much slower the idle timers run (the wake-up, the sentinel check, the status hash):
        #: a seed-mode process runs one informer per namespace, and at rest those timers were
        #: most of its CPU, for checks whose answer is the same in a few seconds
        self.pace = pace
        #: the owner calls ``wake`` whenever it sets the writer's stop (seed mode's namespaces): the
        #: idle writer then sleeps until its next timer instead of looking at ``stop`` every
        #: ``IDLE_CHECK * pace``; fifty namespaces' writers woke 600 times a minute at rest, most
        #: wake-ups with no timer due
        self.woken = woken
        #: the writer's inbox while it leads (``wake`` puts its marker there)
        self._inbox: queue.Queue[Item] | None = None
        #: a seed-mode informer's tenants share their process's trimmer (started by its owner)
        self.trimmer = trimmer or Trimmer()
        self._trimming = trimmer is not None

    def _record_problem(self, identity: Obj, reason: str, message: str) -> None:
        """A Warning Event on the object, in its own cluster (the control cluster for MCM kinds)."""
        from mcm_tasks.kube.events import WARNING, recorder_for

        kind = next((r.kind for r in BY_KIND.values() if r.api.kind == identity.get("kind")), None)
        cluster = BY_KIND[kind].cluster if kind is not None else "control"
        api = self.apis.get(cluster)
        if api is not None:
            recorder_for(api, "mcm-tasks-informer").event(identity, WARNING, reason, message)

    def lead(self, stop: threading.Event) -> None:
        """Mirror and route until ``stop`` is set (leadership lost, or shutdown)."""
        store = Store(self.settings.namespace)
        processor = Processor(store)
        if not self._trimming:
            self.trimmer.start()
            self._trimming = True
        self._status_refresh = 0.0  # the hash may have expired while this process stood by
        self._lag_published = {}  # and the lag hash been written by another leader
        inbox: queue.Queue[Item] = queue.Queue(QUEUE_MAX)
        self._inbox = inbox
        expected = self._retry(self.mirror.sentinel, stop)
        for res in self.resources:
            self._retry(lambda res=res: self._seed(processor, res.kind), stop)  # type: ignore[misc]
        log.info("leading as %s: %d objects already mirrored", self.identity, len(store))

        def emit(item: Item) -> None:
            """Hand an item to the writer; a full inbox holds the reflector back, until stop."""
            while not stop.is_set():
                try:
                    inbox.put(item, timeout=IDLE_CHECK)
                    return
                except queue.Full:
                    continue

        reflectors = [
            Reflector(
                res,
                self.apis[res.cluster],
                watch_namespace(res, self.settings),
                emit,
                self.settings,
                stop,
            )
            for res in self.resources
        ]
        self.reflectors = reflectors
        for reflector in reflectors:
            reflector.start()
        try:
            self._write_loop(stop, processor, inbox, reflectors, expected)
        finally:
            for reflector in reflectors:
                reflector.stop()
            for reflector in reflectors:
                reflector.join(5.0)
            self.problems.close()
            self._publish_status(reflectors, leading=False, whole=True)

    def _seed(self, processor: Processor, kind: str) -> int:
        """Take in what the mirror holds of a kind, and rebuild its versions hash from it (what an
        earlier leader kept may be stale: ``Mirror.rebuild_versions``)."""
        versions: list[tuple[str, str]] = []

        def noted(found: Iterable[tuple[str, Obj]]) -> Iterator[tuple[str, Obj]]:
            for key, obj in found:
                versions.append((key, resource_version(obj)))
                yield key, obj

        count = processor.seed(kind, noted(self.mirror.scan(kind)))
        self.mirror.rebuild_versions(kind, versions)
        return count

    def wake(self) -> None:
        """End the writer's idle wait at once (after ``stop`` is set: it stops now, not after up to
        ``IDLE_CHECK * pace``; a seed-mode process stops a namespace's informer before it gives the
        namespace's lease up, and its shard ticks wait for that)."""
        if self._inbox is not None:
            with contextlib.suppress(queue.Full):
                self._inbox.put_nowait(WAKE)

    def _write_loop(
        self,
        stop: threading.Event,
        processor: Processor,
        inbox: queue.Queue[Item],
        reflectors: list[Reflector],
        expected: str | None,
    ) -> None:
        unlisted = {r.kind for r in self.resources}
        epoch: str | None = None
        next_resync = time.monotonic() + self._resync_period()
        next_status = 0.0
        next_sentinel = 0.0
        #: lazy changes (Node heartbeats) held back for the next commit
        pending = Commit()
        #: the status has news since it was last published (a batch came): its timer counts
        status_due = True
        try:
            while not stop.is_set():
                PROGRESS.beat("writer")
                wait = IDLE_CHECK * self.pace
                if self.woken:
                    dues = writer_dues(
                        next_sentinel=next_sentinel,
                        next_status=next_status,
                        status_refresh=self._status_refresh,
                        status_due=status_due,
                        next_resync=next_resync if epoch is not None else inf,
                        lag_due=self._lag_due if self._lag else inf,
                    )
                    wait = idle_wait(time.monotonic(), SENTINEL_EVERY * self.pace, dues)
                batch = _take_batch(inbox, wait, linger=0.0)
                outcome = processor.process(batch) if batch else Outcome()
                if outcome.commit.urgent or outcome.routing:
                    # worth waiting for company: what arrives within the linger shares the write
                    more = _take_more(inbox, BATCH_MAX - len(batch), BATCH_LINGER)
                    processor.process(more, outcome)
                    batch += more
                status_due = status_due or news(outcome)
                unlisted.difference_update(outcome.listed)
                if outcome.problems:
                    self.counters["object_problems"] += len(outcome.problems)
                    self.problems.report(outcome.problems)
                if epoch is None and not unlisted:
                    epoch = expected = f"{self.identity}:{uuid.uuid4().hex}"
                    outcome.commit.sentinel = epoch
                    log.info("all %d resources listed; mirror complete", len(self.resources))
                now = time.monotonic()
                pending.absorb(outcome.commit)
                if not sentinel_due(pending.urgent, now, next_sentinel):
                    seen = expected  # nothing to write now; the sentinel was checked lately
                else:
                    seen = self._retry(lambda c=pending: self.mirror.write(c), stop)  # type: ignore[misc]
                    pending, next_sentinel = Commit(), now + SENTINEL_EVERY * self.pace
                if stop.is_set():
                    return
                if expected is not None and seen != expected:
                    log.warning(
                        "the mirror lost its data (sentinel %r, expected %r): re-listing everything",
                        seen,
                        expected,
                    )
                    self.counters["redis_lost"] += 1
                    self._lag_published.clear()  # the lag hash went with the rest
                    processor.store.clear()
                    unlisted, epoch, expected = {r.kind for r in self.resources}, None, None
                    for reflector in reflectors:
                        reflector.relist(initial=True)
                self._deliver(outcome.routing, stop)
                if tracing.enabled():
                    tracing.informer_batch(machine_events(batch), set(outcome.routing.enqueue))
                if epoch is not None:
                    self._after_failover(processor, stop)
                self.counters["batches"] += bool(batch)
                if batch:
                    self.trimmer.worked()
                self.counters["idle_wakeups"] += not batch
                self.counters["events"] += outcome.events
                self._note_lag(outcome.lag)
                now = time.monotonic()
                if epoch is not None and now >= next_resync:
                    self.counters["resyncs"] += 1
                    self._deliver(full_resync(processor.store), stop)
                    next_resync = now + self._resync_period()
                if now >= next_status and (status_due or now >= self._status_refresh):
                    self._publish_status(reflectors, leading=True, epoch=epoch)
                    next_status = now + STATUS_EVERY * self.pace
                    status_due = False
        finally:
            PROGRESS.forget("writer")  # a stopped writer is not a wedged one

    def _after_failover(self, processor: Processor, stop: threading.Event) -> None:
        """A Sentinel failover promoted another master: whatever the old one had not yet passed on
        to its replica is lost, and a message taken from a queue as the master died may be lost
        with it. Lost mirror writes show as a lost sentinel (``Mirror.write``); lost messages do
        not, and their keys' pending marks would coalesce new adds into them until the marks go
        stale. So the marks are dropped and every key is enqueued again (MCM's resync): a message
        that did survive then meets a newer mark and is dropped as a duplicate at its begin."""
        address = master_address(self.redis)
        if address is None:
            return
        if self._master is not None and address != self._master:
            log.warning("Redis failover: master %s -> %s; enqueueing every key again", self._master, address)
            self.counters["redis_failovers"] += 1
            self._retry(lambda: self.redis.delete(*(queue_keys(kind).pending for kind in QUEUES)), stop)
            self._deliver(full_resync(processor.store), stop)
        self._master = address

    def _resync_period(self) -> float:
        return self.settings.min_resync_period * (1.0 + random.random())

    def _deliver(self, routing: Routing, stop: threading.Event) -> None:
        if not routing:
            return
        try:
            self.counters["enqueued"] += self._retry(lambda: send_routing(self.sink, routing), stop) or 0
        except Exception as err:  # refused by the sink: one by one, so a bad key costs only itself
            log.warning("could not enqueue %d keys at once (%s); one by one", len(routing.enqueue), err)
            self._deliver_each(routing, stop)

    def _deliver_each(self, routing: Routing, stop: threading.Event) -> None:
        """The keys of a batch the sink refused, each alone (its expectations went through already)."""
        for queue_name, key in routing.items():
            single = Routing()
            single.add(queue_name, key, batched=(queue_name, key) in routing.batched)
            try:
                self.counters["enqueued"] += self._retry(partial(send_routing, self.sink, single), stop) or 0
            except Exception as err:  # the periodic resync tries again
                log.warning("could not enqueue %s %s: %s: %s", queue_name, key[:200], type(err).__name__, err)

    def _retry(self, fn: Callable[[], T], stop: threading.Event) -> T | None:
        """Run ``fn`` until it gets through to Redis (or ``stop``): the writer never drops a batch."""
        backoff = Backoff(base=0.05, cap=5.0)
        while True:
            try:
                return fn()
            except (redis.RedisError, OSError) as err:
                if stop.is_set():
                    return None
                delay = backoff.next()
                PROGRESS.beat("writer")  # waiting for Redis is not being wedged
                log.warning("Redis unavailable (%s); retrying in %.2fs", err, delay)
                stop.wait(delay)

    def _note_lag(self, lag: Mapping[str, float]) -> None:
        """Keep the largest lag per kind; write what a reader would see differently (``lag_update``)
        at most every ``LAG_EVERY`` (one command)."""
        for kind, seconds in lag.items():
            self._lag[kind] = max(seconds, self._lag.get(kind, 0.0))
        now, wall = time.monotonic(), time.time()
        changed = lag_update(self._lag_published, self._lag, wall, self.settings.mirror_lag_threshold)
        if not changed:  # nothing a reader would see: no write, and no wake-up for one
            self._lag = {}
            return
        if now < self._lag_due:
            return
        at = repr(wall)
        mapping = {kind: f"{seconds:.3f}" for kind, seconds in changed.items()}
        mapping.update({f"{kind}:at": at for kind in changed})
        try:
            self.redis.hset(lag_key(), mapping=mapping)  # type: ignore[arg-type]
        except (redis.RedisError, OSError):
            log.debug("lag not published", exc_info=True)
            self._lag_due = now + LAG_EVERY  # tried again then (a woken writer sleeps until it)
            return
        self._lag_published.update({kind: (seconds, wall) for kind, seconds in changed.items()})
        self._lag, self._lag_due = {}, now + LAG_EVERY

    def _publish_status(
        self, reflectors: list[Reflector], leading: bool, epoch: str | None = None, whole: bool = False
    ) -> None:
        """The status hash (for people and tests: no process reads it): what changed since it was last
        written. Written every second as it was, it was a third of the informer's Redis commands at
        rest, where nothing in it changes but the idle wakeups. Every ``STATUS_REFRESH`` its TTL is
        renewed, with every field that changed, the restless counters too; a hash that any write
        finds gone (expired while the loop was held up, or Redis lost it) is written again whole.
        Rewritten whole on each refresh, a seed's fifty writers sent a hundred fields each every
        twenty seconds at rest, a fifth of the informer's idle CPU."""
        fields = {"identity": self.identity, "leading": "1" if leading else "0", "epoch": epoch or ""}
        fields.update({k: str(v) for k, v in self.counters.items()})
        for reflector in reflectors:
            fields.update(reflector.stats.as_fields(reflector.resource.kind))
        now = time.monotonic()
        refresh = not whole and now >= self._status_refresh
        update = fields if whole else status_update(self._published, fields, refresh)
        if not update and not refresh:
            return
        key = status_key(self.identity)
        try:
            pipe = self.redis.pipeline(transaction=False)
            pipe.expire(key, STATUS_TTL)  # before the fields: 0 says the hash is gone
            if update:
                pipe.hset(key, mapping=update)  # type: ignore[arg-type]
            if not pipe.execute()[0]:  # gone: written whole, and its TTL set (the EXPIRE found none)
                if update is not fields:
                    update = fields
                    pipe.hset(key, mapping=update)  # type: ignore[arg-type]
                pipe.expire(key, STATUS_TTL)
                pipe.execute()
        except (redis.RedisError, OSError):
            log.debug("status not published", exc_info=True)
            return
        self._published = fields if update is fields else {**self._published, **update}
        if whole or refresh:
            self._status_refresh = now + STATUS_REFRESH


def news(outcome: Outcome) -> bool:
    """Whether a batch is news for the status hash: it wrote or routed something, listed a kind or
    found a problem. A batch of Node status heartbeats alone (lazy changes) is not: its counters
    wait for the next refresh (``STATUS_REFRESH``). At rest a fleet's Nodes report every few seconds, and each
    report made a status write of its own (a single installation's every second, each of a seed's
    namespaces' every ten)."""
    return bool(outcome.commit.urgent or outcome.routing or outcome.listed or outcome.problems)


def lag_update(
    published: Mapping[str, tuple[float, float]],
    lag: Mapping[str, float],
    now: float,
    threshold: float,
) -> dict[str, float]:
    """Which kinds' lags to write (kind → seconds), given what was last written (kind → (seconds,
    at)): a kind not written yet, one whose lag moved by the lag's resolution (``LAG_RESOLUTION``) or
    crossed ``threshold`` either way, and one at or over the threshold whose last report is getting
    old for the readers' ``lagging.SIGNAL_WINDOW``. A mirror that keeps up reports lags under a
    second for every event it mirrors (a Node's heartbeat among them); writing each of those changed
    nothing a reader decides on, and the gauge shows the last one to its resolution."""
    out = {}
    for kind, seconds in lag.items():
        last = published.get(kind)
        if (
            last is None
            or abs(seconds - last[0]) >= LAG_RESOLUTION
            or (threshold > 0 and (seconds >= threshold) != (last[0] >= threshold))
            or (threshold > 0 and seconds >= threshold and now - last[1] >= LAG_REFRESH)
        ):
            out[kind] = seconds
    return out


def machine_events(batch: list[Item]) -> list[tuple[str, str, str, str]]:
    """The batch's Machine watch events as (type, uid, key, resourceVersion), for their traces."""
    out = []
    for item in batch:
        if isinstance(item, WatchEvent) and item.obj.get("kind") == kinds.MACHINE.resource.kind:
            meta = item.obj.get("metadata") or {}
            key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
            out.append((item.type, str(meta.get("uid") or ""), key, str(meta.get("resourceVersion") or "")))
    return out


def status_update(published: Mapping[str, str], fields: Mapping[str, str], refresh: bool) -> dict[str, str]:
    """What of the status hash to write, but for a whole write: the fields that changed since
    ``published``; when it is not a ``refresh`` of the TTL, nothing unless more than the restless
    counters changed (those ride with the next write)."""
    changed = {k: v for k, v in fields.items() if published.get(k) != v}
    return changed if refresh or changed.keys() - _RESTLESS else {}


def sentinel_due(changes: bool, now: float, due: float) -> bool:
    """Whether the writer writes a commit now: always when it has changes to write at once (every
    commit reads the sentinel back), and one of lazy changes or none when the last check is
    ``SENTINEL_EVERY`` old, so Redis losing its data is still noticed within seconds when no event
    arrives, and a held-back heartbeat is mirrored within as long."""
    return changes or now >= due


def writer_dues(
    *,
    next_sentinel: float,
    next_status: float,
    status_refresh: float,
    status_due: bool,
    next_resync: float,
    lag_due: float,
) -> list[float]:
    """When the writer's timers next have work (monotonic times): each is a time at which the loop
    does that work and moves the timer on, so a writer that sleeps until the first never spins. The
    status is written when it has news (``status_due``) at ``next_status``, and refreshed at
    ``status_refresh``, but no sooner than ``next_status`` either way: the loop looks at the status
    only then (a refresh due before it would end every wait at once until it came)."""
    status = next_status if status_due else max(next_status, status_refresh)
    return [next_sentinel, status, next_resync, lag_due]


def idle_wait(now: float, ceiling: float, dues: Sequence[float]) -> float:
    """How long an idle writer may wait for an event: until the first of its timers (monotonic
    due times) comes, at most ``ceiling``, never less than nothing."""
    return max(0.0, min(ceiling, min(dues, default=inf) - now))


def _take_batch(
    inbox: queue.Queue[Item],
    wait: float,
    linger: float = BATCH_LINGER,
    sleep: Callable[[float], Any] = time.sleep,
) -> list[Item]:
    """The first item within ``wait``, then whatever else arrives within ``linger`` of it."""
    try:
        first = inbox.get(timeout=wait)
    except queue.Empty:
        return []
    if first is WAKE:
        return []
    return [first, *_take_more(inbox, BATCH_MAX - 1, linger, sleep)]


def _take_more(
    inbox: queue.Queue[Item], room: int, linger: float, sleep: Callable[[float], Any] = time.sleep
) -> list[Item]:
    """Up to ``room`` more items, after ``linger``. The writer sleeps through the linger rather than
    waiting on the inbox: a wait would wake it for every event put, and the thread switches would
    cost much of what batching saves. The writer lingers only for a batch it must write at once: a
    lone Node heartbeat (a lazy change) waits for the next commit anyway."""
    if linger > 0 and inbox.qsize() < room:
        sleep(linger)
    more: list[Item] = []
    while len(more) < room:
        try:
            item = inbox.get_nowait()
        except queue.Empty:
            break
        if item is not WAKE:
            more.append(item)
    return more
