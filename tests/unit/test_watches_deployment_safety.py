"""The MachineDeployment and safety watch declarations that informers/routing.py composes."""

from __future__ import annotations

import pytest

from mcm_tasks.controllers.machinedeployment.watches import (
    in_place_wakes_machine_deployment,
    waits_for_machines_gone,
)
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


def _in_place(reason: str | None, owner: str = "old", moving: bool = False) -> dict:
    conditions = [] if reason is None else [{"type": "InPlaceUpdate", "status": "True", "reason": reason}]
    labels = {"node.machine.sapcloud.io/update-result": "successful"} if moving else {}
    refs = [{"kind": "MachineSet", "name": owner, "uid": f"uid-{owner}", "controller": True}]
    return {"metadata": {"labels": labels, "ownerReferences": refs}, "status": {"conditions": conditions}}


@pytest.mark.parametrize(
    ("old", "new", "wakes"),
    [
        pytest.param(_in_place(None), _in_place(None), False, id="not enqueue when no conditions are set"),
        pytest.param(_in_place(None), _in_place("UpdateFailed"), False,
                     id="not enqueue when condition reason is not UpdateSuccessful"),
        pytest.param(_in_place(None), _in_place("UpdateSuccessful"), True,
                     id="enqueue when condition reason is UpdateSuccessful"),
        pytest.param(_in_place("ReadyForUpdate"), _in_place("UpdateSuccessful"), True,
                     id="should enqueue when condition reason is changed to UpdateSuccessful"),
        pytest.param(_in_place("UpdateSuccessful"), _in_place("UpdateSuccessful"), False,
                     id="ours: already UpdateSuccessful, no news"),
        pytest.param(_in_place("UpdateSuccessful"), _in_place("UpdateSuccessful", "new", moving=True), True,
                     id="ours: the move to the new set, to be counted in its replicas"),
        pytest.param(_in_place("UpdateSuccessful", "new", moving=True), _in_place("UpdateSuccessful", "new"),
                     False, id="ours: the in-transfer mark cleared, nothing left to do"),
    ],
)  # fmt: skip
def test_update_machine_to_machine_deployment(old: dict, new: dict, wakes: bool) -> None:
    """Upstream's #updateMachineToMachineDeployment table, and the move it leads to."""
    assert in_place_wakes_machine_deployment(old, new) is wakes
