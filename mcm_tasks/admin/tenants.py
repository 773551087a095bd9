"""Seed mode in the admin CLI: which served namespace a command reads (issue 33).

In seed mode (``--namespaces`` / ``--namespace-selector``, as the processes get them) every
namespace keeps its own queues, mirror and history under its own key prefix
(``mcm_tasks.tenancy``). A command about one namespace's state runs under ``tenancy.serving`` of
that namespace: the one given with ``--namespace``, else the namespace of the key it is given
(``namespace/name``). A namespace that is not served is an error (exit 2), never a silent empty
answer read under a prefix nobody writes. The listing commands (``queues``, ``running``,
``delayed``, ``failing``, ``held``) without ``--namespace`` go through every served namespace.

In single-namespace mode nothing changes: the installation's state is read, as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pydantic import BaseModel

from mcm_tasks import tenancy, tenancy_io
from mcm_tasks.admin.keys import NotFound
from mcm_tasks.kube.clients import Clusters, build_clusters, get_clusters
from mcm_tasks.redisdb import get_redis
from mcm_tasks.settings import Settings, get_settings


class Served(BaseModel):
    """A served namespace and its registry entry (``admin seed``)."""

    namespace: str
    since: float | None
    problem: str
    entry: dict[str, Any]


def namespace_of(namespace: str, key: str = "") -> str:
    """The namespace a command is about: ``--namespace``, else its key's (``namespace/name``)."""
    if namespace:
        return namespace
    head, slash, _ = key.partition("/")
    return head if slash else ""


def check_served(namespace: str, served: list[str]) -> str:
    """``namespace`` when served; else NotFound, naming what to do."""
    if not namespace:
        hint = f" (served: {', '.join(served[:5])}{', …' if len(served) > 5 else ''})" if served else ""
        raise NotFound(f"seed mode: which namespace? give --namespace{hint}")
    if namespace not in served:
        raise NotFound(
            f"namespace {namespace!r} is not served by this installation (mcm-tasks admin seed lists them)"
        )
    return namespace


def served_now(settings: Settings | None = None) -> list[str]:
    settings = settings or tenancy.process_settings()
    return tenancy_io.served(get_redis(), settings)


@contextmanager
def tenant(namespace: str = "", key: str = "") -> Iterator[str | None]:
    """Run the block as the namespace's (seed mode; yields it) or as the installation (yields None)."""
    settings = tenancy.process_settings()
    if not settings.seed_mode:
        yield None
        return
    found = check_served(namespace_of(namespace, key), served_now(settings))
    with tenancy.serving(found, settings):
        yield found


def each_tenant(namespace: str = "") -> Iterator[str | None]:
    """For a listing: the installation once (None); in seed mode the given namespace, or every
    served one; the body of the loop runs under the namespace's settings."""
    settings = tenancy.process_settings()
    if not settings.seed_mode:
        yield None
        return
    served = served_now(settings)
    for found in [check_served(namespace, served)] if namespace else served:
        with tenancy.serving(found, settings):
            yield found


def seed_entries() -> list[Served]:
    """``admin seed``: the served namespaces with their registry entries."""
    settings = tenancy.process_settings()
    if not settings.seed_mode:
        raise NotFound(
            f"not in seed mode (no --namespaces or --namespace-selector): this installation serves "
            f"{settings.namespace!r} only"
        )
    client = get_redis()
    entries = tenancy_io.entries(client, settings)
    names = sorted(set(tenancy_io.served(client, settings)) | set(entries))
    out = []
    for name in names:
        entry = entries.get(name, {})
        since = entry.get("since")
        problem = str(entry.get("problem") or "")
        if name not in entries:
            problem = problem or "not published by an informer yet"
        out.append(Served(namespace=name, since=float(since) if isinstance(since, int | float) else None,
                          problem=problem, entry=entry))  # fmt: skip
    return out


@contextmanager
def clients() -> Iterator[Clusters]:
    """The clients a command reads the API servers with: a tenant's own (its target cluster from its
    namespace's Secrets, ``kube.clients.tenant_clusters``), else the installation's, closed after."""
    if tenancy.current_namespace() is not None:
        yield get_clusters()
        return
    made = build_clusters(get_settings())
    try:
        yield made
    finally:
        made.close()
