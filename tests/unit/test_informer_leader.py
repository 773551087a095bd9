"""Lease decisions of the informer's leader election: when a candidate may take the lease, and what it
writes when it does."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from informers.leader import Observation, may_take, micro_time, next_spec, observe


def seen(holder: str, changed_at: float, duration: float = 15.0) -> Observation:
    return Observation((holder,), holder, duration, changed_at)


@pytest.mark.parametrize(
    ("observed", "now", "expected"),
    [
        (None, 100.0, True),  # no lease yet
        (seen("", 0.0), 1.0, True),  # released
        (seen("me", 99.0), 100.0, True),  # our own: renew
        (seen("other", 90.0), 100.0, False),  # renewed 10 s ago, lease 15 s
        (seen("other", 85.0), 100.0, True),  # unchanged for a whole lease duration
        (seen("other", 99.0, duration=1.0), 100.0, True),
    ],
)
def test_may_take(observed: Observation | None, now: float, expected: bool) -> None:
    assert may_take(observed, "me", now) is expected


def test_expiry_is_measured_from_when_this_candidate_saw_the_record_change() -> None:
    spec = {"holderIdentity": "other", "leaseDurationSeconds": 15, "renewTime": "2020-01-01T00:00:00.000000Z"}
    first = observe(None, spec, now=10.0, default_duration=5.0)
    assert (first.holder, first.duration, first.changed_at) == ("other", 15.0, 10.0)
    # the holder's clock says 2020: irrelevant, only the change counts
    assert observe(first, dict(spec), now=20.0, default_duration=5.0) is first
    renewed = observe(
        first, {**spec, "renewTime": "2020-01-01T00:00:02.000000Z"}, now=21.0, default_duration=5.0
    )
    assert renewed.changed_at == 21.0


def test_renewal_keeps_acquire_time_and_takeover_counts_a_transition() -> None:
    now = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    held = {"holderIdentity": "me", "acquireTime": "2026-01-01T00:00:00.000000Z", "leaseTransitions": 3}
    renewed = next_spec(held, "me", 15.0, now)
    assert renewed["acquireTime"] == "2026-01-01T00:00:00.000000Z"
    assert renewed["renewTime"] == "2026-01-02T03:04:05.678901Z"
    assert renewed["leaseTransitions"] == 3
    taken = next_spec({**held, "holderIdentity": "other"}, "me", 2.4, now)
    assert (taken["holderIdentity"], taken["acquireTime"], taken["leaseTransitions"]) == (
        "me",
        micro_time(now),
        4,
    )
    assert taken["leaseDurationSeconds"] == 2
