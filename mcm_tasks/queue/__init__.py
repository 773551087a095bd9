"""The queue contract: client-go workqueue semantics over Celery and Redis, across processes and
pods. Design, Redis keys and why each property holds: README.md in this folder.

Producers (informers, event handlers, the admin CLI) call ``enqueue`` / ``enqueue_many`` /
``enqueue_after``; controllers register a reconciler per kind, ``key -> Requeue | None``, that
raises to report a failure.
"""

from mcm_tasks.queue.policy import Requeue
from mcm_tasks.queue.producer import enqueue, enqueue_after, enqueue_many
from mcm_tasks.queue.registry import Reconciler, get_reconciler, load_reconciler_modules, register_reconciler

__all__ = [
    "Reconciler",
    "Requeue",
    "enqueue",
    "enqueue_after",
    "enqueue_many",
    "get_reconciler",
    "load_reconciler_modules",
    "register_reconciler",
]
