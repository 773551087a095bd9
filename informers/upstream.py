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

from informers.leader import LeaderElector
from mcm_tasks import standby
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
        #: the standby this informer reported last (logged once per holder, not every retry)
        self.standing_by: Standby | None = None

    def attempt(self) -> tuple[LeaderElector, str] | None:
        """Take or renew every Lease; the first one not ours (and why), or None when all are."""
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
        try:
            while not leading.is_set():
                blocked = self.attempt()
                if blocked is not None:
                    self._stand_by(*blocked)
                    leading.wait(self.retry_period)
                    continue
                self._act(act, leading)
        finally:
            for elector in self.electors:
                elector.release()

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
