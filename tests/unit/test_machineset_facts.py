"""A MachineSet pass's facts about each machine (``machineset/facts.py``): each fact answers as the
function it stands for, the census groups the machines as the plan, the status and the conditions
read them, and a pass decides a machine's facts once per version of it (issue 28: a pass's cost
follows the machines that changed, not the size of the set)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mcm_tasks import kinds
from mcm_tasks.api import API_VERSION, Machine, MachineSet, dump
from mcm_tasks.api.constants import (
    MACHINE_PRIORITY_ANNOTATION,
    MARKED_FOR_DELETION_TIME_ANNOTATION,
    MCM_FINALIZER,
    NODE_LABEL_KEY,
    PRESERVE_ANNOTATION,
    UPDATE_RESULT_LABEL_KEY,
)
from mcm_tasks.cache.models import get_parsed_cache
from mcm_tasks.controllers.common import preservation
from mcm_tasks.controllers.common.holdup import machine_wait, wait_of
from mcm_tasks.controllers.common.owners import claim_action
from mcm_tasks.controllers.machineset import reconcile
from mcm_tasks.controllers.machineset.facts import FACTS, census_of, direct, facts_of, set_identity
from mcm_tasks.controllers.machineset.reconcile import _is_candidate_raw, machine_set_pass
from mcm_tasks.controllers.machineset.replicas import is_failed, is_terminating
from mcm_tasks.controllers.machineset.scope import MachineSetScope
from mcm_tasks.controllers.machineset.status import is_fully_labeled
from mcm_tasks.settings import configure, get_settings, reset_settings
from tests.kube_fake import FakeKube

NS = "shoot--facts"
NOW = datetime(2026, 11, 29, 7, 0, tzinfo=UTC)
STAMP = "2026-11-29T06:00:00Z"
LATER = "2026-11-29T08:00:00Z"
SET_UID = "uid-web"


def a_set(*, deleting: bool = False, selector: dict[str, str] | None = None) -> MachineSet:
    meta: dict[str, Any] = {"name": "web", "namespace": NS, "uid": SET_UID}
    if deleting:
        meta["deletionTimestamp"] = STAMP
    return MachineSet.model_validate({
        "apiVersion": API_VERSION, "kind": "MachineSet", "metadata": meta,
        "spec": {"replicas": 3, "selector": {"matchLabels": selector or {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web", "tier": "t"}},
                              "spec": {"class": {"kind": "MachineClass", "name": "cls"}}}},
    })  # fmt: skip


def raw_machine(
    name: str,
    *,
    owner: str | None = SET_UID,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    phase: str = "Running",
    deleting: bool = False,
    namespace: str = NS,
    operation: str = "Successful",
    expiry: str | None = None,
    provider_id: str = "",
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                            "labels": {"app": "web", "tier": "t"} if labels is None else labels,
                            "annotations": annotations or {}, "creationTimestamp": STAMP}  # fmt: skip
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": API_VERSION, "kind": "MachineSet", "name": "web",
                                    "uid": owner, "controller": True}]  # fmt: skip
    if deleting:
        meta["deletionTimestamp"] = STAMP
    current: dict[str, Any] = {"phase": phase, "lastUpdateTime": STAMP} if phase else {}
    if expiry is not None:
        current["preserveExpiryTime"] = expiry
    operation_of = {"state": operation, "description": "d", "lastUpdateTime": STAMP}
    spec: dict[str, Any] = {"class": {"kind": "MachineClass", "name": "cls"}}
    if provider_id:
        spec["providerID"] = provider_id
    return {"apiVersion": API_VERSION, "kind": "Machine", "metadata": meta, "spec": spec,
            "status": {"currentStatus": current, "lastOperation": operation_of}}  # fmt: skip


#: machines that each make some fact differ from the plain Running one
MACHINES: dict[str, dict[str, Any]] = {
    "running": raw_machine("running", labels={"app": "web", "tier": "t", NODE_LABEL_KEY: "n1"}),
    "pending": raw_machine("pending", phase="Pending", provider_id="local:///a"),
    "new": raw_machine("new", phase=""),
    "available": raw_machine("available", phase="Available"),
    "deleting": raw_machine("deleting", deleting=True),
    "terminating-phase": raw_machine("terminating-phase", phase="Terminating"),
    "failed": raw_machine(
        "failed", phase="Failed", operation="Failed", labels={"app": "web", NODE_LABEL_KEY: "n"}
    ),
    "failed-deleting": raw_machine("failed-deleting", phase="Failed", deleting=True),
    "orphan-selected": raw_machine("orphan-selected", owner=None),
    "orphan-other": raw_machine("orphan-other", owner=None, labels={"app": "db"}),
    "orphan-deleting": raw_machine("orphan-deleting", owner=None, deleting=True),
    "unselected": raw_machine("unselected", labels={"app": "db"}),
    "someone-elses": raw_machine("someone-elses", owner="uid-other"),
    "other-namespace": raw_machine("other-namespace", namespace="elsewhere"),
    "partly-labeled": raw_machine("partly-labeled", labels={"app": "web"}),
    "auto-preserved": raw_machine(
        "auto-preserved", phase="Failed", annotations={PRESERVE_ANNOTATION: "auto-preserved"}
    ),
    "preserved-now": raw_machine("preserved-now", annotations={PRESERVE_ANNOTATION: "now"}, expiry=LATER),
    "preserved-expired": raw_machine(
        "preserved-expired", phase="Failed", annotations={PRESERVE_ANNOTATION: "when-failed"}, expiry=STAMP
    ),
    "node-preserved": raw_machine(
        "node-preserved",
        phase="Failed",
        annotations={preservation.LAST_APPLIED_NODE_PRESERVE_ANNOTATION: "now"},
    ),
    "preserve-false": raw_machine("preserve-false", annotations={PRESERVE_ANNOTATION: "false"}),
    "triggered": raw_machine(
        "triggered",
        annotations={MACHINE_PRIORITY_ANNOTATION: "1", MARKED_FOR_DELETION_TIME_ANNOTATION: STAMP},
    ),
    "priority-2": raw_machine("priority-2", annotations={MACHINE_PRIORITY_ANNOTATION: "2"}),
    "in-transfer": raw_machine(
        "in-transfer", labels={"app": "web", "tier": "t", UPDATE_RESULT_LABEL_KEY: "x"}
    ),
}
SETS = {"set": a_set(), "deleting-set": a_set(deleting=True), "other-selector": a_set(selector={"tier": "t"})}


@pytest.mark.parametrize("set_name", list(SETS))
@pytest.mark.parametrize("name", list(MACHINES))
def test_each_fact_answers_as_the_function_it_stands_for(name: str, set_name: str) -> None:
    raw, machine_set = MACHINES[name], SETS[set_name]
    machine = Machine.model_validate(raw)
    f = facts_of(machine, machine_set)
    assert f.candidate == _is_candidate_raw(raw, machine_set)
    assert f.claim == claim_action(machine.metadata, machine_set.metadata, machine_set.spec.selector)
    assert f.phase == machine.status.current_status.phase
    assert f.terminating == is_terminating(machine)
    assert f.deleting == machine.metadata.is_deleting
    assert f.failed == is_failed(machine)
    assert f.wait == wait_of(machine)
    assert machine_wait(machine, NOW) == (None if f.wait is None else f.wait.at(NOW))
    assert f.failed_operation == (machine.status.last_operation.state == "Failed")
    assert f.fully_labeled == is_fully_labeled(machine, machine_set.spec.template.metadata.labels)
    assert f.auto_preserved == preservation.is_auto_preserved(machine)
    assert f.has_expiry == (machine.status.current_status.preserve_expiry_time is not None)
    assert f.triggered == (machine.metadata.annotations.get(MACHINE_PRIORITY_ANNOTATION) == "1")
    assert f.in_transfer == (UPDATE_RESULT_LABEL_KEY in machine.metadata.labels)
    assert f.node_name == machine.metadata.labels.get(NODE_LABEL_KEY, "")
    if not f.preserving:  # the census looks for preserved machines among the ``preserving`` ones only
        for when in (NOW - timedelta(days=1), NOW, NOW + timedelta(days=1)):
            assert not preservation.is_preserved(machine, when)


def test_the_census_groups_the_machines_in_their_order() -> None:
    machines = [Machine.model_validate(raw) for raw in MACHINES.values()]
    census = census_of(machines, direct(a_set()))

    def names(group: tuple[Machine, ...]) -> list[str]:
        return [m.metadata.name or "" for m in group]

    going = ("deleting", "terminating-phase", "failed-deleting", "orphan-deleting")
    assert names(census.active) == [n for n in MACHINES if n not in going]
    assert census.in_transfer
    assert names(census.triggered) == ["triggered"]
    assert names(census.failed) == ["failed", "auto-preserved", "preserved-expired", "node-preserved"]
    assert names(census.failed_operation) == ["failed"]
    assert names(census.preserved_failed_candidates) == [
        "auto-preserved",
        "preserved-expired",
        "node-preserved",
    ]
    assert names(census.deleting) == ["deleting", "failed-deleting", "orphan-deleting"]
    assert [w.name for w in census.deleting_waits] == names(census.deleting)
    assert [w.name for w in census.waiting] == ["pending", "new", "available", "terminating-phase", "failed",
                                     "auto-preserved", "preserved-expired", "node-preserved"]  # fmt: skip
    assert names(census.expiring) == ["preserved-now", "preserved-expired"]
    # nine machines in another phase (a deleting Running one counts, as in MCM's status)
    assert census.running == len(MACHINES) - 9 and census.available == census.running + 1
    # "failed", "orphan-other", "unselected" and "partly-labeled" lack a template label
    assert census.fully_labeled == len(MACHINES) - 4
    assert census.auto_preserved == 1 and census.live == len(MACHINES) - 3


def test_the_facts_are_cached_under_what_they_depend_on_of_the_set() -> None:
    assert set_identity(a_set()) == set_identity(a_set())
    assert len({set_identity(s) for s in SETS.values()}) == len(SETS)


# --- whole passes ------------------------------------------------------------------------------------------


@pytest.fixture()
def namespace(redis_url: str) -> Iterator[str]:
    ns = f"facts-{uuid.uuid4().hex[:8]}"  # the process's parsed-object cache holds no machine of it
    configure({"redis_url": redis_url, "namespace": ns})
    yield ns
    reset_settings()


def set_with_machines(namespace: str, count: int, *, labelled: bool = False) -> FakeKube:
    """A fake holding the set ``web`` and ``count`` Running machines of it (``labelled``: each with
    its Node's label, as a machine that joined)."""
    kube = FakeKube()
    body = dump(a_set())
    body["metadata"] = {"name": "web", "namespace": namespace, "finalizers": [MCM_FINALIZER]}
    body["spec"]["replicas"] = count
    uid = kube.add(body)["metadata"]["uid"]
    width = len(str(count - 1))
    for i in range(count):
        name = f"web-{i:0{max(width, 2)}d}"
        labels = {"app": "web", "tier": "t", NODE_LABEL_KEY: name} if labelled else None
        kube.add(raw_machine(name, owner=uid, namespace=namespace, labels=labels))
    return kube


def pass_scope(kube: FakeKube, namespace: str) -> MachineSetScope:
    """The scope of the next pass over ``web``, read from the fake."""
    raw = kube.get_object(kinds.MACHINE_SET.resource.plural, "web", namespace)
    assert raw is not None
    return MachineSetScope(key=f"{namespace}/web", obj=MachineSet.model_validate(raw),
                           settings=get_settings(), listers=kube.listers(namespace),
                           clients=(kube, kube), now=NOW, clock=lambda: NOW)  # fmt: skip


def test_a_pass_decides_each_machine_once_per_version_of_it(
    namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three passes over a set of 20 Running machines: the first decides every machine, the second
    (nothing changed) none, the third only the machine that changed meanwhile."""
    decided: list[str] = []

    def counting(machine: Machine, machine_set: MachineSet) -> Any:
        decided.append(machine.metadata.name or "")
        return facts_of(machine, machine_set)

    monkeypatch.setattr(reconcile, "facts_of", counting)
    kube = set_with_machines(namespace, 20)

    def run() -> None:
        machine_set_pass(pass_scope(kube, namespace))

    run()
    assert sorted(decided) == [f"web-{i:02d}" for i in range(20)]
    decided.clear()
    run()
    assert decided == []

    def stop(obj: dict[str, Any]) -> None:
        obj["status"]["currentStatus"]["phase"] = "Unknown"

    kube.change(kinds.MACHINE.resource.plural, "web-07", namespace, stop)
    run()
    assert decided == ["web-07"]
    written = kube.get_object(kinds.MACHINE_SET.resource.plural, "web", namespace)
    assert written is not None and written["status"]["readyReplicas"] == 19


def test_a_pass_over_unchanged_machines_leaves_the_garbage_collector_alone(namespace: str) -> None:
    """A pass that finds nothing changed allocates nothing per machine that the cyclic garbage
    collector tracks: at 10 000 machines a (machine, facts) pair per machine and reader set off 26
    collections a pass, and the pairs surviving it fed the full collections, which walk every
    object a worker holds (``bench/machineset_pass.py``'s ``steady_run``). The count of young
    collections during a steady pass over 3000 machines stays below what one tracked object per
    machine would cause (3000 / 700 per collection)."""
    import gc

    kube = set_with_machines(namespace, 3000, labelled=True)

    def scope() -> MachineSetScope:
        return pass_scope(kube, namespace)

    machine_set_pass(scope())  # parses and decides every machine
    machine_set_pass(scope())  # the status settled
    collections = [0]

    def count(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            collections[0] += 1

    ready = scope()
    gc.collect()
    gc.callbacks.append(count)
    try:
        machine_set_pass(ready)
    finally:
        gc.callbacks.remove(count)
    assert collections[0] <= 2, f"{collections[0]} collections in a pass over 3000 unchanged machines"


def test_a_pass_looks_each_machines_facts_up_in_the_cache_once(
    namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The candidate filter hands its facts reader to the rest of the pass: the claim and the census
    find each machine's facts there, not through another lookup in the parsed-object cache (at
    10 000 machines a lookup per machine and reader, on every pass)."""
    kube = set_with_machines(namespace, 30, labelled=True)
    machine_set_pass(pass_scope(kube, namespace))
    cache = get_parsed_cache()
    looked: list[str] = []
    derived = cache.derived

    def counting(obj: Any, name: str, compute: Any) -> Any:
        if name.startswith(FACTS):
            looked.append(obj.metadata.name)
        return derived(obj, name, compute)

    monkeypatch.setattr(cache, "derived", counting)
    machine_set_pass(pass_scope(kube, namespace))
    assert sorted(looked) == sorted(set(looked)) and len(looked) == 30, looked
