"""Routing table for the target cluster: Node events wake their Machine (MCM's node handlers); Pod and
VolumeAttachment deletions wake a draining machine; the other kinds are mirror-only."""

from __future__ import annotations

import pytest

from informers.events import ADDED, DELETED, MODIFIED
from mcm_sandbox.testing import fixtures as fx
from mcm_tasks import kinds
from mcm_tasks.api.constants import (
    CRITICAL_COMPONENTS_NOT_READY_TAINT,
    DELETED_BY_FLOW_ANNOTATION,
    NODE_MACHINE_NAME_LABEL_KEY,
    NOT_MANAGED_BY_MCM_ANNOTATION,
    PRESERVE_ANNOTATION,
    TRIGGER_DELETION_BY_MCM_ANNOTATION,
    UPDATE_RESULT_LABEL_KEY,
)
from tests.unit.routing_support import World, k

M, N, P = kinds.MACHINE.mirror, kinds.NODE.mirror, kinds.POD.mirror
READY = [{"type": "Ready", "status": "True"}]


def running_machine(**kw: object) -> dict[str, object]:
    return fx.machine("m", node="n", phase="Running", conditions=READY, **kw)  # type: ignore[arg-type]


def with_node(node: dict[str, object] | None = None, machine: dict[str, object] | None = None) -> World:
    w = World().given(M, machine or running_machine())
    return w.given(N, node) if node else w


# --- node ADD --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("machine", "wakes_machine"),
    [
        (fx.machine("m", node="n", phase="Running", conditions=READY), False),  # already copied
        (fx.machine("m", node="n", phase="CrashLoopBackOff"), False),
        (fx.machine("m", node="n", phase="Terminating", deleting=True), False),
    ],
)
def test_node_added_wakes_the_node_task_and_the_machine_when_conditions_differ(
    machine: dict[str, object], wakes_machine: bool
) -> None:
    r = with_node(machine=machine).then(N, ADDED, fx.node("n"))
    assert r.items()[0] == ("node", "n")
    assert any(key == k("m") for _, key in r.items()) is wakes_machine


NEW_NODE = fx.node("n", finalizers=[])


def test_a_joining_node_wakes_only_its_machine_whose_pass_adds_the_node_finalizer() -> None:
    """The usual join: the Pending machine's pass writes Running and syncs the node (finalizer and
    machine-name label in one patch), so the node task would only repeat it (one task and one write
    per machine)."""
    r = with_node(machine=fx.machine("m", node="n", phase="Pending")).then(N, ADDED, NEW_NODE)
    assert r.items() == [("machine", k("m"))]


@pytest.mark.parametrize(
    ("machine", "node"),
    [
        (
            fx.machine("m", phase="Pending", labels={"x": "y"}),
            fx.node("n", labels={NODE_MACHINE_NAME_LABEL_KEY: "m"}, finalizers=[]),
        ),
        (fx.machine("m", node="n", phase="Pending"), fx.node("n", deleting=True, finalizers=[])),
        (
            fx.machine("m", node="n", phase="Pending"),
            fx.node("n", annotations={TRIGGER_DELETION_BY_MCM_ANNOTATION: "true"}, finalizers=[]),
        ),
    ],
)
def test_a_node_whose_machine_pass_would_not_sync_it_still_gets_the_node_task(
    machine: dict[str, object], node: dict[str, object]
) -> None:
    r = with_node(machine=machine).then(N, ADDED, node)
    assert ("node", "n") in r.items()


def test_unmanaged_node_routes_nothing() -> None:
    unmanaged = fx.node("n", annotations={NOT_MANAGED_BY_MCM_ANNOTATION: "1"})
    w = with_node()
    assert not w.then(N, ADDED, unmanaged)
    assert not w.then(N, MODIFIED, fx.bump(unmanaged, "2"))
    assert not w.then(N, DELETED, unmanaged)


def test_node_without_machine_is_only_seen_by_the_node_task() -> None:
    assert World().then(N, ADDED, fx.node("n")).items() == [("node", "n")]
    assert (
        not World()
        .given(N, fx.node("n"))
        .then(N, MODIFIED, fx.node("n", rv="2", conditions={"Ready": "False"}))
    )


def test_machine_found_through_the_machine_name_label_when_no_machine_has_the_node_label() -> None:
    w = World().given(M, fx.machine("m", phase="Pending"))
    r = w.then(N, ADDED, fx.node("n", labels={NODE_MACHINE_NAME_LABEL_KEY: "m"}))
    assert ("machine", k("m")) in r.items()


def test_two_machines_claiming_one_node_are_ambiguous() -> None:
    w = World().given(
        M, fx.machine("a", node="n", phase="Pending"), fx.machine("b", node="n", phase="Pending")
    )
    assert w.then(N, ADDED, fx.node("n")).items() == [("node", "n")]


# --- node UPDATE -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("after", "expected"),
    [
        (fx.node("n", rv="2"), []),  # a heartbeat: same condition statuses
        (fx.node("n", rv="2", conditions={"Ready": "False"}), [("machine", "mcm/m")]),
        (fx.node("n", rv="2", conditions={"Ready": "True", "DiskPressure": "False"}), [("machine", "mcm/m")]),
        (fx.node("n", rv="2", taints=[CRITICAL_COMPONENTS_NOT_READY_TAINT]), [("machine", "mcm/m")]),
        (fx.node("n", rv="2", taints=["some-other-taint"]), []),
        (fx.node("n", rv="2", labels={UPDATE_RESULT_LABEL_KEY: "successful"}), [("machine", "mcm/m")]),
        (fx.node("n", rv="2", annotations={PRESERVE_ANNOTATION: "now"}), [("machine", "mcm/m")]),
        (fx.node("n", rv="2", finalizers=[]), [("node", "n")]),
        (fx.node("n", rv="2", deleting=True), [("node", "n")]),
        (fx.node("n", rv="2", annotations={TRIGGER_DELETION_BY_MCM_ANNOTATION: "true"}), [("node", "n")]),
    ],
)
def test_node_update_routing(after: dict[str, object], expected: list[tuple[str, str]]) -> None:
    assert with_node(fx.node("n")).then(N, MODIFIED, after).items() == expected


def test_conditions_of_a_crash_looping_machine_are_left_alone() -> None:
    machine = fx.machine("m", node="n", phase="CrashLoopBackOff")
    w = with_node(fx.node("n"), machine)
    assert not w.then(N, MODIFIED, fx.node("n", rv="2", conditions={"Ready": "False"}))


def test_detach_on_the_node_of_a_draining_machine_wakes_its_termination() -> None:
    draining = fx.machine("m", node="n", phase="Terminating", deleting=True)
    w = with_node(fx.node("n", volumes=["vol-1"]), draining)
    assert w.then(N, MODIFIED, fx.node("n", rv="2")).items() == [("machine-termination", k("m"))]
    assert not w.then(N, MODIFIED, fx.node("n", rv="3", conditions={"Ready": "False"}))


# --- node DELETE -------------------------------------------------------------------------------------------


def test_node_deleted_wakes_the_node_task_and_the_machine() -> None:
    w = with_node(fx.node("n"))
    assert w.then(N, DELETED, fx.node("n")).items() == [("node", "n"), ("machine", k("m"))]


def test_node_deleted_without_a_machine_routes_nothing() -> None:
    assert not World().given(N, fx.node("n")).then(N, DELETED, fx.node("n"))


@pytest.mark.parametrize(
    ("description", "wakes_flow"),
    [
        ("Initiate node drain", True),  # deleted by someone else mid-drain: the drain moves on at once
        ("VM deletion was successful. Initiate node object deletion", False),  # the flow's own delete
        ('Deletion of Node Object "n" is successful. Initiate machine object finalizer removal', False),
    ],
)
def test_node_deleted_under_a_deleting_machine_wakes_no_node_task_and_the_flow_only_if_not_its_own(
    description: str, wakes_flow: bool
) -> None:
    draining = fx.machine("m", node="n", phase="Terminating", deleting=True, description=description)
    routed = with_node(fx.node("n"), draining).then(N, DELETED, fx.node("n")).items()
    assert routed == ([("machine-termination", k("m"))] if wakes_flow else [])


def test_node_the_flow_marked_as_it_deleted_it_wakes_no_flow() -> None:
    """A pass that runs on to the Node's deletion writes no status on the way: the Machine's last
    description is a step behind, the mark in the Node's finalizer patch says whose DELETE it is."""
    draining = fx.machine(
        "m", node="n", phase="Terminating", deleting=True, description="Initiate node drain"
    )
    marked = fx.node("n")
    marked["metadata"]["annotations"] = {DELETED_BY_FLOW_ANNOTATION: "delete-node"}
    assert not with_node(fx.node("n"), draining).then(N, DELETED, marked).items()


# --- pods, volume attachments, mirror-only kinds -----------------------------------------------------------


def draining_world() -> World:
    w = World().given(M, fx.machine("m", node="n", phase="Terminating", deleting=True))
    return w.given(M, fx.machine("r", node="other", phase="Running"))


def test_pod_gone_from_a_draining_node_wakes_the_termination() -> None:
    w = draining_world().given(P, fx.pod("p", node_name="n"), fx.pod("q", node_name="other"))
    assert w.then(P, MODIFIED, fx.pod("p", node_name="n", rv="2", deleting=True)).items() == [
        ("machine-termination", k("m"))
    ]
    assert w.then(P, DELETED, fx.pod("p", node_name="n", rv="3", deleting=True)).items() == [
        ("machine-termination", k("m"))
    ]
    assert not w.then(P, DELETED, fx.pod("q", node_name="other"))


def test_pod_changes_that_are_not_a_departure_route_nothing() -> None:
    w = draining_world().given(P, fx.pod("p", node_name="n"))
    assert not w.then(P, MODIFIED, fx.pod("p", node_name="n", rv="2"))
    assert not w.then(P, ADDED, fx.pod("new", node_name="n"))


def test_volume_attachment_deleted_on_a_draining_node_wakes_the_termination() -> None:
    va = fx.volume_attachment("va", node_name="n", pv="pv")
    w = draining_world().given(kinds.VOLUME_ATTACHMENT.mirror, va)
    assert w.then(kinds.VOLUME_ATTACHMENT.mirror, DELETED, va).items() == [("machine-termination", k("m"))]


@pytest.mark.parametrize("type_", [ADDED, DELETED])
def test_persistent_volumes_are_mirror_only(type_: str) -> None:
    pv = fx.persistent_volume("pv", claim="default/pvc")
    w = draining_world().given(kinds.PERSISTENT_VOLUME.mirror, pv) if type_ == DELETED else draining_world()
    assert not w.then(kinds.PERSISTENT_VOLUME.mirror, type_, pv)


def _with_in_place(obj: dict[str, object], reason: str) -> dict[str, object]:
    status = dict(obj.get("status") or {})  # type: ignore[call-overload]
    others = [c for c in status.get("conditions") or () if c.get("type") != "InPlaceUpdate"]
    status["conditions"] = [*others, {"type": "InPlaceUpdate", "status": "True", "reason": reason}]
    return {**obj, "status": status}


@pytest.mark.parametrize(
    ("new_reason", "wakes"),
    [
        pytest.param("SelectedForUpdate", True, id="nodeConditionsHaveChanged: InPlaceUpdate reason changed"),
        pytest.param("CandidateForUpdate", False, id="ours: the same reason is no news"),
    ],
)
def test_a_new_in_place_reason_on_the_node_wakes_its_machine(new_reason: str, wakes: bool) -> None:
    """The machine's copy of the conditions follows the reason (the deployment reads it), so the
    machine controller writing ``SelectedForUpdate`` or ``UpdateSuccessful`` wakes the machine."""
    machine = _with_in_place(running_machine(), "CandidateForUpdate")
    before = _with_in_place(fx.node("n"), "CandidateForUpdate")
    after = _with_in_place(fx.node("n", rv="2"), new_reason)
    routed = with_node(before, machine).then(N, MODIFIED, after).items()
    assert (("machine", k("m")) in routed) is wakes
