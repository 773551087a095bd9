"""Seed mode's registry of served namespaces (``tenancy`` decides the names).

The informer that resolves the namespaces (``--namespaces`` as given, ``--namespace-selector`` by
listing the control cluster's namespaces) publishes them in one Redis hash,
``<prefix>:seed:namespaces`` (namespace → JSON: since when, and the target cluster's source or the
problem reading it); workers, beat and the admin CLI read it. No credential is in it: each process
reads a tenant's target Secrets itself (``kube.clients``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Collection, Mapping
from typing import Any

import redis
from kubernetes.client import ApiClient

from mcm_tasks import kinds
from mcm_tasks.kube import ops
from mcm_tasks.settings import Settings

log = logging.getLogger(__name__)


def registry_key(settings: Settings) -> str:
    return f"{settings.install_prefix}:seed:namespaces"


def generation_key(settings: Settings) -> str:
    """A counter every ``publish`` moves on, in the same transaction as its writes."""
    return f"{registry_key(settings)}:generation"


def generation(client: redis.Redis, settings: Settings) -> str:
    """The registry's generation ('' when none is kept: a Redis that lost it, or a registry written
    before there was one). A reader that read the registry at this generation has what it would
    read again: the workers look at the registry every ``--seed-refresh-period``, and reading and
    parsing fifty entries each time was a third of a resting worker's own thread time."""
    raw = client.get(generation_key(settings))
    return "" if raw is None else raw.decode() if isinstance(raw, bytes) else str(raw)


def served(client: redis.Redis, settings: Settings, published: Mapping[str, Any] | None = None) -> list[str]:
    """The namespaces the installation serves now: ``--namespaces`` as given; with a selector, what
    the informer last published (``published``: the registry's ``entries`` already read)."""
    if settings.namespace_list:
        return settings.namespace_list
    names = client.hkeys(registry_key(settings)) if published is None else list(published)
    return sorted(n.decode() if isinstance(n, bytes) else str(n) for n in names)


def entries(client: redis.Redis, settings: Settings) -> dict[str, dict[str, Any]]:
    """The registry as published: namespace → its entry (``since``, ``target`` or ``problem``)."""
    found: dict[str, dict[str, Any]] = {}
    for name, raw in client.hgetall(registry_key(settings)).items():
        key = name.decode() if isinstance(name, bytes) else str(name)
        try:
            value = json.loads(raw)
        except ValueError:
            value = {}
        found[key] = value if isinstance(value, dict) else {}
    return found


class RegistryFollower:
    """The registry as a follower (a worker's seed-queues thread) last read it, read again only when
    its generation moved on (or none is kept)."""

    def __init__(self) -> None:
        self.generation: str | None = None
        self.entries: dict[str, dict[str, Any]] = {}
        #: times the registry itself was read
        self.reads = 0

    def read(self, client: redis.Redis, settings: Settings) -> dict[str, dict[str, Any]]:
        now = generation(client, settings)
        if now and now == self.generation:
            return self.entries
        self.entries, self.generation = entries(client, settings), now
        self.reads += 1
        return self.entries


def publish(
    client: redis.Redis,
    settings: Settings,
    namespaces: Mapping[str, Mapping[str, Any]],
    mine: Collection[str] | None = None,
) -> None:
    """Make the registry ``namespaces``: every namespace not in it is dropped; the entries of
    ``mine`` (the namespaces this informer runs; None: all) are written, the others' only added if
    missing (their owner writes them). One MULTI: readers never see it half written."""
    key = registry_key(settings)
    pipe = client.pipeline(transaction=True)
    gone = [k for k in client.hkeys(key) if (k.decode() if isinstance(k, bytes) else k) not in namespaces]
    if gone:
        pipe.hdel(key, *gone)
    for name, entry in namespaces.items():
        value = json.dumps(dict(entry))
        if mine is None or name in mine:
            pipe.hset(key, name, value)
        else:
            pipe.hsetnx(key, name, value)
    pipe.incr(generation_key(settings))
    pipe.execute()


def wanted(api: ApiClient, settings: Settings) -> list[str]:
    """The namespaces to serve now: ``--namespaces`` as given; else those matching
    ``--namespace-selector``, without the ones being deleted (their machines go with them)."""
    if settings.namespace_list:
        return settings.namespace_list
    listed = ops.list_(api, kinds.NAMESPACE.resource, label_selector=settings.namespace_selector)
    names = []
    for item in listed.get("items") or []:
        meta = item.get("metadata") or {}
        if meta.get("deletionTimestamp") or (item.get("status") or {}).get("phase") == "Terminating":
            continue
        if isinstance(meta.get("name"), str):
            names.append(meta["name"])
    return sorted(names)


def since_now() -> dict[str, Any]:
    return {"since": round(time.time(), 3)}
