"""``mcm-tasks beat``: Celery beat for the safety jobs, one replica active, the others standing by.

Why RedBeat, and what is ours on top of it. Celery's own scheduler keeps its state in a local file,
so two replicas would each fire every job. RedBeat keeps the schedule and each entry's last run in
Redis, so whichever replica leads knows when a job last fired, also across restarts and takeovers,
and fires it once per period. Its lock, though, is taken once, blocking, at start-up, and a replica
that later loses it (a stall longer than the lease, an emptied Redis) dies on the next renewal. Here
the lead is a Redis lock with the leader-election settings instead, tried on every tick:

- a standby tries to take the lock every ``leader_elect_retry_period`` and never blocks, so it stays
  up and answers signals; the leader renews it on every tick (at most ``leader_elect_retry_period``
  apart) for ``leader_elect_lease_duration``, so a killed leader is replaced within one lease plus
  one retry period, and a stopped one at once (it releases the lock);
- a leader that finds its lock gone stands by again instead of exiting; Redis errors are logged and
  the tick retried, so a Redis restart costs neither replica its process;
- on taking the lead it installs the schedule (again: Redis may have lost it) and runs every job
  once ("at start", as MCM does), then each a period later; between the jobs' due times a tick only
  renews the lock (the schedule is read when its earliest entry is due, not at every tick);
- due entries go to the queue contract (``enqueue``: coalesced with a waiting run of the same job),
  not to a plain Celery publish; each firing is logged to a capped Redis list (``fires``), with the
  replica that fired it, for operators and tests.

``--leader-elect=false`` runs without a lock (one replica by deployment).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import redis
import typer
from celery import Celery
from redbeat import RedBeatScheduler
from redis.exceptions import LockError

from beat_schedule import beat_schedule, job_of
from mcm_tasks import standby, tenancy_io
from mcm_tasks.cli_support import command_settings, log_level
from mcm_tasks.probes import LEADING, PROGRESS, standard_probes
from mcm_tasks.queue import enqueue
from mcm_tasks.redisdb import get_redis, redbeat_options, rkey
from mcm_tasks.settings import Settings, get_settings
from mcm_tasks.tenancy import serving

log = logging.getLogger(__name__)

app = typer.Typer(add_completion=False)

#: firings kept in the log list
FIRE_LOG_LENGTH: Final = 1000
#: the Celery config key carrying this replica's identity to the scheduler
IDENTITY_CONF: Final = "mcm_beat_identity"


def lock_key() -> str:
    return rkey("beat", "lock")


def fires_key() -> str:
    return rkey("beat", "fires")


def default_identity() -> str:
    return f"{socket.gethostname()}_{os.getpid()}_{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
class Fire:
    entry: str
    at: float
    identity: str


def record_fire(client: redis.Redis, entry: str, identity: str, at: float | None = None) -> None:
    with client.pipeline(transaction=False) as pipe:
        pipe.lpush(fires_key(), f"{entry}|{at if at is not None else time.time()!r}|{identity}")
        pipe.ltrim(fires_key(), 0, FIRE_LOG_LENGTH - 1)
        pipe.execute()


def read_fires(client: redis.Redis) -> list[Fire]:
    """Oldest first."""
    out = []
    for raw in reversed(client.lrange(fires_key(), 0, -1)):  # type: ignore[arg-type]
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        entry, at, identity = text.split("|", 2)
        out.append(Fire(entry, float(at), identity))
    return out


class SafetyScheduler(RedBeatScheduler):  # type: ignore[misc]
    """RedBeat's Redis-stored schedule, with the lead taken and kept as the module docstring says."""

    _active = False  # read by setup_schedule, which the base constructor calls
    lock: Any = None  # redis-py Lock while leading (RedBeat's close() releases it)
    #: wall time the earliest stored entry is due (read after each pass); 0: read at the next tick
    _next_due_at = 0.0
    #: passes over the stored schedule (RedBeat's tick: its reads of the due entries)
    passes = 0
    _soonest = float("inf")  # seconds until the soonest entry of this pass is due

    def __init__(self, app: Celery, *args: Any, **kwargs: Any) -> None:
        super().__init__(app, *args, **kwargs)
        settings = get_settings()
        self.lock_key = None  # RedBeat's blocking lock at start-up is replaced by ours
        self.election_key = lock_key() if settings.leader_elect else None
        self.lease = settings.leader_elect_lease_duration
        self.identity = str(app.conf.get(IDENTITY_CONF) or default_identity())

    # --- the lead --------------------------------------------------------------------------------------

    def _lead(self) -> bool:
        """Whether this replica leads now (renewing or taking the lock); it becomes active on taking it."""
        if self.election_key is None:
            if not self._active:
                self._become_active()
            return True
        if self.lock is not None:
            try:
                self.lock.reacquire()
                return True
            except LockError:
                log.warning("beat %s: lost the lead (lock expired or taken); standing by", self.identity)
                self.lock = None
                self._active = False
        lock = get_redis().lock(self.election_key, timeout=self.lease)
        if not lock.acquire(blocking=False, token=self.identity):
            return False
        self.lock = lock
        self._become_active()
        return True

    def _become_active(self) -> None:
        self._active = True
        self._next_due_at = 0.0
        log.info("beat %s: leading; installing the schedule and running every job once", self.identity)
        self.setup_schedule()
        now = self.app.now()
        for name in self.app.conf.beat_schedule:
            try:
                entry = self.Entry.from_key(self.Entry.generate_key(self.app, name), app=self.app)
            except KeyError:  # RedBeat could not store it; it logged why
                continue
            self._fire(entry)
            entry.reschedule(now)

    # --- RedBeat / Celery hooks ------------------------------------------------------------------------

    def install_default_entries(self, data: Any) -> None:
        """None: Celery's only default entry cleans a result backend, and there is none."""

    def setup_schedule(self) -> None:
        if self._active:  # a standby leaves the stored schedule to the leader
            super().setup_schedule()

    def close(self) -> None:
        """A closed scheduler is not a wedged one: it leaves the liveness registry (and the
        leadership gauge) of its process, which may live on (an in-process beat)."""
        PROGRESS.forget("scheduler")
        LEADING.pop("beat", None)
        super().close()

    def tick(self, *args: Any, **kwargs: Any) -> float:
        PROGRESS.beat("scheduler")
        try:
            leading = self._lead()
            LEADING["beat"] = leading
            if not leading:
                return float(self.max_interval)
            wait = self._next_due_at - time.time()
            if wait > 0:  # nothing due before then: this tick only renewed the lead
                return min(float(self.max_interval), wait)
            self._soonest = float("inf")
            interval = float(super().tick(*args, **kwargs))
            self.passes += 1
            # the entries RedBeat loaded (due, or due within max_interval) say exactly when they are
            # due next; the others are due no sooner than their score (RedBeat's whole seconds)
            now, earliest = time.time(), self._earliest_due()
            self._next_due_at = min(now + self._soonest, earliest if earliest > now else float("inf"))
            return interval
        except redis.RedisError as err:
            log.warning(
                "beat %s: Redis error (%s); trying again in %.1fs", self.identity, err, self.max_interval
            )
            return float(self.max_interval)

    def maybe_due(self, entry: Any, **kwargs: Any) -> Any:
        remaining = super().maybe_due(entry, **kwargs)
        if remaining:
            self._soonest = min(self._soonest, float(remaining))
        return remaining

    def _earliest_due(self) -> float:
        """When the earliest enabled entry is due, to the second (RedBeat's score; a disabled one
        scores below 0). RedBeat reads the due entries at every tick, which the lead's renewal makes every
        ``leader_elect_retry_period``: at rest a pipeline of two reads every 2 s for jobs due once
        a minute or less. Only this replica, while it leads, writes the schedule."""
        first = get_redis().zrangebyscore(
            self.app.redbeat_conf.schedule_key, 0, "+inf", start=0, num=1, withscores=True
        )
        return float(first[0][1]) if first else float("inf")

    def apply_async(self, entry: Any, producer: Any = None, advance: bool = True, **kwargs: Any) -> Any:
        if job_of(entry.task, entry.args) is None:
            return super().apply_async(entry, producer, advance, **kwargs)
        if advance:
            entry = self.reserve(entry)
        self._fire(entry)
        return None

    def _fire(self, entry: Any) -> None:
        job = job_of(entry.task, entry.args)
        if job is None:
            return
        held = standby.read(get_redis())
        if held is not None:  # a Go MCM holds upstream's Lease: its safety jobs are its own
            log.info("beat %s: %s not run, %s", self.identity, entry.name, held.describe())
            return
        settings = get_settings()
        if settings.seed_mode:  # each served namespace has its own safety jobs (mcm_tasks.tenancy)
            published = 0
            for namespace in tenancy_io.served(get_redis(), settings):
                with serving(namespace, settings):
                    published += enqueue(*job)
        else:
            published = enqueue(*job)
        record_fire(get_redis(), entry.name, self.identity)
        log.debug("beat %s: %s → %s %s (%s)", self.identity, entry.name, job[0], job[1],
                  "enqueued" if published else "coalesced with a waiting run")  # fmt: skip


def beat_config(settings: Settings, identity: str) -> dict[str, Any]:
    return {
        "beat_schedule": beat_schedule(settings),
        "beat_max_loop_interval": max(0.1, settings.leader_elect_retry_period),
        **redbeat_options(settings),  # the URL, Sentinel and TLS: mcm_tasks.redisdb
        "redbeat_key_prefix": rkey("beat", ""),
        "redbeat_lock_key": None,
        IDENTITY_CONF: identity or default_identity(),
    }


def run_beat(settings: Settings, identity: str = "", loglevel: str = "info") -> None:
    from mcm_tasks.celery_app import app as celery
    from mcm_tasks.celery_app import apply_settings

    apply_settings(settings)
    celery.conf.update(beat_config(settings, identity))
    celery.Beat(
        scheduler=SafetyScheduler,
        max_interval=celery.conf.beat_max_loop_interval,
        loglevel=loglevel.upper(),
        quiet=True,
    ).run()


def start_beat_thread(settings: Settings, identity: str = "") -> Callable[[], None]:
    """The same scheduler as ``run_beat``, on a daemon thread of another process (``mcm-tasks
    informer --beat``), and the function that stops it. Beat is a loop that renews a lock and
    enqueues a few jobs a minute: a process of its own costs a whole interpreter (issue 28: ~55 MB
    PSS of the ~400 of an idle installation) for a thread's worth of work. Leadership stays its
    own Redis lock, independent of the informer's Lease: every replica that runs it stands by until
    it takes the lock, so informers with beat and ``mcm-tasks beat`` pods can even be mixed."""
    from celery.beat import Service

    from mcm_tasks.celery_app import app as celery
    from mcm_tasks.celery_app import apply_settings

    apply_settings(settings)
    celery.conf.update(beat_config(settings, identity))
    service = Service(celery, max_interval=celery.conf.beat_max_loop_interval, scheduler_cls=SafetyScheduler)
    thread = threading.Thread(target=service.start, name="beat", daemon=True)
    thread.start()

    def stop() -> None:
        service.stop()
        thread.join(timeout=max(5.0, 2 * float(celery.conf.beat_max_loop_interval)))

    return stop


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    epilog="Example: mcm-tasks beat --machine-safety-orphan-vms-period=30m",
)
def beat(
    ctx: typer.Context,
    identity: str = typer.Option("", help="This replica's name in the lock and the fire log."),
    loglevel: str = typer.Option("", help="Log level (default: from --v, info)."),
) -> None:
    """Run Celery beat for the safety jobs; one replica leads, the others stand by. MCM flags
    (--machine-safety-overshooting-period=30s …) follow."""
    settings = command_settings(ctx.args)
    from mcm_tasks.observability import serve

    serve(settings, standard_probes(settings, apiserver=False))
    run_beat(settings, identity, log_level(loglevel))


if __name__ == "__main__":
    app()
