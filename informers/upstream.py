"""Upstream's two Leases, held by our leading informer alongside its own (``mcm_tasks.standby``
says why).

The informer that holds ``mcm-tasks-informer`` campaigns for ``machine-controller-manager`` and
``machine-controller`` too, each with client-go's algorithm (``leader.LeaderElector``) and upstream's
timings. It mirrors and routes only while it holds both; while either is held by someone else (a
Go MCM not yet gone) it stands by and keeps the standby marker in Redis, which holds back every
other process of ours. Losing one of them while acting (someone else took it over, or renewals
failed for the renew deadline) stops the acting at once, as losing our own Lease does.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import redis
from kubernetes.client import ApiClient
from prometheus_client import Gauge

from informers.leader import LeaderElector, observe
from mcm_tasks import standby
from mcm_tasks.kube import rest
from mcm_tasks.standby import (
    UPSTREAM_LEASE_DURATION,
    UPSTREAM_LEASES,
    UPSTREAM_RENEW_DEADLINE,
    UPSTREAM_RETRY_PERIOD,
    Standby,
)

log = logging.getLogger(__name__)

STANDING_BY = Gauge(
    "mcm_upstream_lease_standby",
    "1 while the leading informer stands by because this upstream Lease is held by someone else "
    "(a Go MCM during a swap), else 0",
    ["lease"],
)


class UpstreamLeases:
    def __init__(
        self,
        api: ApiClient,
        namespace: str,
        identity: str,
        client: redis.Redis,
        names: tuple[str, ...] = UPSTREAM_LEASES,
        lease_duration: float = UPSTREAM_LEASE_DURATION,
        renew_deadline: float = UPSTREAM_RENEW_DEADLINE,
        retry_period: float = UPSTREAM_RETRY_PERIOD,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.namespace = namespace
        self.identity = identity
        self.client = client
        self.retry_period = retry_period
        self.renew_deadline = renew_deadline
        self.clock = clock
        self.electors = [
            LeaderElector(
                api, namespace, identity, lease_duration, renew_deadline, retry_period, name=n, clock=clock
            )
            for n in names
        ]
        self.renewed_at = dict.fromkeys(names, float("-inf"))
        #: the electors' state is shared by ``run`` and ``observe_all`` (another thread)
        self._lock = threading.Lock()
        self._running = False
        #: the standby this informer reported last (logged once per holder, not every retry)
        self.standing_by: Standby | None = None

    def observe_all(self) -> None:
        """Look at upstream's Leases without taking them (an informer that does not lead ours).

        Expiry is judged on this process's clock from the moment it first saw a record (client-go's
        rule, ``leader.may_take``): an informer that began watching only once it led ours would wait
        a whole upstream lease after our own failover. Watching while it waits for ours, a new
        leader finds a dead leader's upstream Leases expired as soon as it leads."""
        with self._lock:
            if self._running:
                return
            for elector in self.electors:
                try:
                    lease = rest.request(elector.api, "GET", elector.path)
                except Exception:  # not there yet, or unreachable: nothing to observe
                    continue
                spec = (lease or {}).get("spec") or {}
                elector.observed = observe(elector.observed, spec, self.clock(), elector.lease_duration)

    def observe_until(self, stop: threading.Event) -> None:
        """``observe_all`` every retry period until ``stop`` (a daemon thread of the informer)."""
        while not stop.wait(self.retry_period):
            self.observe_all()

    def attempt(self) -> tuple[LeaderElector, str] | None:
        """Take or renew every Lease; the first one not ours (and why), or None when all are."""
        with self._lock:
            return self._attempt()

    def _attempt(self) -> tuple[LeaderElector, str] | None:
        blocked: tuple[LeaderElector, str] | None = None
        for elector in self.electors:
            try:
                ours = elector.try_acquire_or_renew()
                why = "" if ours else (elector.observed.holder if elector.observed else "")
            except Exception as err:  # unreachable, forbidden: not ours, and say why
                ours, why = False, ""
                log.warning("Lease %s/%s: %s", self.namespace, elector.name, err)
            if ours:
                self.renewed_at[elector.name] = self.clock()
            elif blocked is None:
                blocked = (elector, why)
        return blocked

    def run(self, act: Callable[[threading.Event], None], leading: threading.Event) -> None:
        """While ``leading`` is clear: stand by until both Leases are ours, then ``act`` until one is
        lost; release them at the end."""
        with self._lock:
            self._running = True
        try:
            while not leading.is_set():
                blocked = self.attempt()
                if blocked is not None:
                    self._stand_by(*blocked)
                    leading.wait(self.retry_period)
                    continue
                self._act(act, leading)
        finally:
            with self._lock:
                for elector in self.electors:
                    elector.release()
                self._running = False

    def _act(self, act: Callable[[threading.Event], None], leading: threading.Event) -> None:
        for elector in self.electors:
            STANDING_BY.labels(elector.name).set(0)
        if self.standing_by is not None:
            log.info("upstream's Leases %s are ours now: acting", ", ".join(e.name for e in self.electors))
        self.standing_by = None
        try:
            standby.clear(self.client)
        except redis.RedisError as err:
            log.warning("could not clear the standby marker: %s", err)
        acting = threading.Event()
        renewer = threading.Thread(
            target=self._renew, args=(acting, leading), name="upstream-lease-renewer", daemon=True
        )
        renewer.start()
        try:
            act(acting)
        finally:
            acting.set()
            renewer.join()

    def _renew(self, acting: threading.Event, leading: threading.Event) -> None:
        while not acting.wait(self.retry_period):
            if leading.is_set():
                break
            blocked = self.attempt()
            if blocked is None:
                continue
            elector, holder = blocked
            if holder and holder != self.identity:
                log.warning("Lease %s/%s taken over by %s: standing by", self.namespace, elector.name, holder)
                self._stand_by(elector, holder)
                break
            if self.clock() - self.renewed_at[elector.name] >= self.renew_deadline:
                log.warning("Lease %s/%s not renewed for %.0fs: standing by", self.namespace, elector.name,
                            self.renew_deadline)  # fmt: skip
                break
        acting.set()

    def _stand_by(self, elector: LeaderElector, holder: str) -> None:
        for other in self.electors:
            STANDING_BY.labels(other.name).set(1 if other is elector else 0)
        lease = f"{self.namespace}/{elector.name}"
        previous = self.standing_by
        if previous is None or (previous.lease, previous.holder) != (lease, holder):
            self.standing_by = Standby(lease, holder, time.time(), self.identity)
            log.warning("%s", self.standing_by.describe())
        assert self.standing_by is not None
        try:
            standby.mark(self.client, self.standing_by)
        except redis.RedisError as err:
            log.warning("could not write the standby marker: %s", err)
