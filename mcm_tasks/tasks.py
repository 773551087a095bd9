"""The Celery tasks ``mcm.reconcile.<kind>``: thin shells that take the key (a string, nothing
else: arguments are visible in Flower) and hand it to the queue contract; in seed mode within the
tenant whose queue the message came on (``mcm_tasks.tenancy``)."""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from celery import Task

from mcm_tasks.celery_app import app
from mcm_tasks.kinds import QUEUES
from mcm_tasks.queue.messages import task_name
from mcm_tasks.queue.policy import SKIPPED, ReconcileFailed
from mcm_tasks.queue.processing import deliver
from mcm_tasks.queue.producer import MAX_KEY_LENGTH
from mcm_tasks.settings import get_settings
from mcm_tasks.tenancy import serving, tenant_of_queue

log = logging.getLogger(__name__)


def key_from_arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """The key, or None for anything else (dropped: retrying garbage would never succeed)."""
    if kwargs or len(args) != 1:
        return None
    key = args[0]
    if not isinstance(key, str) or not key or len(key) > MAX_KEY_LENGTH:
        return None
    return key


def _shell(kind: str) -> Task:
    # ``throws``: a failed reconcile is logged by the contract; Celery logs it without a traceback
    @app.task(name=task_name(kind), bind=True, typing=False, ignore_result=True, throws=(ReconcileFailed,))
    def reconcile(self: Task, *args: Any, **kwargs: Any) -> str:
        """Flower's result is the outcome in words (``done``, ``requeue in 15s``, ``skipped: key
        running elsewhere``); a failure raises ReconcileFailed after the contract recorded it."""
        key = key_from_arguments(args, kwargs)
        if key is None:
            log.error(
                "dropped %s message %s: expected one key string, got %d args %d kwargs",
                task_name(kind),
                self.request.id,
                len(args),
                len(kwargs),
            )
            return SKIPPED["invalid"]
        base = get_settings()
        scope: AbstractContextManager[object] = nullcontext()
        if base.seed_mode:
            queue = str((self.request.delivery_info or {}).get("routing_key") or "")
            tenant = tenant_of_queue(queue, base.install_prefix)
            if tenant is None or tenant[1] != kind:
                log.error("dropped %s message %s: queue %r is no served namespace's",
                          task_name(kind), self.request.id, queue[:200])  # fmt: skip
                return SKIPPED["invalid"]
            scope = serving(tenant[0], base)
        with scope:
            delivery = deliver(kind, key, str(self.request.id), worker=self.request.hostname)
        if delivery.error is not None:
            raise ReconcileFailed.of(*delivery.error)
        return delivery.describe()

    return reconcile


RECONCILE_TASKS: dict[str, Task] = {kind: _shell(kind) for kind in QUEUES}
