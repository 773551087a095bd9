"""The watch lag the informer measures (``informers.processor.write_lag``) and the gauge it feeds."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from informers.processor import write_lag
from mcm_tasks.observability import informer_lag

NOW = datetime(2026, 11, 29, 1, 0, 10, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("managed", "lag"),
    [
        ([{"manager": "a", "time": "2026-11-29T01:00:07Z"}], 3.0),
        ([{"time": "2026-11-29T01:00:01Z"}, {"time": "2026-11-29T01:00:09Z"}], 1.0),  # the newest write
        ([{"time": "2026-11-29T01:00:20Z"}], 0.0),  # clocks a little apart: never negative
        ([{"manager": "a"}], None),
        ([{"time": "yesterday"}], None),
        ([], None),
    ],
)
def test_write_lag(managed: list[dict[str, str]], lag: float | None) -> None:
    assert write_lag({"metadata": {"managedFields": managed}}, NOW) == lag


@pytest.mark.parametrize(
    ("deletion", "lag"),
    [
        ("2026-11-29T01:00:08Z", 2.0),  # a DELETE leaves managedFields as they were: its mark counts
        ("2026-11-29T01:00:40Z", 0.0),  # a grace period ahead: fresh
        ("not a time", 3600.0),  # unreadable: the managed fields' time alone
    ],
)
def test_a_deletion_mark_is_a_write(deletion: str, lag: float) -> None:
    """A machine last updated an hour ago and deleted now has not lagged an hour (a scale-down used to
    read as one, and the controllers went to live lists for its whole length)."""
    meta = {"managedFields": [{"time": "2026-11-29T00:00:10Z"}], "deletionTimestamp": deletion}
    assert write_lag({"metadata": meta}, NOW) == lag


def test_the_gauge_reads_the_lag_hash() -> None:
    family = informer_lag({b"machines": b"3.250", b"machines:at": b"1.0", b"nodes": b"bad", "secrets": "0.5"})
    assert {s.labels["kind"]: s.value for s in family.samples} == {"machines": 3.25, "secrets": 0.5}
