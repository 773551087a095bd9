"""Standing by while upstream's MCM holds its Leases: a swap without two masters.

Upstream elects its leaders on the Leases ``machine-controller-manager`` (the manager) and
``machine-controller`` (the provider's machine controller) in ``--namespace``. During a rolling swap
of a Gardener seed, a Go MCM pod and ours run side by side; both acting would mean two controllers
on one set of machines. So our leading informer also holds upstream's two Leases
(``informers/upstream.py``), with upstream's lease timings, and while either is held by someone
else it stands by and writes the standby marker here. Every process of ours reads it: keepers
publish no delayed keys, beat fires no safety job, a message already queued is handed back to the
delayed set unrun (BEGIN reads the marker: ``queue.scripts``, ``queue.processing``), and
``mcm-tasks admin queues`` names the holder.

The marker lives in Redis with a TTL the standing-by informer renews every retry period: a
standby informer that dies stops holding the fleet back within ``MARKER_TTL`` (its successor, once
elected, finds the Lease still held and writes the marker again).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

import redis

from mcm_tasks.redisdb import rkey

#: upstream's Leases: cmd/machine-controller-manager (the manager) and pkg/util/provider/app (the
#: provider's machine-controller), both in --namespace
UPSTREAM_LEASES = ("machine-controller-manager", "machine-controller")
#: upstream's leader-election defaults (LeaseDuration 15 s, RenewDeadline 10 s, RetryPeriod 2 s),
#: kept for upstream's Leases whatever ours are set to, so that a Go MCM reads them as its own kind
UPSTREAM_LEASE_DURATION = 15.0
UPSTREAM_RENEW_DEADLINE = 10.0
UPSTREAM_RETRY_PERIOD = 2.0
#: the marker outlives a few missed renewals of the standing-by informer, not much more
MARKER_TTL = 30.0


@dataclass(frozen=True)
class Standby:
    """Why our processes stand by: a Lease (``namespace/name``) someone else holds."""

    lease: str
    holder: str
    since: float  # wall time this informer first saw it held by someone else
    reporter: str  # the informer that wrote the marker

    def describe(self) -> str:
        when = datetime.fromtimestamp(self.since, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        held = f"is held by {self.holder!r}" if self.holder else "could not be taken"
        return (
            f"standing by: Lease {self.lease} {held} since {when} (seen by {self.reporter}); no delayed key "
            "is published and no safety job runs until it is free"
        )


def marker_key() -> str:
    """``<prefix>:standby`` (the queue scripts know it as ``QueueKeys.standby``)."""
    return rkey("standby")


def mark(client: redis.Redis, standby: Standby) -> None:
    client.set(marker_key(), json.dumps(asdict(standby)), px=int(MARKER_TTL * 1000))


def clear(client: redis.Redis) -> None:
    client.delete(marker_key())


def read(client: redis.Redis) -> Standby | None:
    """The standby in force, or None (our processes act)."""
    raw = client.get(marker_key())
    if not raw:
        return None
    try:
        doc = json.loads(raw)
        lease, holder, since = str(doc["lease"]), str(doc["holder"]), float(doc["since"])
        return Standby(lease, holder, since, str(doc.get("reporter", "")))
    except (ValueError, KeyError, TypeError):
        return Standby("?", "", time.time(), "unreadable marker")
