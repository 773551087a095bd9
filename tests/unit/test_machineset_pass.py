"""Whole passes of the MachineSet controller (``machine_set_pass``) on the recording fake
(tests/kube_fake.py): objects and listers in, the recorded writes out, in milliseconds. The queue's
expectations are kept in a real Redis, as in production."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from mcm_tasks import kinds
from mcm_tasks.api import API_VERSION, MachineSet
from mcm_tasks.api.constants import MCM_FINALIZER, SCALE_UP_DISABLED_LABEL_KEY
from mcm_tasks.cache import Listers
from mcm_tasks.controllers.machineset.reconcile import machine_set_pass
from mcm_tasks.controllers.machineset.scope import MachineSetScope
from mcm_tasks.queue import Requeue
from mcm_tasks.settings import configure, get_settings, reset_settings
from tests.kube_fake import FakeKube

NS = "shoot--pass"
SETS, MACHINES = kinds.MACHINE_SET.resource.plural, kinds.MACHINE.resource.plural


@pytest.fixture(autouse=True)
def settings(redis_url: str) -> Iterator[None]:
    configure({"redis_url": redis_url, "namespace": NS})
    yield
    reset_settings()


def machine_class() -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "MachineClass", "metadata": {"name": "cls", "namespace": NS},
            "providerSpec": {}, "provider": "local"}  # fmt: skip


def machine_set(replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "MachineSet",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"class": {"kind": "MachineClass", "name": "cls"}},
            },
        },
    }


def machine(name: str, owner: dict[str, Any] | None = None, phase: str = "Running") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "labels": {"app": "web"}}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": API_VERSION, "kind": "MachineSet", "name": "web",
                                    "uid": owner["metadata"]["uid"], "controller": True,
                                    "blockOwnerDeletion": True}]  # fmt: skip
    return {"apiVersion": API_VERSION, "kind": "Machine", "metadata": meta,
            "spec": {"class": {"kind": "MachineClass", "name": "cls"}},
            "status": {"currentStatus": {"phase": phase}}}  # fmt: skip


def finalized_set(kube: FakeKube, replicas: int) -> dict[str, Any]:
    """The set as an earlier pass left it (MCM's finalizer on), stored in the fake."""
    return kube.add(
        {**machine_set(replicas), "metadata": {"name": "web", "namespace": NS, "finalizers": [MCM_FINALIZER]}}
    )


def run_pass(kube: FakeKube, listers: Listers | None = None) -> Requeue | None:
    """One pass over the set as the fake holds it now, with listers over a snapshot of the fake
    (``listers``: an older snapshot, a mirror that lags)."""
    raw = kube.get_object(SETS, "web", NS)
    assert raw is not None
    scope = MachineSetScope(key=f"{NS}/web", obj=MachineSet.model_validate(raw), settings=get_settings(),
                            listers=listers or kube.listers(NS), clients=(kube, kube))  # fmt: skip
    return machine_set_pass(scope)


def writes(kube: FakeKube) -> list[tuple[str, str, str | None, str | None]]:
    """The writes of machines and sets, in order: (verb, resource, name, subresource)."""
    return [(a.verb, a.resource, a.name, a.subresource) for a in kube.writes(SETS, MACHINES)]


def test_a_pass_adopts_an_orphan_creates_the_missing_replica_and_writes_the_status() -> None:
    kube = FakeKube([machine_class()])
    ms = kube.add(machine_set(3))
    kube.add(machine("web-a", owner=ms))
    kube.add(machine("orphan"))

    requeue = run_pass(kube)

    assert writes(kube) == [
        ("patch", SETS, "web", None),  # MCM's finalizer
        ("patch", MACHINES, "orphan", None),  # adopted: selected, no controller
        ("create", MACHINES, None, None),  # 3 wanted, 2 claimed
        ("update", SETS, "web", "status"),
    ]
    finalizer, adopt, create, status = kube.writes(SETS, MACHINES)
    assert finalizer.body["metadata"]["finalizers"] == [MCM_FINALIZER]
    assert adopt.body["metadata"]["ownerReferences"][0]["uid"] == ms["metadata"]["uid"]
    created = create.body["metadata"]
    assert created["generateName"] == "web-" and created["labels"] == {"app": "web"}
    assert created["ownerReferences"][0]["controller"] and MCM_FINALIZER in created["finalizers"]
    assert status.body["status"]["replicas"] == 2  # what the pass saw; the new machine counts next pass
    (event,) = kube.writes("events")
    assert event.body["reason"] == "SuccessfulCreate"
    assert requeue is not None and requeue.after == get_settings().long_retry


def test_a_pass_before_its_creations_are_observed_creates_nothing_more() -> None:
    """The expectations gate (upstream ``SatisfiedExpectations``): the mirror has not caught up with
    the first pass's creations, so the second lists no machine; it must wait, not create again."""
    kube = FakeKube([machine_class()])
    kube.add(machine_set(2))
    lagging = kube.listers(NS)
    run_pass(kube, lagging)
    assert [w[0] for w in writes(kube)].count("create") == 2
    kube.clear()

    requeue = run_pass(kube, lagging)

    assert not [w for w in writes(kube) if w[0] in ("create", "delete")]
    assert len(kube.list_objects(MACHINES, NS)) == 2
    assert requeue is not None and requeue.after <= get_settings().expectations_timeout + 1


def test_a_scale_down_deletes_the_machine_that_is_not_running_first() -> None:
    kube = FakeKube([machine_class()])
    ms = finalized_set(kube, 1)
    kube.add(machine("web-running", owner=ms))
    kube.add(machine("web-pending", owner=ms, phase="Pending"))

    run_pass(kube)

    assert writes(kube) == [("delete", MACHINES, "web-pending", None), ("update", SETS, "web", "status")]
    assert kube.get_object(MACHINES, "web-pending", NS) is None
    assert kube.get_object(MACHINES, "web-running", NS) is not None


def test_a_set_read_before_its_raise_deletes_nothing_the_raise_accounts_for() -> None:
    """An in-place update's deployment raises the new set's replicas for a machine it moved in, then
    takes the machine's ``update-result`` label off. A pass that reads the set before the raise and
    the machine after the label went (two watches, either ahead) counts one machine too many: the
    API server's set, read before deleting by count, holds the raise, and nothing is deleted."""
    kube = FakeKube([machine_class()])
    ms = finalized_set(kube, 1)
    kube.add(machine("web-old", owner=ms))
    stale = kube.get_object(SETS, "web", NS)  # the mirror's set, before the deployment's raise
    assert stale is not None
    kube.change(SETS, "web", NS, lambda o: o["spec"].update(replicas=2))
    kube.add(machine("web-moved-in", owner=ms))
    scope = MachineSetScope(key=f"{NS}/web", obj=MachineSet.model_validate(stale), settings=get_settings(),
                            listers=kube.listers(NS), clients=(kube, kube))  # fmt: skip

    machine_set_pass(scope)

    assert not [w for w in writes(kube) if w[0] == "delete"], "both machines are the set's replicas"
    assert kube.get_object(MACHINES, "web-moved-in", NS) is not None
    assert scope.machine_set.spec.replicas == 2, "the pass goes on with the set it read live"
    status_writes = [w for w in writes(kube) if w[1] == SETS and w[3] == "status"]
    assert len(status_writes) == 1, f"the status written on the live set, no Conflict first: {status_writes}"


def test_a_scale_down_reads_its_set_once_and_deletes_as_planned() -> None:
    """A pass that deletes by count reads its set from the API server once; a set unchanged since
    the mirror's read deletes as planned."""
    kube = FakeKube([machine_class()])
    ms = finalized_set(kube, 1)
    kube.add(machine("web-a", owner=ms))
    kube.add(machine("web-b", owner=ms, phase="Pending"))

    run_pass(kube)

    assert [w[:3] for w in writes(kube) if w[0] == "delete"] == [("delete", MACHINES, "web-b")]
    gets = [a for a in kube.actions if a.verb == "get" and a.resource == SETS]
    assert len(gets) == 1, gets


def test_an_old_set_read_before_its_scale_up_block_creates_nothing() -> None:
    """An in-place update labels its old set ``scale-up-disabled``, moves a machine to the new set and
    scales the old set down. A pass that reads the machine gone and the set as it was before (no label,
    the old replicas) would create a machine of the old template in its place: the set read live
    holds the label and the scale-down, and nothing is created."""
    kube = FakeKube([machine_class()])
    ms = finalized_set(kube, 3)
    stale = kube.get_object(SETS, "web", NS)  # the mirror's set, before the rollout touched it
    assert stale is not None
    kube.add(machine("web-a", owner=ms))
    kube.add(machine("web-b", owner=ms))  # the third has moved to the new set

    def rolled(o: dict[str, Any]) -> None:
        o["metadata"]["labels"] = {SCALE_UP_DISABLED_LABEL_KEY: "true"}
        o["spec"]["replicas"] = 2

    kube.change(SETS, "web", NS, rolled)
    scope = MachineSetScope(key=f"{NS}/web", obj=MachineSet.model_validate(stale), settings=get_settings(),
                            listers=kube.listers(NS), clients=(kube, kube))  # fmt: skip

    machine_set_pass(scope)

    assert not [w for w in writes(kube) if w[:2] == ("create", MACHINES)], "the old set may not replace it"


def test_an_old_set_that_read_a_move_late_deletes_none_of_its_own_machines() -> None:
    """An in-place update moves a machine to the new set, then scales the old set down. A pass of
    the old set that read the scale-down but not yet the move counts one machine too many; with the
    moved machine the newest, the deletion order picks one of the set's own, which nothing guards.
    The machines the set controls, listed live, hold no excess: nothing is deleted."""
    kube = FakeKube([machine_class()])
    ms = finalized_set(kube, 2)
    kube.change(SETS, "web", NS, lambda o: o["metadata"].update(labels={SCALE_UP_DISABLED_LABEL_KEY: "true"}))
    for name in ("web-oldest", "web-older", "web-moved"):
        kube.add(machine(name, owner=ms))
        kube.now += timedelta(minutes=1)
    lagging = kube.listers(NS)  # the mirror before the move (the set's scale-down is the same)
    new_owner = {"apiVersion": API_VERSION, "kind": "MachineSet", "name": "web-new", "uid": "uid-of-web-new",
                 "controller": True}  # fmt: skip
    kube.change(MACHINES, "web-moved", NS, lambda o: o["metadata"].update(ownerReferences=[new_owner]))

    run_pass(kube, lagging)

    assert not [w for w in writes(kube) if w[0] == "delete"], "two machines are the set's two replicas"
    assert [a.verb for a in kube.actions if a.resource == MACHINES and a.verb == "list"] == ["list"]


def test_a_scale_down_read_before_a_machine_moved_away_leaves_that_machine() -> None:
    """An in-place update's deployment moves a machine to the new set and scales its old set down
    in the same breath; the old set's pass is woken by its own change before the machines' watch
    shows the move. The DELETE is conditional on what the pass read: the moved machine, no longer
    this set's, stays, and the pass comes back soon to decide on a fresh read."""
    kube = FakeKube([machine_class()])
    ms = finalized_set(kube, 0)
    kube.add(machine("web-moved", owner=ms))
    lagging = kube.listers(NS)  # the mirror before the move
    new_owner = {"apiVersion": API_VERSION, "kind": "MachineSet", "name": "web-new", "uid": "uid-of-web-new",
                 "controller": True}  # fmt: skip
    kube.change(MACHINES, "web-moved", NS, lambda o: o["metadata"].update(ownerReferences=[new_owner]))

    requeue = run_pass(kube, lagging)

    assert kube.get_object(MACHINES, "web-moved", NS) is not None, "a machine of another set now"
    assert [w[0] for w in writes(kube)].count("delete") == 1  # tried, refused by its precondition
    assert requeue is not None and requeue.after <= get_settings().conflict_retry + 0.1
    kube.clear()

    run_pass(kube)  # the mirror caught up: not this set's machine

    assert not [w for w in writes(kube) if w[0] == "delete"]
    assert kube.get_object(MACHINES, "web-moved", NS) is not None
