"""Whole passes of the MachineDeployment controller (``reconcile_machine_deployment``, the
``machinedeployment`` queue's entry) on the recording fake (tests/kube_fake.py): a deployment and
its sets in, one pass run in-process, the recorded writes out. What the MachineSet controller would
do between passes (machines made, their status counted) the test writes into the fake itself."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mcm_tasks.api import API_VERSION
from mcm_tasks.api.constants import PREFER_NO_SCHEDULE_KEY
from mcm_tasks.controllers.machinedeployment.reconcile import reconcile_machine_deployment
from mcm_tasks.queue import Requeue
from mcm_tasks.settings import configure, get_settings, reset_settings
from tests.kube_fake import FakeKube
from tests.unit.pass_support import DEPLOYMENTS, MACHINES, NS, SETS, Obj, machine, machine_deployment

KEY = f"{NS}/web"


@pytest.fixture(autouse=True)
def settings(redis_url: str) -> Iterator[None]:
    configure({"redis_url": redis_url, "namespace": NS})
    yield
    reset_settings()


def writes(kube: FakeKube) -> list[tuple[str, str, str | None, str | None]]:
    return [(a.verb, a.resource, a.name, a.subresource) for a in kube.writes(DEPLOYMENTS, SETS, MACHINES)]


def first_set(kube: FakeKube, available: bool = True) -> Obj:
    """The deployment's first pass (its set made), then what the MachineSet controller and its
    machines would have done meanwhile: the set's machines Running and counted in its status."""
    with kube.installed():
        reconcile_machine_deployment(KEY)
    (ms,) = kube.list_objects(SETS, NS)
    name, replicas = ms["metadata"]["name"], ms["spec"]["replicas"]
    for i in range(replicas):
        kube.add(owned_machine(f"{name}-{i}", ms))
    counted = replicas if available else 0
    kube.change(SETS, name, NS, lambda o: o.update(status={
        "replicas": replicas, "fullyLabeledReplicas": replicas, "readyReplicas": counted,
        "availableReplicas": counted, "observedGeneration": o["metadata"]["generation"]}))  # fmt: skip
    kube.clear()
    return kube.get_object(SETS, name, NS) or {}


def owned_machine(name: str, ms: Obj, phase: str = "Running") -> Obj:
    """A machine of the set ``ms``, as the MachineSet controller makes them."""
    owner = {"apiVersion": API_VERSION, "kind": "MachineSet", "name": ms["metadata"]["name"],
             "uid": ms["metadata"]["uid"], "controller": True}  # fmt: skip
    made = machine(name, labels=dict(ms["spec"]["template"]["metadata"]["labels"]), finalizers=True,
                   ownerReferences=[owner], status={"currentStatus": {"phase": phase}})  # fmt: skip
    made["spec"] = ms["spec"]["template"]["spec"]
    return made


def new_template(kube: FakeKube, class_name: str = "cls-v2") -> None:
    """The user changes the machines' class: a new template, a rollout."""
    kube.change(DEPLOYMENTS, "web", NS,
                lambda o: o["spec"]["template"]["spec"]["class"].update(name=class_name))  # fmt: skip


def set_status(kube: FakeKube, name: str, replicas: int, available: int) -> None:
    """What the MachineSet controller writes of its machines."""
    kube.change(SETS, name, NS, lambda o: o.update(status={
        "replicas": replicas, "fullyLabeledReplicas": replicas, "readyReplicas": available,
        "availableReplicas": available, "observedGeneration": o["metadata"]["generation"]}))  # fmt: skip


def replicas(kube: FakeKube) -> dict[str, int]:
    """Each set's spec.replicas, by class (old: ``cls``, new: ``cls-v2``)."""
    return {
        s["spec"]["template"]["spec"]["class"]["name"]: s["spec"]["replicas"]
        for s in kube.list_objects(SETS, NS)
    }


def run_pass(kube: FakeKube) -> Requeue | None:
    kube.clear()
    with kube.installed():
        return reconcile_machine_deployment(KEY)


def test_a_new_deployment_gets_its_finalizer_and_a_full_machine_set() -> None:
    kube = FakeKube([machine_deployment(3)])

    requeue = run_pass(kube)

    assert writes(kube) == [
        ("patch", DEPLOYMENTS, "web", None),  # MCM's finalizer
        ("create", SETS, kube.list_objects(SETS, NS)[0]["metadata"]["name"], None),
        ("patch", DEPLOYMENTS, "web", None),  # the revision annotation
        ("update", DEPLOYMENTS, "web", "status"),
    ]
    assert replicas(kube) == {"cls": 3}
    (ms,) = kube.list_objects(SETS, NS)
    assert (
        ms["metadata"]["ownerReferences"][0]["uid"]
        == kube.get_object(DEPLOYMENTS, "web", NS)["metadata"]["uid"]
    )
    assert requeue is not None and requeue.after == get_settings().short_retry  # not complete yet


def test_a_rolling_update_surges_one_new_machine_and_keeps_every_old_one() -> None:
    """maxSurge 1, maxUnavailable 0: the new set gets one machine; no old one goes before it is
    available; the old set is marked so its nodes get the PreferNoSchedule taint."""
    kube = FakeKube([machine_deployment(3, surge=1, unavailable=0)])
    old = first_set(kube)
    new_template(kube)

    run_pass(kube)

    assert replicas(kube) == {"cls": 3, "cls-v2": 1}
    old_now = kube.get_object(SETS, old["metadata"]["name"], NS)
    assert old_now is not None and old_now["metadata"]["annotations"][PREFER_NO_SCHEDULE_KEY] == "True"
    assert not kube.writes(MACHINES)
    status = kube.get_object(DEPLOYMENTS, "web", NS)["status"]  # type: ignore[index]
    assert status["updatedReplicas"] == 0 and status["availableReplicas"] == 3


def test_a_rolling_update_scales_the_old_set_down_once_a_new_machine_is_available() -> None:
    kube = FakeKube([machine_deployment(3, surge=1, unavailable=0)])
    old = first_set(kube)
    new_template(kube)
    run_pass(kube)
    (new,) = [s for s in kube.list_objects(SETS, NS) if s["metadata"]["name"] != old["metadata"]["name"]]
    kube.add(owned_machine(f"{new['metadata']['name']}-0", new))
    set_status(kube, new["metadata"]["name"], 1, 1)

    run_pass(kube)

    assert replicas(kube) == {"cls": 2, "cls-v2": 1}  # 4 available would exceed 3 + maxSurge 1 no more
    assert ("patch", SETS, old["metadata"]["name"], None) in writes(kube)


def test_a_recreate_scales_every_old_machine_away_before_making_a_new_set() -> None:
    kube = FakeKube([machine_deployment(3, strategy="Recreate")])
    old = first_set(kube)
    new_template(kube)

    run_pass(kube)

    assert replicas(kube) == {"cls": 0}  # no new set while an old machine exists
    assert not [w for w in writes(kube) if w[0] == "create"]

    # the set's status says none is left, but its machines are still being drained and deleted:
    # Recreate counts machine objects, so old and new never run together
    set_status(kube, old["metadata"]["name"], 0, 0)
    run_pass(kube)
    assert replicas(kube) == {"cls": 0}

    for i in range(3):  # their deletion flows end
        del kube.objects[(MACHINES, NS, f"{old['metadata']['name']}-{i}")]

    run_pass(kube)

    assert replicas(kube) == {"cls": 0, "cls-v2": 3}  # the new set at full size at once
