"""Leader election through a ``coordination.k8s.io/v1`` Lease, client-go's algorithm in our words.

Two informer replicas run; the one holding the Lease mirrors and routes, the other waits. Expiry is
judged on the candidate's own monotonic clock: a lease is taken over when its record has not
changed for ``leaseDurationSeconds`` since this process last saw it change — never by comparing
the holder's wall-clock ``renewTime`` with ours, so clock skew between nodes cannot cause two
leaders. The leader renews every retry period; if it cannot renew for ``renew_deadline`` it stops
leading (its watches stop) before the lease can expire for the others.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from mcm_tasks import kinds
from mcm_tasks.kube import rest
from mcm_tasks.kube.errors import is_already_exists, is_conflict, is_not_found
from mcm_tasks.probes import PROGRESS

log = logging.getLogger(__name__)

LEASE_NAME = "mcm-tasks-informer"


def micro_time(now: datetime) -> str:
    """Kubernetes ``MicroTime``: RFC 3339 with microseconds, UTC."""
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class Observation:
    """The lease record as last seen, and when (monotonic) it was seen to change."""

    record: tuple[Any, ...]
    holder: str
    duration: float
    changed_at: float


def may_take(observed: Observation | None, me: str, now: float) -> bool:
    """Whether this candidate may write itself into the lease: it holds it already, nobody does,
    or the holder has not renewed for a whole lease duration as measured here."""
    if observed is None or not observed.holder or observed.holder == me:
        return True
    return now >= observed.changed_at + observed.duration


def observe(
    previous: Observation | None, spec: dict[str, Any], now: float, default_duration: float
) -> Observation:
    record = tuple(
        spec.get(f)
        for f in ("holderIdentity", "leaseDurationSeconds", "acquireTime", "renewTime", "leaseTransitions")
    )
    if previous is not None and previous.record == record:
        return previous
    return Observation(
        record,
        str(spec.get("holderIdentity") or ""),
        float(spec.get("leaseDurationSeconds") or default_duration),
        now,
    )


def next_spec(spec: dict[str, Any], me: str, duration: float, now: datetime) -> dict[str, Any]:
    """The spec that makes ``me`` the holder: a renewal keeps acquireTime, a takeover counts a transition."""
    renewing = spec.get("holderIdentity") == me
    return {
        **spec,
        "holderIdentity": me,
        "leaseDurationSeconds": max(1, round(duration)),
        "acquireTime": spec.get("acquireTime") if renewing and spec.get("acquireTime") else micro_time(now),
        "renewTime": micro_time(now),
        "leaseTransitions": int(spec.get("leaseTransitions") or 0) + (0 if renewing else 1),
    }


class LeaderElector:
    def __init__(
        self,
        api: ApiClient,
        namespace: str,
        identity: str,
        lease_duration: float,
        renew_deadline: float,
        retry_period: float,
        name: str = LEASE_NAME,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.identity = identity
        self.name = name
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.clock = clock
        self.observed: Observation | None = None
        #: the lease as this elector last wrote it (client-go's observed record), for the fast path
        self._last_written: dict[str, Any] | None = None
        self.path = kinds.LEASE.resource.path(namespace, name)

    def run(self, lead: Callable[[threading.Event], None], stop: threading.Event) -> None:
        """Campaign, lead while holding the lease, campaign again after losing it; until ``stop``.
        A stopped elector leaves the liveness registry: only a loop that still runs can be wedged."""
        try:
            while not stop.is_set():
                if not self._acquire(stop):
                    break
                log.info("%s became the leader (lease %s/%s)", self.identity, self.namespace, self.name)
                leading = threading.Event()
                renewer = threading.Thread(
                    target=self._renew, args=(leading, stop), name="lease-renewer", daemon=True
                )
                renewer.start()
                try:
                    lead(leading)
                finally:
                    leading.set()
                    renewer.join()
                log.info("%s stopped leading", self.identity)
            self.release()
        finally:
            PROGRESS.forget("elector")

    def try_acquire_or_renew(self) -> bool:
        now = self.clock()
        if self._renew_optimistically(now):
            return True
        try:
            lease = rest.request(self.api, "GET", self.path)
        except ApiException as err:
            if not is_not_found(err):
                raise
            return self._create()
        spec = lease.get("spec") or {}
        self.observed = observe(self.observed, spec, now, self.lease_duration)
        if not may_take(self.observed, self.identity, now):
            return False
        body = {**lease, "spec": next_spec(spec, self.identity, self.lease_duration, datetime.now(UTC))}
        try:
            written = rest.request(self.api, "PUT", self.path, body=body)
        except ApiException as err:
            if is_conflict(err):
                return False
            raise
        self._written(written)
        return True

    def _renew_optimistically(self, now: float) -> bool:
        """client-go's fast path (``tryAcquireOrRenew``, step 1): a leader whose lease is still
        valid as it last wrote it renews with one PUT of that object, without reading it first
        (the GET every retry period was half of an idle leader's API requests). Any failure
        (a Conflict: someone else wrote the lease) falls back to the read-then-write path."""
        last, observed = self._last_written, self.observed
        if last is None or observed is None or observed.holder != self.identity:
            return False
        if now >= observed.changed_at + observed.duration:
            return False
        spec = next_spec(last.get("spec") or {}, self.identity, self.lease_duration, datetime.now(UTC))
        try:
            written = rest.request(self.api, "PUT", self.path, body={**last, "spec": spec})
        except Exception as err:  # the slow path reads the lease and decides
            log.debug("lease %s/%s: optimistic renewal failed: %s", self.namespace, self.name, err)
            self._last_written = None
            return False
        self._written(written)
        return True

    def _written(self, written: dict[str, Any]) -> None:
        """The lease as this elector just wrote it: observed, and kept for the next renewal."""
        self._last_written = written
        self.observed = observe(None, written.get("spec") or {}, self.clock(), self.lease_duration)

    def release(self) -> None:
        """Give the lease up on a clean stop, so the standby need not wait for it to expire."""
        try:
            lease = rest.request(self.api, "GET", self.path)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return
            spec = {
                **spec,
                "holderIdentity": "",
                "leaseDurationSeconds": 1,
                "renewTime": micro_time(datetime.now(UTC)),
            }
            rest.request(self.api, "PUT", self.path, body={**lease, "spec": spec})
            self._last_written = None
        except Exception:  # best effort: the lease expires anyway
            log.debug("could not release the lease", exc_info=True)

    def _create(self) -> bool:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": next_spec({}, self.identity, self.lease_duration, datetime.now(UTC)),
        }
        try:
            written = rest.request(self.api, "POST", kinds.LEASE.resource.path(self.namespace), body=body)
        except ApiException as err:
            if is_already_exists(err) or is_conflict(err):
                return False
            raise
        self._written(written)
        return True

    def _attempt(self) -> bool:
        PROGRESS.beat("elector")  # campaigning or renewing, every retry period
        try:
            return self.try_acquire_or_renew()
        except Exception as err:  # the API server is unreachable: not acquired, not renewed
            log.warning("lease %s/%s: %s", self.namespace, self.name, err)
            return False

    def _acquire(self, stop: threading.Event) -> bool:
        while not stop.is_set():
            if self._attempt():
                return True
            stop.wait(self.retry_period)
        return False

    def _renew(self, leading: threading.Event, stop: threading.Event) -> None:
        """Renew every retry period; give up leading when renewals fail for ``renew_deadline``."""
        last_renewed = self.clock()
        while not leading.wait(self.retry_period):
            if stop.is_set():
                break
            if self._attempt():
                last_renewed = self.clock()
            elif self.observed is not None and self.observed.holder not in ("", self.identity):
                log.warning("%s lost the lease to %s: stepping down", self.identity, self.observed.holder)
                break
            elif self.clock() - last_renewed >= self.renew_deadline:
                log.warning(
                    "%s could not renew the lease for %.1fs: stepping down",
                    self.identity,
                    self.renew_deadline,
                )
                break
        leading.set()
