"""The MachineDeployment and safety watch declarations that informers/routing.py composes."""

from __future__ import annotations

import pytest

from mcm_tasks.controllers.machinedeployment.watches import waits_for_machines_gone
from mcm_tasks.controllers.safety import ORPHAN_VMS, OVERSHOOTING
from mcm_tasks.controllers.safety.watches import (
    jobs_on_machine_added,
    jobs_on_machine_deleted,
    jobs_on_machine_updated,
)


def _described(text: str) -> dict:
    return {"status": {"lastOperation": {"description": text}}}


@pytest.mark.parametrize(
    ("deployment", "waits"),
    [
        ({"spec": {"strategy": {"type": "Recreate"}}}, True),
        ({"spec": {"strategy": {"type": "RollingUpdate"}}}, False),
        ({"spec": {"strategy": "Recreate"}}, False),
        ({"spec": {}}, False),
        (None, False),
    ],
)
def test_only_a_recreate_deployment_waits_for_its_machines(deployment: dict | None, waits: bool) -> None:
    assert waits_for_machines_gone(deployment) is waits


@pytest.mark.parametrize(
    ("old", "new", "jobs"),
    [
        (_described("Creating"), _described("Cloud provider message - OutOfRange"), (ORPHAN_VMS,)),
        (_described("OutOfRange"), _described("still OutOfRange"), ()),
        (_described("Creating"), _described("Running"), ()),
        ({}, {}, ()),
    ],
)
def test_the_orphan_sweep_runs_when_out_of_range_is_first_reported(old: dict, new: dict, jobs: tuple) -> None:
    assert jobs_on_machine_updated(old, new) == jobs


def test_adds_check_overshooting_and_deletes_sweep_orphans() -> None:
    assert jobs_on_machine_added({}) == (OVERSHOOTING,)
    assert jobs_on_machine_deleted({}) == (ORPHAN_VMS,)
