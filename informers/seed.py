"""Seed mode's informer: one ``Informer`` per served namespace, each in its tenant's context.

Every ``--seed-refresh-period`` the seed informer resolves the namespaces to serve
(``tenancy_io.wanted``; with a selector, listed again only when a watch on them saw a change, or
every minute: ``namespace_watch``), narrows them to those this process owns (``own``: all of them while it
leads, or its shard's), publishes the served set in the registry the workers follow, and starts or
stops the namespaces' informers: a namespace added is watched within a period, a namespace removed
has its watches closed. A namespace's informer is the single-namespace informer itself, run on a
thread under the tenant's settings (its mirror, queues and budgets are the tenant's:
``mcm_tasks.tenancy``) with clients built from the namespace's Secrets. A namespace whose Secrets
are missing or refused, or whose informer died, is tried again every period; its problem is in the
registry (``mcm-tasks admin seed``), and no other namespace waits for it. When the namespace's
Secrets change (a rotated token, another API server) its informer restarts on the new clients.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from informers.namespace_watch import RELIST_EVERY, NamespaceWatch
from informers.runner import Informer
from informers.sink import make_sink
from mcm_tasks import tenancy_io
from mcm_tasks.kube.clients import Clusters, forget_tenant, get_clusters, tenant_versions
from mcm_tasks.kube.target_secret import TargetSecretError
from mcm_tasks.memory import Trimmer
from mcm_tasks.settings import Settings
from mcm_tasks.tenancy import serving

log = logging.getLogger(__name__)

#: how long a stopping namespace's informer is given to close its watches
STOP_TIMEOUT = 5.0
#: a namespace's informer's idle timers run this much slower than a single-namespace informer's
#: (``Informer.pace``): a sentinel check every 20 s, a status every 10 s when it has news (its TTL
#: is 60 s), and the writer wakes only for those (``Informer.woken``: ``_stop`` wakes it). At 5
#: the fifty writer threads of a seed still woke 20 times a second at rest, and their status
#: writes and sentinel checks were a third of the informer's idle CPU. Events are
#: written as they come whatever the pace; a lost mirror is found, and a Node's bare heartbeat (a
#: lazy change) written, up to 20 s late.
IDLE_PACE = 10.0
#: the registry is written when it changed, and every this many rounds anyway (another replica's
#: write, or a lost Redis, is mended within that)
REPUBLISH_EVERY = 15


@dataclass
class Tenant:
    namespace: str
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    clusters: Clusters | None = None
    #: the namespace's informer, once its thread built it (``_stop`` wakes its writer)
    runner: Informer | None = None
    problem: str = ""
    entry: dict[str, Any] = field(default_factory=tenancy_io.since_now)


def everything(namespaces: set[str]) -> set[str]:
    """The leader's share: every namespace."""
    return namespaces


class SeedInformer:
    """The informers of the namespaces this process owns."""

    def __init__(
        self,
        settings: Settings,
        control: ApiClient,
        client: redis.Redis,
        sink: str = "queue",
        identity: str = "",
        own: Callable[[set[str]], set[str]] = everything,
    ) -> None:
        self.settings = settings
        self.control = control
        self.redis = client
        self.sink = sink
        self.identity = identity
        self.own = own
        self.tenants: dict[str, Tenant] = {}
        self.trimmer = Trimmer()
        #: the registry as this replica last wrote it, and the rounds run (see REPUBLISH_EVERY)
        self._published: tuple[dict[str, dict[str, Any]], frozenset[str]] | None = None
        self.rounds = 0
        self._seen: dict[str, dict[str, Any]] = {}
        #: with a selector, the namespaces are listed when the watch saw a change (or every
        #: RELIST_EVERY), not every round; None: every round (no watch running, or a static list)
        self.watch: NamespaceWatch | None = None
        self.lists = 0
        self._wanted: set[str] | None = None
        self._listed_at = 0.0

    def lead(self, stop: threading.Event) -> None:
        """Serve until ``stop``; every namespace's informer is stopped on the way out."""
        self.trimmer.start()
        if not self.settings.namespace_list:
            self.watch = NamespaceWatch(self.control, self.settings).start()
        try:
            while True:
                self.refresh()
                if stop.wait(self.settings.seed_refresh_period):
                    break
        finally:
            if self.watch is not None:
                self.watch.stop()
                self.watch = None
            for namespace in list(self.tenants):
                self._stop(namespace)
            self.trimmer.stop()

    def _list(self) -> set[str]:
        """The namespaces to serve: listed again when the watch saw a change, when none runs, and
        every RELIST_EVERY; else as last listed."""
        now = time.monotonic()
        watch = self.watch
        if (
            watch is None
            or watch.stale.is_set()
            or self._wanted is None
            or now - self._listed_at >= RELIST_EVERY
        ):
            if watch is not None:
                watch.stale.clear()  # before the LIST: a change during it lists again next round
            try:
                self._wanted = set(tenancy_io.wanted(self.control, self.settings))
            except Exception:
                if watch is not None:
                    watch.stale.set()
                raise
            self._listed_at = now
            self.lists += 1
        return set(self._wanted)

    def refresh(self) -> None:
        """One round: resolve, narrow, publish, start and stop."""
        try:
            wanted = self._list()
        except (ApiException, OSError) as err:  # the control cluster blinked: keep what runs
            log.warning("seed mode: namespaces not listed, keeping %d: %s", len(self.tenants), err)
            return
        owned = self.own(wanted)  # any namespace no longer owned is stopped before the next call
        for namespace in sorted(set(self.tenants) - owned):
            self._stop(namespace)
        for namespace in sorted(owned):
            tenant = self.tenants.get(namespace)
            if tenant is None or tenant.thread is None or not tenant.thread.is_alive():
                self._start(namespace, tenant)
            elif self._rotated(tenant):
                log.info("namespace %s: target Secrets changed, restarting its informer", namespace)
                self._stop(namespace)
                self._start(namespace, None)
        self.rounds += 1
        entries = {ns: self._entry(ns) for ns in sorted(wanted)}
        written = (entries, frozenset(owned))
        if written == self._published and self.rounds % REPUBLISH_EVERY:
            return  # nothing changed: the registry is what this replica wrote last
        try:
            tenancy_io.publish(self.redis, self.settings, entries, owned)
            self._published = written
        except redis.RedisError as err:
            log.warning("seed mode: registry not written: %s", err)

    def _entry(self, namespace: str) -> dict[str, Any]:
        tenant = self.tenants.get(namespace)
        if tenant is None:  # another replica's: as first seen here (its owner writes its own)
            return self._seen.setdefault(namespace, tenancy_io.since_now())
        if tenant.problem:
            return {**tenant.entry, "problem": tenant.problem}
        versions = tenant_versions(namespace)  # the workers follow them (clients.note_published_versions)
        return {**tenant.entry, "versions": list(versions)} if versions is not None else dict(tenant.entry)

    def _rotated(self, tenant: Tenant) -> bool:
        """Whether the namespace's clients were rebuilt (its Secrets changed) since its informer started."""
        try:
            with serving(tenant.namespace, self.settings):
                return get_clusters() is not tenant.clusters
        except (TargetSecretError, ApiException, OSError):
            return False  # the running informer keeps its clients until the Secrets read again

    def _start(self, namespace: str, previous: Tenant | None) -> None:
        tenant = Tenant(namespace)
        if previous is not None:
            tenant.entry = previous.entry
        self.tenants[namespace] = tenant
        try:
            with serving(namespace, self.settings):
                tenant.clusters = get_clusters()
        except (TargetSecretError, ApiException, OSError) as err:
            problem = str(err) if isinstance(err, TargetSecretError) else f"target Secrets not read: {err}"
            if problem != (previous.problem if previous is not None else ""):
                log.warning("namespace %s: not served: %s", namespace, problem)
            tenant.problem = problem[:500]
            return
        tenant.thread = threading.Thread(
            target=self._run, args=(tenant,), name=f"informer-{namespace}"[:60], daemon=True
        )
        tenant.thread.start()
        log.info("namespace %s: informer started", namespace)

    def _run(self, tenant: Tenant) -> None:
        clusters = tenant.clusters
        assert clusters is not None
        with serving(tenant.namespace, self.settings) as view:
            apis = {"control": clusters.control.api}
            if clusters.target is not None:
                apis["target"] = clusters.target.api
            runner = Informer(
                view,
                apis,
                self.redis,
                make_sink(self.sink, self.redis),
                f"{self.identity}/{tenant.namespace}",
                trimmer=self.trimmer,
                pace=IDLE_PACE,
                woken=True,  # ``_stop`` wakes it
            )
            tenant.runner = runner
            if tenant.stop.is_set():  # stopped while it was being built
                return
            try:
                runner.lead(tenant.stop)
            except Exception as err:  # one namespace's failure is its own: tried again next round
                log.exception("namespace %s: informer stopped", tenant.namespace)
                tenant.problem = f"informer stopped: {type(err).__name__}: {err}"[:500]

    def _stop(self, namespace: str) -> None:
        tenant = self.tenants.pop(namespace, None)
        if tenant is None:
            return
        tenant.stop.set()
        if tenant.runner is not None:
            tenant.runner.wake()  # its writer sleeps until its next timer (``Informer.woken``)
        if tenant.thread is not None:
            tenant.thread.join(STOP_TIMEOUT)
            log.info("namespace %s: informer stopped", namespace)
        forget_tenant(namespace)
