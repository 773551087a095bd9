"""How a controller puts its reconcilers on their queues: ``register`` adds the reconciler to the queue
contract and, once per process, what every reconcile runs inside (``mirror_pass``), so no reconciler
has to remember it; ``scoped`` builds a controller's key reconciler from the read of its object and
its phases, handing the phases one ``PassScope`` (``controllers.common.scope``) per pass.

``mirror_pass`` is the mirror's one read of its sync state per pass, and one read of each object the
pass gets (``CacheReader.remembering_synced``): a pass's later reads of the same object (a machine's
Node, read by several steps) come from memory. ``register(..., reads=kind)`` has the queue contract's
BEGIN read the pass's first read ahead (``MirrorReadAhead``): the synced kinds and the pass's object
come with the round trip that starts the run.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from mcm_tasks.cache import get_reader
from mcm_tasks.controllers.common.readahead_io import MirrorReadAhead
from mcm_tasks.controllers.common.scope import PassScope
from mcm_tasks.kinds import Queue
from mcm_tasks.queue import Requeue
from mcm_tasks.queue.registry import (
    Reconciler,
    register_around_pass,
    register_read_ahead,
    register_reconciler,
)

T = TypeVar("T")
S = TypeVar("S", bound=PassScope[Any])


def mirror_pass() -> AbstractContextManager[None]:
    return get_reader().remembering_synced()


def register(queue: Queue, reconciler: Reconciler, *, reads: str | None = None) -> Reconciler:
    """``reads``: the mirror kind of the object a pass of ``queue`` is about (its key is the object's
    key), which the contract's BEGIN then reads ahead with the synced kinds (``MirrorReadAhead``)."""
    register_around_pass(mirror_pass)
    if reads is not None:
        register_read_ahead(queue, MirrorReadAhead(reads))
    return register_reconciler(queue, reconciler)


def scoped(
    read: Callable[[str], T | None],
    phases: Callable[[S], Requeue | None],
    scope: Callable[[str, T], S],
    *,
    gone: Callable[[str], None] | None = None,
) -> Callable[[str], Requeue | None]:
    """The key reconciler of a controller: ``read`` the key's object (None: it is gone, and ``gone``
    forgets what the controller kept about it), build the pass's ``scope`` around it, run the
    ``phases`` in it. Client-go's ``syncHandler(key)``, split the way Cluster API splits a reconciler
    into the scope it builds and the phases it runs."""

    @functools.wraps(phases)
    def reconcile(key: str) -> Requeue | None:
        obj = read(key)
        if obj is None:
            if gone is not None:
                gone(key)
            return None
        return phases(scope(key, obj))

    return reconcile
