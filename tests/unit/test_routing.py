"""Routing table for the control cluster: which Machine/MachineSet/MachineDeployment/MachineClass/Secret
event enqueues which keys (MCM reference §4 "Event routing", §5)."""

from __future__ import annotations

import pytest

from informers.events import ADDED, DELETED, MODIFIED, Routing
from informers.routing import full_resync
from mcm_sandbox.testing import fixtures as fx
from mcm_tasks import kinds
from mcm_tasks.api import Obj
from mcm_tasks.api.constants import (
    DELETED_BY_FLOW_ANNOTATION,
    MCM_FINALIZER,
    PRE_DRAIN_HOOK_PREFIX,
    PRE_TERMINATE_HOOK_PREFIX,
    PRESERVE_ANNOTATION,
)
from tests.unit.routing_support import World, k

NS = fx.NS
M, MS, MCD, CLS, SEC = (
    kinds.MACHINE.mirror,
    kinds.MACHINE_SET.mirror,
    kinds.MACHINE_DEPLOYMENT.mirror,
    kinds.MACHINE_CLASS.mirror,
    kinds.SECRET.mirror,
)


def world() -> World:
    return (
        World()
        .given(CLS, fx.machine_class("cls"))
        .given(MCD, fx.machine_deployment("d", selector={"app": "d"}))
        .given(MS, fx.machine_set("s", deployment="d", selector={"app": "d"}))
    )


# --- machines ---------------------------------------------------------------------------------------------


def test_machine_added_wakes_itself_its_class_its_set_and_the_overshooting_check() -> None:
    r = world().then(M, ADDED, fx.machine("m", machine_set="s"))
    assert r.items() == [
        ("machine", k("m")),
        ("machineclass", k("cls")),
        ("safety", "overshooting"),
        ("machineset", k("s")),
    ]
    assert r.creations_observed == [k("s")]
    assert not r.deletions_observed


def test_machine_added_while_deleting_goes_to_termination_and_counts_as_a_deletion() -> None:
    r = world().then(M, ADDED, fx.machine("m", machine_set="s", deleting=True))
    assert ("machine-termination", k("m")) in r.items()
    assert ("machine", k("m")) not in r.items()
    assert r.creations_observed == []
    assert list(r.deletions_observed) == [(k("s"), "m")]


def test_orphan_machine_wakes_every_set_that_selects_it() -> None:
    w = world().given(
        MS, fx.machine_set("other", selector={"app": "other"}), fx.machine_set("empty", selector={})
    )
    r = w.then(M, ADDED, fx.machine("m", labels={"app": "d"}))
    assert [key for q, key in r.items() if q == "machineset"] == [k("s")]
    assert r.creations_observed == []


def test_orphan_machine_without_labels_wakes_no_set() -> None:
    r = world().then(M, ADDED, fx.machine("m"))
    assert not [q for q, _ in r.items() if q == "machineset"]


@pytest.mark.parametrize(
    ("change", "reconciles_machine"),
    [
        ({"status": {"currentStatus": {"phase": "Running"}}}, False),  # our own status echo
        ({"generation": 2}, True),  # spec change
        ({"annotations": {PRESERVE_ANNOTATION: "now"}}, True),  # preservation asked
        ({"labels": {"force-deletion": "true"}}, False),  # MCM ignores metadata-only updates
    ],
)
def test_machine_update_reconciles_the_machine_only_for_spec_or_preserve_changes(
    change: dict[str, object], reconciles_machine: bool
) -> None:
    base = fx.machine("m", machine_set="s")
    w = world().given(M, base)
    new = fx.bump(base, "2", **{f: v for f, v in change.items() if f != "status"})
    if "status" in change:
        new = {**new, "status": change["status"]}
    r = w.then(M, MODIFIED, new)
    assert (("machine", k("m")) in r.items()) is reconciles_machine
    assert ("machineset", k("s")) in r.items(), "each of these changes something the set reads"
    assert r.creations_observed == []


def _with_status(machine: Obj, rv: str, phase: str, state: str, description: str, updated: str) -> Obj:
    status = {
        "currentStatus": {"phase": phase, "lastUpdateTime": updated},
        "lastOperation": {"state": state, "type": "Delete", "description": description,
                          "lastUpdateTime": updated},
    }  # fmt: skip
    return {**fx.bump(machine, rv), "status": status}


@pytest.mark.parametrize("deleting", [False, True])
@pytest.mark.parametrize(
    ("before", "after", "wakes_set"),
    [
        # the machine controller's progress notes: nothing the set reads
        (("Terminating", "Processing", "Initiate node drain", "t1"),
         ("Terminating", "Processing", "Drain successful. Initiate VM deletion", "t2"), False),
        # a phase change: the set's counts
        (("Pending", "Processing", "Creating", "t1"), ("Running", "Processing", "Creating", "t1"), True),
        # an operation that fails: failedMachines
        (("Terminating", "Processing", "Initiate VM deletion", "t1"),
         ("Terminating", "Failed", "VM deletion failed", "t2"), True),
        # a failed operation's new message: failedMachines shows the whole lastOperation
        (("Terminating", "Failed", "VM deletion failed: a", "t1"),
         ("Terminating", "Failed", "VM deletion failed: b", "t2"), True),
        # back from failed to processing: the entry leaves failedMachines
        (("Terminating", "Failed", "VM deletion failed", "t1"),
         ("Terminating", "Processing", "Initiate VM deletion", "t2"), True),
    ],
)  # fmt: skip
def test_machine_status_update_wakes_its_set_only_when_the_set_reads_what_changed(
    before: tuple[str, str, str, str], after: tuple[str, str, str, str], wakes_set: bool, deleting: bool
) -> None:
    base = fx.machine("m", machine_set="s")
    if deleting:
        base = fx.bump(base, "1", deletionTimestamp="2026-01-01T00:00:00Z")
    w = world().given(M, _with_status(base, "2", *before))
    r = w.then(M, MODIFIED, _with_status(base, "3", *after))
    assert (("machineset", k("s")) in r.items()) is wakes_set
    assert not r.deletions_observed


def test_machine_update_with_the_same_resource_version_routes_nothing() -> None:
    base = fx.machine("m", machine_set="s")
    assert not world().given(M, base).then(M, MODIFIED, base)


def test_deletion_timestamp_appearing_sends_the_machine_to_termination_once_observed() -> None:
    base = fx.machine("m", machine_set="s")
    w = world().given(M, base)
    r = w.then(M, MODIFIED, fx.bump(base, "2", deletionTimestamp="2026-01-01T00:00:00Z"))
    assert r.items()[0] == ("machine-termination", k("m"))
    assert list(r.deletions_observed) == [(k("s"), "m")]
    # a later change the set reads (here an annotation): the set hears of it, no second observation
    later = fx.bump(base, "3", deletionTimestamp="2026-01-01T00:00:00Z", annotations={"a": "b"})
    r = w.then(M, MODIFIED, later)
    assert r.items() == [("machineset", k("s"))]
    assert not r.deletions_observed


def test_machine_moved_to_another_set_wakes_both() -> None:
    w = world().given(MS, fx.machine_set("s2", deployment="d"))
    base = fx.machine("m", machine_set="s")
    w.given(M, base)
    moved = fx.machine("m", rv="2", machine_set="s2")
    assert {key for q, key in w.then(M, MODIFIED, moved).items() if q == "machineset"} == {k("s"), k("s2")}


def test_machine_whose_owner_uid_names_another_set_wakes_no_set() -> None:
    r = world().then(M, ADDED, fx.machine("m", machine_set="s", machine_set_uid="stale"))
    assert not [q for q, _ in r.items() if q == "machineset"]
    assert r.creations_observed == []


def test_class_change_wakes_old_and_new_class() -> None:
    base = fx.machine("m", machine_set="s")
    w = world().given(M, base)
    r = w.then(M, MODIFIED, fx.machine("m", rv="2", generation=2, machine_set="s", cls="cls2"))
    assert [key for q, key in r.items() if q == "machineclass"] == [k("cls"), k("cls2")]


def test_out_of_range_description_triggers_the_orphan_vm_sweep_once() -> None:
    base = fx.machine("m", machine_set="s")
    w = world().given(M, base)
    out_of_range = fx.machine("m", rv="2", machine_set="s", description="Cloud provider message - OutOfRange")
    assert ("safety", "orphan-vms") in w.then(M, MODIFIED, out_of_range).items()
    again = fx.machine("m", rv="3", machine_set="s", description="Cloud provider message - OutOfRange again")
    assert ("safety", "orphan-vms") not in w.then(M, MODIFIED, again).items()


def test_machine_deleted_goes_to_termination_its_set_its_class_and_the_orphan_sweep() -> None:
    base = fx.machine("m", machine_set="s")
    r = world().given(M, base).then(M, DELETED, base)
    assert r.items() == [
        ("machine-termination", k("m")),
        ("machineclass", k("cls")),
        ("safety", "orphan-vms"),
        ("machineset", k("s")),
    ]
    assert list(r.deletions_observed) == [(k("s"), "m")]


def test_machine_deleted_wakes_its_class_only_as_the_last_of_the_class() -> None:
    first, second = fx.machine("m", machine_set="s"), fx.machine("m2", machine_set="s")
    other_namespace = fx.machine("m3", namespace="elsewhere")
    w = world().given(M, first, second, other_namespace)
    assert ("machineclass", k("cls")) not in w.then(M, DELETED, first).items()  # m2 still uses it
    assert ("machineclass", k("cls")) in w.then(M, DELETED, second).items()  # m3 is another namespace's


def test_machine_released_by_its_own_flow_wakes_no_termination_nor_the_orphan_sweep() -> None:
    released = fx.machine(
        "m", machine_set="s", phase="Terminating", deleting=True,
        description='Deletion of Node Object "n" is successful. Initiate machine object finalizer removal',
    )  # fmt: skip
    routed = world().given(M, released).then(M, DELETED, released).items()
    assert ("machine-termination", k("m")) not in routed
    assert ("safety", "orphan-vms") not in routed  # its VM was deleted before its finalizer went
    assert ("machineset", k("s")) in routed  # the rest as before
    cut_short = fx.machine("m", phase="Terminating", deleting=True, description="Initiate node drain")
    routed = world().given(M, cut_short).then(M, DELETED, cut_short).items()
    assert ("machine-termination", k("m")) in routed and ("safety", "orphan-vms") in routed


def test_machine_its_flow_marked_as_it_released_it_wakes_no_termination_nor_the_orphan_sweep() -> None:
    """A pass that runs on to the finalizer's removal writes no status on the way: the Machine's last
    description is a step behind, the mark in the finalizer's patch says the flow let it go."""
    released = fx.machine("m", phase="Terminating", deleting=True, description="Initiate node drain")
    released["metadata"]["annotations"] = {DELETED_BY_FLOW_ANNOTATION: "remove-finalizer"}
    routed = world().given(M, released).then(M, DELETED, released).items()
    assert ("machine-termination", k("m")) not in routed
    assert ("safety", "orphan-vms") not in routed


@pytest.mark.parametrize(
    ("strategy", "others_left", "wakes"), [("Recreate", 0, True), ("Recreate", 1, False)]
)
def test_last_machine_of_a_recreate_deployment_wakes_the_deployment(
    strategy: str, others_left: int, wakes: bool
) -> None:
    w = (
        World()
        .given(MCD, fx.machine_deployment("d", strategy=strategy))
        .given(MS, fx.machine_set("s", deployment="d"))
    )
    last = fx.machine("m", machine_set="s")
    w.given(M, last, *(fx.machine(f"o{i}", machine_set="s") for i in range(others_left)))
    assert (("machinedeployment", k("d")) in w.then(M, DELETED, last).items()) is wakes


def test_rolling_deployment_is_not_woken_by_machine_deletion() -> None:
    last = fx.machine("m", machine_set="s")
    assert ("machinedeployment", k("d")) not in world().given(M, last).then(M, DELETED, last).items()


def test_a_machine_whose_in_place_update_succeeded_wakes_its_deployment() -> None:
    """Upstream ``updateMachineToMachineDeployment``: the deployment moves it to the new set at once."""
    ready = [{"type": "InPlaceUpdate", "status": "True", "reason": "ReadyForUpdate"}]
    done = [{"type": "InPlaceUpdate", "status": "True", "reason": "UpdateSuccessful"}]
    before = fx.machine("m", machine_set="s", labels={"app": "d"}, conditions=ready)
    after = fx.machine("m", rv="2", machine_set="s", labels={"app": "d"}, conditions=done)
    w = world().given(M, before)
    assert ("machinedeployment", k("d")) in w.then(M, MODIFIED, after).items()
    again = fx.machine("m", rv="3", machine_set="s", labels={"app": "d", "x": "y"}, conditions=done)
    assert ("machinedeployment", k("d")) not in w.then(M, MODIFIED, again).items()


# --- machine sets and deployments --------------------------------------------------------------------------


@pytest.mark.parametrize("type_", [ADDED, MODIFIED, DELETED])
def test_machine_set_events_wake_the_set_and_its_deployment(type_: str) -> None:
    w = World().given(MCD, fx.machine_deployment("d"))
    ms = fx.machine_set("s", deployment="d")
    if type_ != ADDED:
        w.given(MS, ms)
        ms = {**fx.bump(ms, "2", generation=2), "spec": {"replicas": 3}} if type_ == MODIFIED else ms
    assert w.then(MS, type_, ms).items() == [("machineset", k("s")), ("machinedeployment", k("d"))]


@pytest.mark.parametrize(
    "change",
    [
        {"labels": {"freeze": "True"}},
        {"annotations": {"deployment.machine.sapcloud.io/prefer-no-schedule": "True"}},
        {"finalizers": []},
        {"deletionTimestamp": "2024-01-01T00:00:00Z"},
    ],
)
def test_machine_set_metadata_update_wakes_the_set(change: dict[str, object]) -> None:
    ms = fx.machine_set("s", deployment="d")
    w = World().given(MCD, fx.machine_deployment("d")).given(MS, ms)
    assert ("machineset", k("s")) in w.then(MS, MODIFIED, fx.bump(ms, "2", **change)).items()


def test_machine_set_status_update_wakes_its_deployment_but_not_the_set() -> None:
    """The echo of the set's own status write: its pass computed that status; the deployment sums it."""
    ms = fx.machine_set("s", deployment="d")
    w = World().given(MCD, fx.machine_deployment("d")).given(MS, ms)
    echo = {**fx.bump(ms, "2"), "status": {"replicas": 1, "readyReplicas": 1}}
    assert w.then(MS, MODIFIED, echo).items() == [("machinedeployment", k("d"))]


def test_orphan_machine_set_wakes_deployments_that_select_it() -> None:
    w = World().given(
        MCD,
        fx.machine_deployment("d", selector={"app": "d"}),
        fx.machine_deployment("x", selector={"app": "x"}),
    )
    r = w.then(MS, ADDED, fx.machine_set("s", labels={"app": "d"}))
    assert r.items() == [("machineset", k("s")), ("machinedeployment", k("d"))]


@pytest.mark.parametrize("type_", [ADDED, MODIFIED, DELETED])
def test_machine_deployment_events_wake_only_itself(type_: str) -> None:
    w, mcd = World(), fx.machine_deployment("d")
    if type_ != ADDED:
        w.given(MCD, mcd)
        if type_ == MODIFIED:
            mcd = {**fx.bump(mcd, "2", generation=2), "spec": {**mcd["spec"], "replicas": 5}}
    assert w.then(MCD, type_, mcd).items() == [("machinedeployment", k("d"))]


def test_machine_deployment_annotation_update_wakes_it() -> None:
    """The autoscaler asks for machines to go through an annotation (trigger-deletion)."""
    mcd = fx.machine_deployment("d")
    w = World().given(MCD, mcd)
    changed = fx.bump(mcd, "2", annotations={"cluster-autoscaler.kubernetes.io/trigger": "m-1"})
    assert w.then(MCD, MODIFIED, changed).items() == [("machinedeployment", k("d"))]


def test_machine_deployment_status_update_wakes_nothing() -> None:
    """The echo of the deployment's own status write."""
    mcd = fx.machine_deployment("d")
    w = World().given(MCD, mcd)
    echo = {**fx.bump(mcd, "2"), "status": {"replicas": 1, "updatedReplicas": 1}}
    assert not w.then(MCD, MODIFIED, echo).items()


# --- classes and secrets -----------------------------------------------------------------------------------


def test_class_added_wakes_itself_its_secrets_and_its_machines() -> None:
    w = World().given(
        M, fx.machine("m1", cls="c"), fx.machine("m2", cls="c", deleting=True), fx.machine("x", cls="o")
    )
    r = w.then(CLS, ADDED, fx.machine_class("c", secret="s1", credentials="s2"))
    assert r.items() == [
        ("machineclass", k("c")),
        ("secret", k("s1")),
        ("secret", k("s2")),
        ("machine", k("m1")),
        ("machine-termination", k("m2")),
    ]


def test_class_finalizer_added_releases_its_waiting_machines() -> None:
    w = World().given(M, fx.machine("m1", cls="c")).given(CLS, fx.machine_class("c"))
    r = w.then(CLS, MODIFIED, fx.machine_class("c", rv="2", finalizers=[MCM_FINALIZER]))
    assert r.items() == [("machineclass", k("c")), ("machine", k("m1"))]


def test_class_metadata_only_change_wakes_only_the_class() -> None:
    w = World().given(M, fx.machine("m1", cls="c")).given(CLS, fx.machine_class("c"))
    changed = fx.bump(fx.machine_class("c"), "2", labels={"a": "b"})
    assert w.then(CLS, MODIFIED, changed).items() == [("machineclass", k("c"))]


def test_class_secret_ref_change_wakes_old_and_new_secret() -> None:
    w = World().given(CLS, fx.machine_class("c", secret="old"))
    r = w.then(CLS, MODIFIED, fx.machine_class("c", rv="2", secret="new"))
    assert [key for q, key in r.items() if q == "secret"] == [k("old"), k("new")]


def test_secret_added_or_deleted_wakes_itself_and_the_classes_referencing_it() -> None:
    w = World().given(
        CLS, fx.machine_class("c1", secret="s"), fx.machine_class("c2", credentials="s", secret=None)
    )
    w.given(CLS, fx.machine_class("c3", secret="other"))
    expected = [("secret", k("s")), ("machineclass", k("c1")), ("machineclass", k("c2"))]
    assert w.then(SEC, ADDED, fx.secret("s")).items() == expected
    assert w.then(SEC, DELETED, fx.secret("s")).items() == expected


def test_secret_data_change_wakes_its_classes_but_not_the_secret_controller() -> None:
    w = World().given(CLS, fx.machine_class("c1", secret="s")).given(SEC, fx.secret("s"))
    r = w.then(SEC, MODIFIED, fx.secret("s", rv="2", data={"userData": "bmV3"}))
    assert r.items() == [("machineclass", k("c1"))]


def test_secret_finalizer_change_wakes_only_the_secret_controller() -> None:
    w = World().given(CLS, fx.machine_class("c1", secret="s")).given(SEC, fx.secret("s"))
    r = w.then(SEC, MODIFIED, fx.secret("s", rv="2", finalizers=["machine.sapcloud.io/machine-controller"]))
    assert r.items() == [("secret", k("s"))]


# --- periodic resync ----------------------------------------------------------------------------------------


def test_full_resync_enqueues_every_key_of_every_reconciled_kind() -> None:
    w = world().given(M, fx.machine("m", machine_set="s"), fx.machine("gone", deleting=True))
    w.given(SEC, fx.secret("secret"))
    w.given(
        kinds.NODE.mirror,
        fx.node("n1"),
        fx.node("n2", annotations={"node.machine.sapcloud.io/not-managed-by-mcm": "1"}),
    )
    w.given(kinds.POD.mirror, fx.pod("p", node_name="n1"))
    assert sorted(full_resync(w.processor.store).items()) == sorted(
        [
            ("machine", k("m")),
            ("machine-termination", k("gone")),
            ("machineset", k("s")),
            ("machinedeployment", k("d")),
            ("machineclass", k("cls")),
            ("secret", k("secret")),
            ("node", "n1"),
        ]
    )


# --- batching ------------------------------------------------------------------------------------------


def test_machine_events_wake_their_set_batched_and_their_class_and_safety_jobs_too() -> None:
    w = world()
    added = w.then(M, ADDED, fx.machine("m", machine_set="s"))
    assert added.batched == {("machineset", k("s")), ("machineclass", k("cls")), ("safety", "overshooting")}
    assert added.split()[0] == [("machine", k("m"))]
    deleted = w.then(M, DELETED, fx.machine("m", machine_set="s"))
    assert deleted.batched == {("machineset", k("s")), ("machineclass", k("cls")), ("safety", "orphan-vms")}
    assert deleted.split()[0] == [("machine-termination", k("m"))]
    assert deleted.deletions_observed, "expectations are lowered at once, whatever waits"
    changed = w.then(MS, MODIFIED, fx.bump(fx.machine_set("s", deployment="d", selector={"app": "d"}), "9"))
    assert not changed.batched, "a set's own change and its deployment are woken at once"


def test_an_immediate_wakeup_in_the_same_batch_wins() -> None:
    r = Routing()
    r.add("machineset", "a", batched=True)
    r.add("machineset", "a")
    r.add("machineset", "b")
    r.add("machineset", "b", batched=True)
    r.add("machineset", "c", batched=True)
    assert r.split() == ([("machineset", "a"), ("machineset", "b")], [("machineset", "c")])
    merged = Routing()
    merged.add("machineset", "c")
    merged.merge(r)
    assert merged.split()[1] == []


@pytest.mark.parametrize(
    ("before", "after", "wakes"),
    [
        ({f"{PRE_DRAIN_HOOK_PREFIX}owner": ""}, {}, True),  # the last pre-drain hook went
        (
            {f"{PRE_TERMINATE_HOOK_PREFIX}a": "", f"{PRE_TERMINATE_HOOK_PREFIX}b": ""},
            {f"{PRE_TERMINATE_HOOK_PREFIX}b": ""},
            True,
        ),
        ({"unrelated": "1"}, {"unrelated": "2"}, False),
    ],
)
def test_a_hook_removed_from_a_deleting_machine_wakes_its_termination(
    before: dict[str, str], after: dict[str, str], wakes: bool
) -> None:
    """Issue 31: removing a lifecycle hook resumes a held deletion at once, not at its LongRetry."""
    base = fx.machine("m", machine_set="s", deleting=True, annotations=before)
    r = world().given(M, base).then(M, MODIFIED, fx.bump(base, "2", annotations=after))
    assert (("machine-termination", k("m")) in r.items()) is wakes
