"""Seed mode's tenants: one installation serving many namespaces of the control cluster, each with
its own target cluster (``--namespaces`` / ``--namespace-selector``, issue 33).

A tenant is a served namespace. Its work runs under a settings view of its own (``serving``): the
namespace, and a key prefix of its own, ``<prefix>:ns:<namespace>``. Every Redis key a pass builds
(the mirror, the queue contract, permits, expectations, the API budgets' buckets) and every Celery
queue (``<prefix>:ns:<namespace>.<kind>``) is therefore the tenant's, while the broker's keys, the
keepers' heartbeats and wake channel and the registry of tenants stay the installation's
(``Settings.install_prefix``). Code below the entry points never asks which tenant it serves:
``get_settings()`` and ``get_clusters()`` answer for the tenant in whose context they run, as a Go
MCM per shoot would answer for its own flags. The entry points that set the context: the task shell
(from the queue a message came on), the keeper and beat (for each served namespace), the informer
(one informer per owned namespace, ``informers/seed.py``).

Why per-tenant Celery queues: kombu's Redis transport takes from the queues it consumes in turn
(a rotating cycle), so a namespace with 1000 waiting keys and a namespace with one are served
alternately: round-robin fair dispatch between namespaces without a dispatcher of our own.

This module decides (names, views, parsing); ``tenancy_io`` reads and writes the registry.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from mcm_tasks import settings as settings_module
from mcm_tasks.kinds import QUEUES
from mcm_tasks.settings import Settings

T = TypeVar("T")

#: the part between the installation's prefix and the namespace in a tenant's key prefix
TENANT_PART = "ns"


def tenant_prefix(install_prefix: str, namespace: str) -> str:
    return f"{install_prefix}:{TENANT_PART}:{namespace}"


_views: dict[str, tuple[Settings, Settings]] = {}
_views_lock = threading.Lock()


def tenant_settings(base: Settings, namespace: str) -> Settings:
    """The tenant's view of the installation's settings: its namespace and key prefix, and no seed
    flags (below the entry a tenant is served exactly as a single-namespace installation). Views
    are kept per namespace, so caches keyed by the settings object (compiled scripts) stay warm."""
    found = _views.get(namespace)
    if found is not None and found[0] is base:
        return found[1]
    view = base.model_copy(
        update={
            "namespace": namespace,
            "key_prefix": tenant_prefix(base.install_prefix, namespace),
            "namespaces": "",
            "namespace_selector": "",
        }
    )
    view._install_prefix = base.install_prefix
    with _views_lock:
        _views[namespace] = (base, view)
    return view


def is_tenant(settings: Settings) -> bool:
    return settings.key_prefix != settings.install_prefix


def process_settings() -> Settings:
    """The installation's settings, whatever tenant the caller serves."""
    token = settings_module.SCOPED.set(None)
    try:
        return settings_module.get_settings()
    finally:
        settings_module.SCOPED.reset(token)


def current_namespace() -> str | None:
    """The tenant whose work runs here, None outside seed mode's tenants."""
    scoped = settings_module.SCOPED.get()
    return scoped.namespace if scoped is not None and is_tenant(scoped) else None


@contextmanager
def serving(namespace: str, base: Settings | None = None) -> Iterator[Settings]:
    """Run the block as the tenant ``namespace``'s work (``get_settings()`` answers its view)."""
    view = tenant_settings(base or process_settings(), namespace)
    token = settings_module.SCOPED.set(view)
    try:
        yield view
    finally:
        settings_module.SCOPED.reset(token)


def tenant_of_queue(queue: str, install_prefix: str) -> tuple[str, str] | None:
    """(namespace, kind) of a tenant's Celery queue name, None for any other name."""
    head = f"{install_prefix}:{TENANT_PART}:"
    if not queue.startswith(head):
        return None
    namespace, dot, kind = queue[len(head) :].rpartition(".")
    if not dot or not namespace or kind not in QUEUES or ":" in namespace:
        return None
    return namespace, kind


def queue_names(base: Settings, namespaces: list[str], kinds: list[str]) -> list[str]:
    """The Celery queues of these tenants for these kinds."""
    return [tenant_settings(base, ns).queue_name(kind) for ns in namespaces for kind in kinds]


def carried(target: Callable[..., T]) -> Callable[..., T]:
    """``target`` to run in another thread within the caller's context (its tenant): a new thread
    starts in an empty context, so a tenant's informer threads are started through this."""
    context = contextvars.copy_context()

    def run(*args: Any, **kwargs: Any) -> T:
        return context.run(target, *args, **kwargs)

    return run
