"""The Celery configuration's fixed cost at rest (issue 19)."""

from __future__ import annotations

from mcm_tasks.celery_app import celery_config
from mcm_tasks.settings import Settings


def test_kombus_unacked_restore_runs_once_a_minute_behind_an_hours_visibility_timeout() -> None:
    """Every worker ran kombu's restore (a mutex and a read) every 10 s, though it only backs up
    the keeper's sweep after the visibility timeout; a compressed timeout still restores in time."""
    options = celery_config(Settings())["broker_transport_options"]
    assert options["unacked_restore_interval"] == 60
    assert options["unacked_restore_throttle"] == 1, "every timer run scans: the interval is the period"
    short = celery_config(Settings(visibility_timeout=20, worker_lost_timeout=5))["broker_transport_options"]
    assert short["unacked_restore_interval"] == 2
