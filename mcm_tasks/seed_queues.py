"""Seed mode's worker: consume the queues of every served namespace, as they come and go.

A worker starts on the installation's own queues (``<prefix>.<kind>``, empty in seed mode, so that
a worker of an installation with no namespace yet still runs) plus the served namespaces' queues
known at start (``served_queues``), and this consumer bootstep follows the registry
(``tenancy_io.served``) every ``--seed-refresh-period``: a namespace added gets its queues consumed
within seconds, a namespace removed has them cancelled (what waits on them stays in Redis, for the
namespace's return). The change is handed to the consumer's own loop (``call_soon``), as Celery's
``add_consumer`` control command does it. The registry's entries also carry the target Secrets'
resourceVersions as the informer last read them: the process's tenant clients follow them
(``clients.note_published_versions``) instead of reading every namespace's Secrets each minute.
Which kinds a worker consumes comes from its own installation queues (``--queues``).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any

import redis
from celery import bootsteps

from mcm_tasks import tenancy_io
from mcm_tasks.cache.models import get_parsed_cache
from mcm_tasks.kinds import QUEUES
from mcm_tasks.kube.clients import forget_tenant, note_published_versions
from mcm_tasks.redisdb import get_redis
from mcm_tasks.settings import Settings, get_settings
from mcm_tasks.tenancy import queue_names as tenant_queue_names
from mcm_tasks.tenancy import tenant_of_queue, tenant_prefix

log = logging.getLogger(__name__)


def served_queues(settings: Settings, kinds: list[str]) -> list[str]:
    """The served namespaces' queues of these kinds, at a worker's start."""
    try:
        served = tenancy_io.served(get_redis(), settings)
    except redis.RedisError as err:  # the bootstep adds them once Redis answers
        log.warning("seed mode: served namespaces unknown at start (%s)", err)
        served = []
    return tenant_queue_names(settings, served, kinds)


def consumed_kinds(settings: Settings, queues: list[str]) -> list[str]:
    """The kinds of the installation's queues among ``queues`` (what ``--queues`` asked for)."""
    own = {settings.queue_name(kind): kind for kind in QUEUES}
    return [own[q] for q in queues if q in own]


def forget_namespaces(settings: Settings, cancelled: list[str]) -> set[str]:
    """What this process holds for the namespaces whose queues it stopped consuming: their clients
    (they go with the last pass using them) and their parsed mirror objects. The namespaces."""
    gone = {t[0] for q in cancelled if (t := tenant_of_queue(q, settings.install_prefix))}
    for namespace in gone:
        forget_tenant(namespace)
        get_parsed_cache().drop_tables(tenant_prefix(settings.install_prefix, namespace))
    return gone


#: (the registry's generation as last read, the queues consumed): what a round of the seed-queues
#: thread works from
Round = tuple[str | None, frozenset[str]]

#: while neither the registry's generation nor the consumed queues move, the queues to consume are
#: worked out again only this often (and the published versions noted again, which tenants' clients
#: follow while fresher than ``clients.PUBLISHED_FRESH``)
RESTATE_EVERY = 10.0


def quiet_round(state: Round, last: Round | None, now: float, last_at: float) -> bool:
    """Whether a round of the seed-queues thread may stop after its read of the registry's generation.

    A worker's thread looks every ``--seed-refresh-period`` (2 s), and working out the queues of
    fifty namespaces (eight kinds each) against the four hundred it consumes, and noting their
    published versions, was most of the thread's CPU at rest, every round, to find nothing to do.
    Without a generation (an older informer's registry, or none yet) every round works it out."""
    return bool(state[0]) and state == last and now - last_at < RESTATE_EVERY


def queue_changes(current: set[str], wanted: set[str]) -> tuple[list[str], list[str]]:
    """(to add, to cancel) among the tenants' queues."""
    return sorted(wanted - current), sorted(current - wanted)


class SeedQueues(bootsteps.StartStopStep):
    """Follows the served namespaces (a thread), handing queue changes to the consumer loop."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, c: Any, **kwargs: Any) -> None:
        super().__init__(c, **kwargs)
        self.thread: threading.Thread | None = None
        self.stopped = threading.Event()
        self.c: Any = None

    def start(self, c: Any) -> None:
        self.c = c  # a restarted consumer (a lost connection) is the one to hand changes to
        settings = get_settings()
        if not settings.seed_mode or (self.thread is not None and self.thread.is_alive()):
            return
        self.stopped.clear()
        self.thread = threading.Thread(target=self._follow, args=(settings,), name="seed-queues", daemon=True)
        self.thread.start()

    def stop(self, c: Any) -> None:
        self.stopped.set()

    def shutdown(self, c: Any) -> None:
        self.stopped.set()

    def _consumed(self) -> set[str]:
        consumer = getattr(self.c, "task_consumer", None)
        return {q.name for q in getattr(consumer, "queues", None) or []}

    def _follow(self, settings: Settings) -> None:
        down = False
        registry = tenancy_io.RegistryFollower()  # read again only when it moved on
        last: Round | None = None
        last_at = -math.inf
        while not self.stopped.wait(settings.seed_refresh_period):
            try:
                consumed = self._consumed()
                client = get_redis()
                published = registry.read(client, settings)
            except redis.RedisError as err:
                if not down:
                    log.warning("seed mode: served namespaces unreadable, keeping the queues: %s", err)
                down = True
                continue
            down = False
            now, state = time.monotonic(), (registry.generation, frozenset(consumed))
            if quiet_round(state, last, now, last_at):
                continue
            last, last_at = state, now
            served = tenancy_io.served(client, settings, published)  # from the entries read: no I/O
            kinds = consumed_kinds(settings, sorted(consumed))
            note_published_versions(
                {ns: e["versions"] for ns, e in published.items() if isinstance(e.get("versions"), list)}
            )
            own = {settings.queue_name(kind) for kind in QUEUES}
            tenants = {q for q in consumed if q not in own}
            add, cancel = queue_changes(tenants, set(tenant_queue_names(settings, served, kinds)))
            c = self.c
            for queue in add:
                c.call_soon(c.add_task_queue, queue, routing_key=queue)
            for queue in cancel:
                c.call_soon(c.cancel_task_queue, queue)
            forget_namespaces(settings, cancel)
            if add or cancel:
                log.info("seed mode: consuming %d more queues, %d fewer", len(add), len(cancel))
