"""The machine controller's preservation step (``controllers/machine/preserve_io.py``
``manage_preservation``) against the sandbox API server as control and target cluster, one row per
case of upstream's ``#preserveMachine`` and ``#stopPreservationIfActive`` tables
(machine_util_test.go), named after them; the rows upstream's fake clients cannot have (a refused
eviction) are in the end-to-end test."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mcm_tasks import kinds
from mcm_tasks.api import Machine, format_time
from mcm_tasks.api.constants import (
    CA_SCALE_DOWN_DISABLED_ANNOTATION,
    CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION,
    NODE_LABEL_KEY,
    PRESERVE_ANNOTATION,
    PRESERVED_TAINT,
)
from mcm_tasks.controllers.machine.preserve_io import manage_preservation
from mcm_tasks.controllers.machine.scope import MachineScope
from mcm_tasks.kube import ops
from tests.integration.machine_support import Env

pytestmark = pytest.mark.integration

LATER = timedelta(hours=1)
PRESERVED_UNTIL = "Machine preserved until "
DRAINED = "Preserved node drained successfully. Machine preserved until "
NOT_DRAINED = "Preserved node could not be drained. Machine preserved until "
STOPPED = "Preservation stopped."
BY_USER, BY_MCM = "Preserved by user.", "Preserved by MCM."
CA = {CA_SCALE_DOWN_DISABLED_ANNOTATION: "true", CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION: "true"}


@dataclass(frozen=True)
class Case:
    """One row: the machine and its Node before, what they are after."""

    phase: str
    value: str = "now"
    #: None: the machine names no Node; "gone": it names one that does not exist
    node: str | None = "here"
    #: the expiry already written, relative to now (None: none)
    expiry: timedelta | None = None
    condition: dict[str, str] | None = None
    node_annotations: dict[str, str] = field(default_factory=dict)
    tainted: bool = False
    cordoned: bool = False
    # --- expected ---
    expiry_set: bool = True
    #: (status, reason, message prefix) of the Preserved condition afterwards; None: none
    then: tuple[str, str, str] | None = None
    then_tainted: bool = False
    then_protected: bool = False
    then_value: str | None = "now"


PRESERVE_CASES = {
    "when preserve=now and there is no backing node": Case("Running", node=None),
    "when preserve=now, the machine is Running, and there is a backing node": Case(
        "Running", then=("True", BY_USER, PRESERVED_UNTIL), then_protected=True
    ),
    "when preserve=now, machine was preserved while Running (NodePreserved=True set without drain), then "
    "transitions to Failed: drain and taint must be applied": Case(
        "Failed",
        expiry=LATER,
        condition={"status": "True", "reason": BY_USER, "message": "Machine preserved until then."},
        node_annotations=CA,
        then=("True", BY_USER, DRAINED),
        then_tainted=True,
        then_protected=True,
    ),
    "when preserve=now, the machine has Failed, and there is a backing node": Case(
        "Failed", then=("True", BY_USER, DRAINED), then_tainted=True, then_protected=True
    ),
    "when preserve=now, the machine has Failed, and the preservation is incomplete after step 1 - adding "
    "preserveExpiryTime": Case(
        "Failed", expiry=LATER, then=("True", BY_USER, DRAINED), then_tainted=True, then_protected=True
    ),
    "when preserve=now, the machine has Failed, and the preservation is incomplete at step 2 - adding CA "
    "annotations": Case(
        "Failed",
        expiry=LATER,
        node_annotations=CA,
        then=("True", BY_USER, DRAINED),
        then_tainted=True,
        then_protected=True,
    ),
    "when preserve=now, the machine has Failed, and the preservation is incomplete because of drain "
    "failure": Case(
        "Failed",
        expiry=LATER,
        condition={"status": "False", "reason": BY_USER, "message": f"{NOT_DRAINED}then."},
        node_annotations=CA,
        tainted=True,
        then=("True", BY_USER, DRAINED),
        then_tainted=True,
        then_protected=True,
    ),
    "when preserve=when-failed, the machine has Failed, and there is a backing node": Case(
        "Failed",
        value="when-failed",
        then=("True", BY_USER, DRAINED),
        then_tainted=True,
        then_protected=True,
        then_value="when-failed",
    ),
    "when preserve=auto-preserved, the machine has Failed, and there is a backing node": Case(
        "Failed",
        value="auto-preserved",
        then=("True", BY_MCM, DRAINED),
        then_tainted=True,
        then_protected=True,
        then_value="auto-preserved",
    ),
    # upstream returns the lister's error; a Node that is gone is no Node here: the machine is preserved
    "when preserve=now, the machine has Failed, and there is an error fetching backing node": Case(
        "Failed", node="gone"
    ),
    "when preserve=now, the machine is Running, and the node is user-cordoned, Spec.Unschedulable must "
    "remain true": Case(
        "Running", cordoned=True, then=("True", BY_USER, PRESERVED_UNTIL), then_protected=True
    ),
    "when preserve=now, the machine has Failed, and the node is user-cordoned, Spec.Unschedulable must "
    "remain true": Case(
        "Failed", cordoned=True, then=("True", BY_USER, DRAINED), then_tainted=True, then_protected=True
    ),
}

STOP_CASES = {
    "when stopping preservation on a preserved machine with backing node and preserve annotation needs to be "
    "removed": Case(
        "Failed",
        expiry=-LATER,
        condition={"status": "True", "reason": BY_USER, "message": f"{DRAINED}then."},
        node_annotations=CA,
        tainted=True,
        expiry_set=False,
        then=("False", STOPPED, "Machine preservation stopped: the preservation expired."),
        then_value=None,
    ),
    "when stopping preservation on a preserved machine with backing node and preserve annotation "
    "shouldn't be removed": Case(
        "Failed",
        value="false",
        expiry=LATER,
        condition={"status": "True", "reason": BY_USER, "message": f"{DRAINED}then."},
        node_annotations=CA,
        tainted=True,
        expiry_set=False,
        then=("False", STOPPED, "Machine preservation stopped: the preserve annotation is false."),
        then_value="false",
    ),
    "when stopping preservation on a preserved machine with no backing node": Case(
        "Running", node=None, expiry=-LATER, expiry_set=False, then_value=None
    ),
    "when stopping preservation on a preserved machine, and the backing node is not found": Case(
        "Running", node="gone", expiry=-LATER, expiry_set=False, then_value=None
    ),
    "when machine recovers to Running and node was not user-cordoned, preservation taint must be removed and "
    "Spec.Unschedulable must remain false": Case(
        "Running",
        value="when-failed",
        expiry=LATER,
        condition={"status": "True", "reason": BY_USER, "message": f"{DRAINED}then."},
        node_annotations=CA,
        tainted=True,
        expiry_set=False,
        then=("False", STOPPED, "Machine preservation stopped: the machine is no longer Failed."),
        then_value="when-failed",
    ),
    "when machine recovers to Running and node was user-cordoned, preservation taint must be removed and "
    "Spec.Unschedulable must remain true": Case(
        "Running",
        value="when-failed",
        expiry=LATER,
        condition={"status": "True", "reason": BY_USER, "message": f"{DRAINED}then."},
        node_annotations=CA,
        tainted=True,
        cordoned=True,
        expiry_set=False,
        then=("False", STOPPED, "Machine preservation stopped: the machine is no longer Failed."),
        then_value="when-failed",
    ),
}


def prepare(env: Env, case: Case) -> tuple[Machine, dict[str, Any] | None]:
    name = env.name(uuid_part())
    node_name = f"{name}-node"
    labels = {} if case.node is None else {NODE_LABEL_KEY: node_name}
    env.machine(name, "cls", labels=labels)
    raw = ops.get(env.api, kinds.MACHINE.resource, name, env.namespace)
    assert raw is not None
    raw["metadata"].setdefault("annotations", {})[PRESERVE_ANNOTATION] = case.value
    raw = ops.update(env.api, kinds.MACHINE.resource, raw, env.namespace)
    now = datetime.now(UTC)
    current: dict[str, Any] = {"phase": case.phase, "lastUpdateTime": format_time(now)}
    if case.expiry is not None:
        current["preserveExpiryTime"] = format_time(now + case.expiry)
    raw["status"] = {"currentStatus": current}
    raw = ops.update_status(env.api, kinds.MACHINE.resource, raw, env.namespace)
    node = None
    if case.node == "here":
        taints = [{"key": PRESERVED_TAINT, "effect": "NoSchedule"}] if case.tainted else []
        body = {
            "metadata": {"name": node_name, "annotations": dict(case.node_annotations)},
            "spec": {"unschedulable": case.cordoned, "taints": taints},
        }
        node = ops.create(env.api, kinds.NODE.resource, body)
        if case.condition is not None:
            stamp = format_time(now)
            cond = {
                "type": "Preserved",
                **case.condition,
                "lastTransitionTime": stamp,
                "lastHeartbeatTime": stamp,
            }
            node["status"] = {"conditions": [cond]}
            node = ops.update_status(env.api, kinds.NODE.resource, node)
    return Machine.model_validate(raw), node


_counter = [0]


def uuid_part() -> str:
    _counter[0] += 1
    return f"p{_counter[0]}"


def check(env: Env, machine: Machine, case: Case) -> None:
    after = env.get(machine.metadata.name or "")
    assert (after.status.current_status.preserve_expiry_time is not None) is case.expiry_set
    assert after.metadata.annotations.get(PRESERVE_ANNOTATION) == case.then_value
    if case.node != "here":
        return
    node = env.node(machine.metadata.labels[NODE_LABEL_KEY])
    assert node is not None
    found = [c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == "Preserved"]
    if case.then is None:
        assert found == []
    else:
        [cond] = found
        status, reason, message = case.then
        assert (cond["status"], cond["reason"]) == (status, reason)
        assert str(cond["message"]).startswith(message), cond["message"]
    taints = (node.get("spec") or {}).get("taints") or []
    assert any(t.get("key") == PRESERVED_TAINT for t in taints) is case.then_tainted
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    assert (CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION in annotations) is case.then_protected
    assert bool((node.get("spec") or {}).get("unschedulable")) is case.cordoned, "a user's cordon stays"


@pytest.mark.parametrize("case", [pytest.param(c, id=i) for i, c in PRESERVE_CASES.items()])
def test_preserve_machine(env: Env, case: Case) -> None:
    machine, node = prepare(env, case)
    manage_preservation(MachineScope.begin(machine.key, machine), machine, node)
    check(env, machine, case)


@pytest.mark.parametrize("case", [pytest.param(c, id=i) for i, c in STOP_CASES.items()])
def test_stop_preservation_if_active(env: Env, case: Case) -> None:
    machine, node = prepare(env, case)
    manage_preservation(MachineScope.begin(machine.key, machine), machine, node)
    check(env, machine, case)
