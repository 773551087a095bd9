"""How a controller puts its reconcilers on their queues: ``register`` adds the reconciler to the queue
contract and, once per process, the pass scope every reconcile runs in, so no reconciler has to
remember it.

The pass scope is the mirror's one read of its sync state per pass
(``CacheReader.remembering_synced``): asked before every read, it was a noticeable share of task time.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

from mcm_tasks.cache import get_reader
from mcm_tasks.kinds import Queue
from mcm_tasks.queue.registry import Reconciler, register_pass_scope, register_reconciler


def mirror_pass() -> AbstractContextManager[None]:
    return get_reader().remembering_synced()


def register(queue: Queue, reconciler: Reconciler) -> Reconciler:
    register_pass_scope(mirror_pass)
    return register_reconciler(queue, reconciler)
