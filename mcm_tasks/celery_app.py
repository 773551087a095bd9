"""The Celery application: Redis broker, JSON only, one queue per kind.

Choices that carry the queue contract (see mcm_tasks/queue/README.md):

- ``task_acks_late``: a message is acknowledged after its reconcile, so a worker that dies
  mid-reconcile does not lose the key; its message comes back.
- ``task_reject_on_worker_lost``: when a pool process dies, its message is requeued at once
  instead of being dropped. Celery warns this can loop on a task that kills its worker; the
  contract counts such a redelivery (same message id still holding the key's lock) as a worker
  death, and ``poison_after`` of them in a row quarantine the key (retried at long-retry).
- ``task_acks_on_timeout`` off: a reconcile killed by the hard time limit is redelivered likewise.
  The time limits sit below ``reconcile_lock_ttl`` so a lock never expires under a running
  reconcile (the soft limit raises inside the reconciler: an ordinary failure with backoff).
- no countdown or ETA message ever: requeue-afters wait in Redis (the delayed sets) and every
  worker's keeper thread (mcm_tasks/queue/keeper.py, started on ``worker_ready``) publishes them
  when due, so a worker holds at most its prefetch of messages.
- a dead worker's messages (prefetched or running) are put back by any worker's keeper after
  ``worker_lost_timeout``: live workers renew the messages they hold. kombu's own restore after
  ``visibility_timeout`` stays as a backstop.
- prefetch multiplier 1: a waiting message sits in Redis, where any free worker can take it,
  rather than behind a busy one. A warm shutdown (SIGTERM) finishes running reconciles and hands
  prefetched messages back at once (kombu restores a closing channel's unacked messages).
- no result backend: nothing reads results; replay works from the failing list (kind, key).
- task events on for Flower, published in batches at most half a second after the first waits
  (a one-shot timer: an idle worker does not wake for them; mcm_tasks/task_events.py);
  kombu's keys live under ``<key_prefix>:broker:``.
- the pool is ``--worker-pool``: ``threads`` by default (one process per worker pod: a prefork
  pod held a main process and a child per slot, each a whole interpreter, ~45-55 MB PSS apiece; a
  SIGKILLed pod's messages come back through the sweep whatever its pool); on ``threads`` and
  ``solo``, where Celery enforces no time limit, a watchdog does (mcm_tasks/timelimits.py).
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery
from celery.signals import (
    after_setup_logger,
    after_setup_task_logger,
    heartbeat_sent,
    task_postrun,
    task_prerun,
    worker_init,
    worker_ready,
    worker_shutdown,
)
from kombu import Queue

from mcm_tasks.broker import register_transport
from mcm_tasks.kinds import QUEUES
from mcm_tasks.memory import Trimmer
from mcm_tasks.queue.messages import PRIORITY_STEPS, TASK_PREFIX, broker_prefix, task_name
from mcm_tasks.redisdb import broker_options
from mcm_tasks.seed_queues import SeedQueues
from mcm_tasks.settings import Settings, get_settings
from mcm_tasks.task_events import BatchedTaskEvents
from mcm_tasks.timelimits import ENFORCED_BY_CELERY, Watchdog


def celery_config(settings: Settings) -> dict[str, Any]:
    queues = [settings.queue_name(kind) for kind in QUEUES]
    ttl = settings.reconcile_lock_ttl
    broker = broker_options(settings)  # the URL, Sentinel and TLS: mcm_tasks.redisdb
    return {
        "broker_url": broker["broker_url"],
        "broker_use_ssl": broker["broker_use_ssl"],
        "broker_connection_retry_on_startup": True,
        "broker_connection_max_retries": None,
        "broker_transport_options": {
            "visibility_timeout": settings.visibility_timeout,
            "global_keyprefix": broker_prefix(settings),
            # kombu's restore of messages unacknowledged for visibility_timeout, the backstop of
            # the keeper's sweep: each worker's run costs a mutex and a read; a minute late on an
            # hour's timeout (10 s: every idle worker's Redis commands at rest)
            "unacked_restore_interval": max(1.0, min(60.0, settings.visibility_timeout / 10)),
            "unacked_restore_throttle": 1,
            # user-facing and background (a resync's) messages: messages.PRIORITY_STEPS
            "priority_steps": PRIORITY_STEPS,
            **broker["transport_options"],
        },
        "task_serializer": "json",
        "result_serializer": "json",
        "event_serializer": "json",
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        "result_backend": None,
        "task_ignore_result": True,
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_acks_on_failure": True,
        "task_acks_on_timeout": False,
        "task_soft_time_limit": ttl * 0.8,
        "task_time_limit": ttl * 0.95,
        "task_queues": [Queue(name, routing_key=name) for name in queues],
        "task_default_queue": f"{settings.key_prefix}.default",
        "task_routes": {task_name(kind): {"queue": settings.queue_name(kind)} for kind in QUEUES},
        "worker_prefetch_multiplier": 1,
        "worker_pool": settings.worker_pool,
        "worker_concurrency": settings.worker_concurrency,
        "worker_send_task_events": True,
        "task_send_sent_event": True,
        # running reconciles finish on a broker blip; the contract tolerates the redelivery
        "worker_cancel_long_running_tasks_on_connection_loss": False,
    }


#: ``redis://`` URLs use our transport (mcm_tasks/broker.py) in every process that loads this app;
#: the URL keeps its scheme, so Flower recognises the broker and reads the queue lengths
register_transport()
app = Celery("mcm_tasks", include=["mcm_tasks.tasks"])
app.conf.update(celery_config(get_settings()))
app.steps["consumer"].add(BatchedTaskEvents)
app.steps["consumer"].add(SeedQueues)


def apply_settings(settings: Settings) -> None:
    """After ``configure()`` (CLI flags): rebuild the broker and queue options from the new settings."""
    app.conf.update(celery_config(settings))


@worker_init.connect
def _load_reconcilers(**_: Any) -> None:
    """Import the reconcilers in the main process before the pool forks, so start-up fails fast on
    a bad module and every pool process has them."""
    from mcm_tasks.queue.registry import load_reconciler_modules

    load_reconciler_modules()


@after_setup_logger.connect
@after_setup_task_logger.connect
def _log_kind_and_key(logger: Any, **_: Any) -> None:
    """Celery's handlers (main and pool processes) name the reconcile's kind and key, in the
    ``log_format`` of the settings."""
    from mcm_tasks.logs import install

    install(logger, get_settings().log_format)


_keeper: Any = None
_watchdog: Watchdog | None = None
#: gives the heap a burst of reconciles left behind back to the system (mcm_tasks/memory.py)
_trimmer: Trimmer | None = None


@worker_ready.connect
def _start_keeper(sender: Any = None, **_: Any) -> None:
    """The keeper runs in the main process (it renews the messages the consumer holds); started
    once the pool has forked, so no pool process inherits the thread. On a pool whose time limits
    Celery does not enforce (threads, solo), the watchdog (mcm_tasks/timelimits.py) does."""
    global _keeper, _watchdog, _trimmer
    from mcm_tasks.queue.keeper import Keeper

    name = str(getattr(sender, "hostname", "") or f"worker-{os.getpid()}")
    _keeper = Keeper(name, get_settings())
    _keeper.start()
    if _trimmer is None:
        _trimmer = Trimmer().start()
    pool = type(getattr(sender, "pool", None)).__module__.rsplit(".", 1)[-1]
    if pool not in ENFORCED_BY_CELERY and _watchdog is None:
        _watchdog = Watchdog(app.conf.task_soft_time_limit, app.conf.task_time_limit)
        _watchdog.start()


@worker_shutdown.connect
def _stop_keeper(**_: Any) -> None:
    if _keeper is not None:
        _keeper.stop()
    if _watchdog is not None:
        _watchdog.stop()
    if _trimmer is not None:
        _trimmer.stop()


@heartbeat_sent.connect
def _consumer_progress(**_: Any) -> None:
    """The consumer's event loop turned (an event heartbeat every ``--heartbeat-interval``, 10 s:
    ``worker_cli.event_heartbeat_interval``): /healthz."""
    from mcm_tasks.probes import PROGRESS

    PROGRESS.beat("consumer")


@task_prerun.connect
def _task_started(task: Any = None, args: Any = None, task_id: Any = None, **_: Any) -> None:
    """Every line of a reconcile task, Celery's own included, names its kind and key; the watchdog
    (if any) times the run. Called in the thread that runs the task."""
    name = str(getattr(task, "name", ""))
    if _watchdog is not None:
        _watchdog.started(name, str(task_id))
    if name.startswith(TASK_PREFIX) and isinstance(args, list | tuple) and len(args) == 1:
        from mcm_tasks.logs import enter

        key = str(args[0])[:200]
        settings = get_settings()
        if settings.seed_mode and "/" not in key:  # a Node's or a safety job's: name its namespace
            from mcm_tasks.tenancy import tenant_of_queue

            delivery = getattr(getattr(task, "request", None), "delivery_info", None) or {}
            tenant = tenant_of_queue(str(delivery.get("routing_key") or ""), settings.install_prefix)
            key = f"{key} ({tenant[0]})" if tenant else key
        enter(name[len(TASK_PREFIX) :], key)  # Celery's "succeeded" line: not in the tenant's context


@task_postrun.connect
def _task_finished(**_: Any) -> None:
    from mcm_tasks.logs import leave

    leave()
    if _watchdog is not None:
        _watchdog.finished()
    if _trimmer is not None:  # the main process's (threads, solo); a prefork child has none
        _trimmer.worked()
