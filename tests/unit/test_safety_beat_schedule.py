"""The beat schedule of the safety jobs (``beat_schedule``) and the safety queue's job dispatch."""

from __future__ import annotations

from datetime import timedelta

import pytest

from beat_schedule import beat_schedule, job_of
from mcm_tasks.controllers.safety import register
from mcm_tasks.settings import load_settings


def test_one_entry_per_job_with_its_period_from_the_settings() -> None:
    settings = load_settings(
        {
            "machine_safety_orphan_vms_period": "7m",
            "machine_safety_apiserver_statuscheck_period": "45s",
            "machine_safety_apiserver_statuscheck_timeout": "10s",
            "machine_safety_overshooting_period": "1.5s",
            "key_prefix": "x",
        }
    )
    schedule = beat_schedule(settings)
    assert {name: (e["schedule"], e["args"]) for name, e in schedule.items()} == {
        "safety-orphan-vms": (timedelta(minutes=7), ("orphan-vms",)),
        "safety-apiserver": (timedelta(seconds=45), ("apiserver",)),
        # which judges the drain rules too (mcm-tasks's own job has no entry of its own)
        "safety-overshooting": (timedelta(seconds=1.5), ("overshooting",)),
    }
    for entry in schedule.values():
        assert entry["task"] == "mcm.reconcile.safety"
        assert entry["options"] == {"queue": "x.safety"}


def test_mcm_defaults() -> None:
    """MCM's periods: the API-server check's equals the overshooting check's, so it rides on that
    job (``apiserver_rides``) and has no entry: one task per minute instead of two."""
    periods = {name: e["schedule"] for name, e in beat_schedule(load_settings()).items()}
    assert periods == {
        "safety-orphan-vms": timedelta(minutes=15),
        "safety-overshooting": timedelta(minutes=1),
    }


def test_the_apiserver_check_has_its_own_entry_when_its_period_differs_or_overshooting_is_off() -> None:
    differs = load_settings({"machine_safety_apiserver_statuscheck_period": "2m"})
    assert beat_schedule(differs)["safety-apiserver"]["schedule"] == timedelta(minutes=2)
    off = load_settings({"machine_safety_overshooting_period": "0s"})
    assert beat_schedule(off)["safety-apiserver"]["schedule"] == timedelta(minutes=1)


def test_a_zero_period_turns_a_job_off() -> None:
    settings = load_settings({"machine_safety_overshooting_period": "0s"})
    assert "safety-overshooting" not in beat_schedule(settings)


@pytest.mark.parametrize(
    ("task", "args", "job"),
    [
        ("mcm.reconcile.safety", ("orphan-vms",), ("safety", "orphan-vms")),
        ("mcm.reconcile.machine", ["ns/m"], ("machine", "ns/m")),
        ("mcm.reconcile.nonsense", ("k",), None),
        ("celery.backend_cleanup", (), None),
        ("mcm.reconcile.safety", (), None),
        ("mcm.reconcile.safety", ("a", "b"), None),
        ("mcm.reconcile.safety", (3,), None),
        ("mcm.reconcile.safety", None, None),
    ],
)
def test_job_of_an_entry(task: str, args: tuple[object, ...] | None, job: tuple[str, str] | None) -> None:
    assert job_of(task, args) == job


def test_every_scheduled_key_has_a_job_and_unknown_keys_are_dropped() -> None:
    for entry in beat_schedule(load_settings()).values():
        assert entry["args"][0] in register.JOBS
    assert register.reconcile_safety("no-such-job") is None
