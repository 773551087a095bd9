"""The lag mode (issue 29 item 6): when the mirror counts as lagging (a table over the informer's lag
hash), and what a MachineSet pass does differently then, on the recording fake with the queue's
expectations and the lag hash in a real Redis: it reads its machines live, ends its pending
expectations on that list instead of waiting for the watch, and wakes its deployment itself when it
writes a new status."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import redis

from mcm_tasks import kinds
from mcm_tasks.api.constants import MCM_FINALIZER, NODE_FINALIZER
from mcm_tasks.controllers.common import lagging_io
from mcm_tasks.controllers.common.lagging import SIGNAL_WINDOW, is_lagging
from mcm_tasks.controllers.machine.classes import reconcile_machine_class
from mcm_tasks.controllers.machine.deletion import reconcile_termination
from mcm_tasks.controllers.machine.reconcile import reconcile_machine
from mcm_tasks.controllers.machinedeployment.reconcile import reconcile_machine_deployment
from mcm_tasks.probes import INFORMER_LAG_KEY_PARTS
from mcm_tasks.queue import expectations
from mcm_tasks.queue.messages import queue_keys
from mcm_tasks.redisdb import get_redis, rkey
from mcm_tasks.settings import configure, get_settings, reset_settings
from tests.kube_fake import FakeKube
from tests.unit.pass_support import machine as machine_for_pass
from tests.unit.pass_support import machine_class as machine_class_for_pass
from tests.unit.pass_support import machine_deployment, node, secret
from tests.unit.test_machineset_pass import MACHINES, NS, SETS, machine, machine_class, machine_set, run_pass

NOW = 1_000_000.0
CLASSES = kinds.MACHINE_CLASS.resource.plural


def lag_hash(seconds: float, at: float = NOW, kind: str = "machines") -> dict[str, str]:
    return {kind: f"{seconds:.3f}", f"{kind}:at": repr(at)}


@pytest.mark.parametrize(
    ("found", "threshold", "lagging"),
    [
        ({}, 2.0, False),  # the informer reported nothing
        (lag_hash(0.0), 2.0, False),  # keeping up
        (lag_hash(1.0), 2.0, False),  # 1 s resolution: a mirror that keeps up can read 1 s
        (lag_hash(3.0), 2.0, True),  # the 3 s watch lag
        (lag_hash(2.0), 2.0, True),  # at the threshold
        (lag_hash(3.0, kind="machinesets"), 2.0, True),
        (lag_hash(3.0, kind="machinedeployments"), 2.0, True),
        (lag_hash(3.0, kind="nodes"), 2.0, True),  # a new machine waits for its Node
        (lag_hash(9.0, kind="secrets"), 2.0, False),  # not a link of the rollout's chain of passes
        (lag_hash(3.0, at=NOW - SIGNAL_WINDOW - 1), 2.0, False),  # an old report is not believed
        (lag_hash(3.0), 0.0, False),  # threshold 0: the lag mode is off
        ({"machines": "x", "machines:at": repr(NOW)}, 2.0, False),  # unreadable: not lagging
        ({"machines": "5"}, 2.0, False),  # no time of the report: not believed
    ],
)
def test_when_the_mirror_lags(found: dict[str, str], threshold: float, lagging: bool) -> None:
    assert is_lagging(found, NOW, threshold) is lagging


@pytest.fixture(autouse=True)
def settings(redis_url: str) -> Iterator[None]:
    configure({"redis_url": redis_url, "namespace": NS})
    lagging_io._cached.clear()
    yield
    lagging_io._cached.clear()
    reset_settings()


def report_lag(seconds: float) -> None:
    """Write the informer's lag hash as the informer does (``informers/runner.py``)."""
    get_redis().hset(rkey(*INFORMER_LAG_KEY_PARTS), mapping=lag_hash(seconds, at=time.time()))
    lagging_io._cached.clear()


def test_the_lag_is_read_from_the_informers_hash_and_the_threshold_setting() -> None:
    assert lagging_io.mirror_lagging(get_settings()) is False
    report_lag(3.0)
    assert lagging_io.mirror_lagging(get_settings()) is True
    configure({"mirror_lag_threshold": "5s"})
    lagging_io._cached.clear()
    assert lagging_io.mirror_lagging(get_settings()) is False


def test_a_redis_that_does_not_answer_reads_as_not_lagging() -> None:
    configure({"redis_url": "redis://127.0.0.1:1/0"})
    assert lagging_io.mirror_lagging(get_settings()) is False


def pending_keys(kind: str) -> set[str]:
    client: redis.Redis = get_redis()
    return {k.decode() if isinstance(k, bytes) else str(k) for k in client.hkeys(queue_keys(kind).pending)}


def test_without_lag_nothing_is_woken_by_a_write() -> None:
    lagging_io.wake(get_settings(), [(lagging_io.Queue.MACHINE_SET, f"{NS}/web")])
    assert pending_keys("machineset") == set()
    report_lag(3.0)
    lagging_io.wake(get_settings(), [(lagging_io.Queue.MACHINE_SET, f"{NS}/web")])
    assert pending_keys("machineset") == {f"{NS}/web"}


def lagging_world() -> tuple[FakeKube, object]:
    """A set of 3 whose last pass created 2 machines (expectations pending, the record closed) that
    the mirror has not seen: its snapshot was taken before they were created."""
    kube = FakeKube([machine_class()])
    ms = kube.add(machine_set(3))
    kube.add(machine("web-a", owner=ms))
    stale = kube.listers(NS)
    kube.add(machine("web-b", owner=ms, phase="Pending"))
    kube.add(machine("web-c", owner=ms, phase="Pending"))
    expectations.expect_creations(f"{NS}/web", 2)
    expectations.issued(f"{NS}/web")
    return kube, stale


def creations(kube: FakeKube) -> int:
    return sum(1 for verb, resource, _, _ in _writes(kube) if verb == "create" and resource == MACHINES)


def _writes(kube: FakeKube) -> list[tuple[str, str, str | None, str | None]]:
    return [(a.verb, a.resource, a.name, a.subresource) for a in kube.writes(SETS, MACHINES)]


def test_a_set_waits_for_its_creations_in_a_mirror_that_keeps_up() -> None:
    kube, stale = lagging_world()
    run_pass(kube, stale)  # type: ignore[arg-type]
    assert creations(kube) == 0
    assert expectations.pending(f"{NS}/web") == (2, 0), "still waiting for the informer"


def test_under_lag_a_set_ends_its_expectations_on_a_live_list_and_creates_nothing_more() -> None:
    kube, stale = lagging_world()
    report_lag(3.0)
    run_pass(kube, stale)  # type: ignore[arg-type]
    assert creations(kube) == 0, "the live list holds the 2 machines the mirror has not seen"
    assert expectations.pending(f"{NS}/web") is None
    assert ("list", MACHINES) in {(a.verb, a.resource) for a in kube.actions}


def test_under_lag_a_set_that_writes_its_status_wakes_its_deployment() -> None:
    kube = FakeKube([machine_class()])
    body = machine_set(1)
    body["metadata"]["ownerReferences"] = [{"apiVersion": "machine.sapcloud.io/v1alpha1",
                                            "kind": "MachineDeployment", "name": "web-md", "uid": "md-uid",
                                            "controller": True}]  # fmt: skip
    ms = kube.add(body)
    kube.add(machine("web-a", owner=ms))
    report_lag(3.0)
    run_pass(kube)
    assert ("update", SETS, "web", "status") in _writes(kube)
    assert pending_keys("machinedeployment") == {f"{NS}/web-md"}


def pending_machine() -> FakeKube:
    """A machine created by its first pass (Pending, its Node named ``m1`` not joined yet)."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    kube = FakeKube([secret(), machine_class_for_pass(), machine_for_pass("m1", creationTimestamp=now)])
    with kube.installed():
        reconcile_machine(f"{NS}/m1")
    return kube


def phase(kube: FakeKube) -> str:
    found = kube.get_object(MACHINES, "m1", NS)
    assert found is not None
    return str(found["status"]["currentStatus"]["phase"])


@pytest.mark.parametrize("lag", [0.0, 3.0])
def test_a_pending_machine_reads_its_node_live_and_polls_for_it_only_under_lag(lag: float) -> None:
    kube = pending_machine()
    report_lag(lag)
    stale = kube.mirror()  # the mirror has neither the Node nor anything after this instant
    with kube.installed(mirror=stale):
        requeue = reconcile_machine(f"{NS}/m1")
    assert phase(kube) == "Pending"
    assert requeue is not None
    poll = get_settings().mirror_lag_node_poll
    assert (requeue.after <= poll) is (lag > 0), "polls for its Node only while the mirror lags"
    kube.add(node("m1"))
    with kube.installed(mirror=stale):
        reconcile_machine(f"{NS}/m1")
    assert phase(kube) == ("Running" if lag else "Pending"), "the joined Node is read from the API server"


@pytest.mark.parametrize("lag", [0.0, 3.0])
def test_a_set_that_creates_machines_wakes_them_only_under_lag(lag: float) -> None:
    kube = FakeKube([machine_class()])
    kube.add(machine_set(2))
    report_lag(lag)
    run_pass(kube)
    made = {f"{NS}/{m['metadata']['name']}" for m in kube.list_objects(MACHINES, NS)}
    assert len(made) == 2
    assert pending_keys("machine") == (made if lag else set())


@pytest.mark.parametrize("lag", [0.0, 3.0])
def test_a_machine_that_joins_wakes_its_set_only_under_lag(lag: float) -> None:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    owner = {"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet", "name": "web",
             "uid": "set-uid", "controller": True}  # fmt: skip
    made = machine_for_pass("m1", creationTimestamp=now, ownerReferences=[owner])
    kube = FakeKube([secret(), machine_class_for_pass(), made])
    with kube.installed():
        reconcile_machine(f"{NS}/m1")  # Pending: a new phase, but no lag yet
    assert pending_keys("machineset") == set()
    report_lag(lag)
    kube.add(node("m1"))
    with kube.installed():
        reconcile_machine(f"{NS}/m1")
    assert phase(kube) == "Running"
    assert pending_keys("machineset") == ({f"{NS}/web"} if lag else set())


@pytest.mark.parametrize("lag", [0.0, 3.0])
def test_a_deployment_that_scales_a_set_wakes_it_only_under_lag(lag: float) -> None:
    kube = FakeKube([machine_deployment(3)])
    report_lag(lag)
    with kube.installed():
        reconcile_machine_deployment(f"{NS}/web")
    (made,) = kube.list_objects(SETS, NS)
    assert pending_keys("machineset") == ({f"{NS}/{made['metadata']['name']}"} if lag else set())


def test_under_lag_a_machine_of_a_new_class_reads_the_class_finalizer_live() -> None:
    """The class pass put the finalizer on a new class; the late mirror has the class without it."""
    kube = FakeKube([secret(), machine_class_for_pass(), machine_for_pass("m1")])
    kube.change(CLASSES, "cls", NS, lambda o: o["metadata"].update(finalizers=[]))
    stale = kube.mirror()
    kube.change(CLASSES, "cls", NS, lambda o: o["metadata"].update(finalizers=[MCM_FINALIZER]))
    report_lag(3.0)
    with kube.installed(mirror=stale):
        reconcile_machine(f"{NS}/m1")
    assert phase(kube) == "Pending", "created without waiting for the class's event"


@pytest.mark.parametrize("lag", [0.0, 3.0])
def test_a_machine_whose_deletion_completes_wakes_its_set_only_under_lag(lag: float) -> None:
    """Already Terminating (its phase written earlier): the pass that takes MCM's finalizer off wakes
    the set, which counts it gone at once instead of when the late DELETE event comes."""
    owner = {"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet", "name": "web",
             "uid": "set-uid", "controller": True}  # fmt: skip
    kube = FakeKube([secret(), machine_class_for_pass(), machine_for_pass("m1", ownerReferences=[owner])])
    with kube.installed():
        reconcile_machine(f"{NS}/m1")
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def terminating(o: dict[str, Any]) -> None:
        o["metadata"]["deletionTimestamp"] = stamp
        o["status"]["currentStatus"]["phase"] = "Terminating"

    kube.change(MACHINES, "m1", NS, terminating)
    kube.add(node("m1", finalizers=[NODE_FINALIZER]))
    report_lag(lag)
    with kube.installed():
        reconcile_termination(f"{NS}/m1")
    assert kube.get_object(MACHINES, "m1", NS) is None
    assert pending_keys("machineset") == ({f"{NS}/web"} if lag else set())


@pytest.mark.parametrize("lag", [0.0, 3.0])
def test_a_new_class_gets_its_finalizer_for_machines_the_late_mirror_lacks_only_under_lag(lag: float) -> None:
    kube = FakeKube([secret(), machine_class_for_pass()])
    kube.change(CLASSES, "cls", NS, lambda o: o["metadata"].update(finalizers=[]))
    stale = kube.mirror()  # before the set created the class's first machine
    kube.add(machine_for_pass("m1"))
    report_lag(lag)
    with kube.installed(mirror=stale):
        reconcile_machine_class(f"{NS}/cls")
    found = kube.get_object(CLASSES, "cls", NS)
    assert found is not None
    assert (MCM_FINALIZER in (found["metadata"].get("finalizers") or [])) is (lag > 0)
