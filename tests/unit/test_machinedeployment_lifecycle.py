"""MachineDeployment lifecycle on the recording fake (tests/kube_fake.py) and a real Redis: rollback, pause →
scale → resume, the autoscaler's trigger-deletion, deletion cascading to zero machines, an empty
selector, an invalid deployment, the InPlaceUpdate strategy, claiming sets and hash collisions."""

from __future__ import annotations

import pytest

from mcm_tasks import kinds
from mcm_tasks.api import MachineSet, dump
from mcm_tasks.api.constants import (
    LAST_REPLICA_CHANGE_BY_SCALER_TIME_ANNOTATION,
    MACHINE_PRIORITY_ANNOTATION,
    MACHINE_TEMPLATE_HASH_LABEL_KEY,
    MARKED_FOR_DELETION_TIME_ANNOTATION,
    MCM_FINALIZER,
    REVISION_ANNOTATION,
    REVISION_HISTORY_ANNOTATION,
    TRIGGER_DELETION_BY_MCM_ANNOTATION,
)
from mcm_tasks.controllers.machinedeployment.hash import machine_set_name, template_hash
from mcm_tasks.kube import ops
from tests.machinedeployment_support import LABELS, World, deployment_body, template


def _progressing(world: World) -> tuple[str, str]:
    d = world.deployment()
    assert d is not None
    cond = next((c for c in d.status.conditions if c.type == "Progressing"), None)
    return ("", "") if cond is None else (str(cond.status), cond.reason)


def test_rollback_to_previous_revision(world: World) -> None:
    world.create(deployment_body("pool", 2))
    world.settle()
    (v1,) = world.sets()
    world.patch({"spec": {"template": template("class-v2")}})
    world.settle()
    world.patch({"spec": {"rollbackTo": {"revision": 0}}})
    world.reconcile()
    d = world.deployment()
    assert d is not None and d.spec.rollback_to is None
    assert d.spec.template.spec.class_.name == "class-v1"
    assert MACHINE_TEMPLATE_HASH_LABEL_KEY not in d.spec.template.metadata.labels
    assert [e["message"] for e in world.events("DeploymentRollback")] == [
        'Rolled back deployment "pool" to revision 1'
    ]
    world.settle()
    again = next(s for s in world.sets() if s.metadata.uid == v1.metadata.uid)
    assert again.spec.replicas == 2 and again.metadata.annotations[REVISION_ANNOTATION] == "3"
    assert again.metadata.annotations[REVISION_HISTORY_ANNOTATION] == "1"


def test_rollback_to_unknown_or_same_revision_only_clears_rollback_to(world: World) -> None:
    world.create(deployment_body("pool", 1))
    world.settle()
    world.patch({"spec": {"rollbackTo": {"revision": 9}}})
    world.reconcile()
    assert world.events("DeploymentRollbackRevisionNotFound")
    world.patch({"spec": {"rollbackTo": {"revision": 1}}})
    world.reconcile()
    assert world.events("DeploymentRollbackTemplateUnchanged")
    d = world.deployment()
    assert d is not None and d.spec.rollback_to is None and d.spec.template.spec.class_.name == "class-v1"


def test_pause_scale_resume(world: World) -> None:
    world.create(deployment_body("pool", 2))
    world.settle()
    world.patch({"spec": {"paused": True, "template": template("class-v2")}})
    world.reconcile()
    assert _progressing(world) == ("Unknown", "DeploymentPaused")
    assert len(world.sets()) == 1  # no rollout while paused
    world.patch({"spec": {"replicas": 4}})
    world.reconcile()
    (only,) = world.sets()
    assert only.spec.replicas == 4  # but scaling happens
    world.patch({"spec": {"paused": False}})
    world.reconcile()
    assert len(world.sets()) == 2
    assert _progressing(world)[1] in ("DeploymentResumed", "NewMachineSetCreated", "MachineSetUpdated")
    world.settle()
    assert _progressing(world) == ("True", "NewMachineSetAvailable")


def test_trigger_deletion_deletes_exactly_the_named_machines(world: World) -> None:
    world.create(deployment_body("pool", 4))
    world.settle()
    names = sorted(m["metadata"]["name"] for m in world.machines())
    doomed = names[1:3]
    marked = "2024-05-06T07:00:00Z"
    value = ",".join([*(f"{n}~{marked}" for n in doomed), "ghost~" + marked, "bad-entry~yesterday"])
    world.patch(
        {
            "metadata": {
                "annotations": {
                    TRIGGER_DELETION_BY_MCM_ANNOTATION: value,
                    LAST_REPLICA_CHANGE_BY_SCALER_TIME_ANNOTATION: "2024-05-06T07:00:05Z",
                }
            },
            "spec": {"replicas": 2},
        }
    )
    world.reconcile()
    d = world.deployment()
    assert d is not None
    assert d.metadata.annotations[TRIGGER_DELETION_BY_MCM_ANNOTATION] == ",".join(
        f"{n}~{marked}" for n in doomed
    )
    for machine in world.machines():
        notes = machine["metadata"].get("annotations") or {}
        if machine["metadata"]["name"] in doomed:
            assert notes[MACHINE_PRIORITY_ANNOTATION] == "1"
            assert notes[MARKED_FOR_DELETION_TIME_ANNOTATION] == marked
        else:
            assert notes.get(MACHINE_PRIORITY_ANNOTATION) != "1"
    world.reconcile_sets()
    assert sorted(m["metadata"]["name"] for m in world.machines()) == [n for n in names if n not in doomed]
    world.reconcile_sets()
    world.reconcile()
    d = world.deployment()
    assert d is not None and TRIGGER_DELETION_BY_MCM_ANNOTATION not in d.metadata.annotations


def test_deletion_cascades_to_zero_machines_and_removes_the_finalizer(world: World) -> None:
    world.create(deployment_body("pool", 3))
    world.settle()
    world.patch({"spec": {"template": template("class-v2")}})
    world.reconcile()  # two sets now
    ops.delete(world.api, kinds.MACHINE_DEPLOYMENT.resource, "pool", world.namespace)
    for _ in range(10):
        if world.deployment() is None:
            break
        world.reconcile()
        world.reconcile_sets()
    assert world.deployment() is None
    assert world.sets() == [] and world.machines() == []


def test_empty_selector_only_records_selecting_all(world: World) -> None:
    body = deployment_body("pool", 2)
    body["spec"]["selector"] = {}
    world.create(body)
    world.reconcile()
    assert world.sets() == []
    assert world.events("SelectingAll")
    d = world.deployment()
    assert d is not None and d.status.observed_generation == d.metadata.generation


def test_invalid_deployment_is_skipped_with_an_event(world: World) -> None:
    body = deployment_body("pool", 2)
    body["spec"]["selector"] = {"matchLabels": {"name": "other"}}
    world.create(body)
    assert world.reconcile() is None
    assert world.sets() == []
    assert world.events("ValidationFailed")
    d = world.deployment()
    assert d is not None
    mcm_types = ("Available", "Progressing", "ReplicaFailure")
    assert [(c.type, c.status, c.reason) for c in d.status.conditions if c.type in mcm_types] == [
        ("ReplicaFailure", "True", "ValidationFailed")
    ]
    # kstatus: an invalid spec is Stalled until someone fixes it
    stalled = next(c for c in d.status.conditions if c.type == "Stalled")
    assert (stalled.status, stalled.reason) == ("True", "ValidationFailed")


@pytest.mark.parametrize("spoil", ["selector", "strategy"])
def test_deleting_a_select_all_or_invalid_deployment_still_removes_its_finalizer(
    world: World, spoil: str
) -> None:
    world.create(deployment_body("pool", 1))
    world.settle()
    if spoil == "selector":
        world.patch({"spec": {"selector": {"matchLabels": None}}})
    else:
        world.patch({"spec": {"strategy": {"type": "Sideways", "rollingUpdate": None}}})
    world.reconcile()
    assert len(world.sets()) == 1
    ops.delete(world.api, kinds.MACHINE_DEPLOYMENT.resource, "pool", world.namespace)
    for _ in range(10):
        if world.deployment() is None:
            break
        world.reconcile()
        world.reconcile_sets()
    assert world.deployment() is None and world.sets() == [] and world.machines() == []


def test_in_place_update_strategy_starts_with_one_full_set(world: World) -> None:
    """InPlaceUpdate is a strategy like the others: a new deployment's only set takes all replicas."""
    world.create(deployment_body("pool", 2, strategy="InPlaceUpdate", surge=1, unavailable=0))
    world.reconcile()
    [only] = world.sets()
    assert only.spec.replicas == 2
    d = world.deployment()
    assert d is not None and MCM_FINALIZER in d.metadata.finalizers
    assert _progressing(world)[1] != "StrategyNotSupported"
    ops.delete(world.api, kinds.MACHINE_DEPLOYMENT.resource, "pool", world.namespace)
    for _ in range(10):
        if world.deployment() is None:
            break
        world.reconcile()
        world.reconcile_sets()
    assert world.deployment() is None


def test_orphan_sets_are_adopted_and_unselected_ones_released(world: World) -> None:
    d = world.create(deployment_body("pool", 1))
    orphan = {
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineSet",
        "metadata": {"name": "orphan", "labels": dict(LABELS)},
        "spec": {"replicas": 0, "selector": {"matchLabels": dict(LABELS)}, "template": template("class-old")},
    }
    ops.create(world.api, kinds.MACHINE_SET.resource, orphan, world.namespace)
    world.reconcile()
    adopted = next(s for s in world.sets() if s.metadata.name == "orphan")
    ref = adopted.metadata.controller_ref()
    assert ref is not None and ref.uid == d.metadata.uid
    ops.patch(
        world.api,
        kinds.MACHINE_SET.resource,
        "orphan",
        {"metadata": {"labels": {"name": "elsewhere"}}},
        world.namespace,
    )
    world.reconcile()
    released = next(s for s in world.sets() if s.metadata.name == "orphan")
    assert released.metadata.controller_ref() is None


def test_adopted_set_and_its_machines_get_the_template_hash_label(world: World) -> None:
    """Upstream ``addHashKeyToISAndMachines``: a set adopted without ``machine-template-hash`` gets it
    on its template, then on its active machines, then on its labels and selector; it keeps its
    machines throughout (none released, none made anew), and the deployment makes no second set."""
    d = world.create(deployment_body("pool", 2, tmpl=template("class-v1")))
    orphan = {
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineSet",
        "metadata": {"name": "orphan", "labels": dict(LABELS)},
        "spec": {"replicas": 2, "selector": {"matchLabels": dict(LABELS)}, "template": template("class-v1")},
    }
    ops.create(world.api, kinds.MACHINE_SET.resource, orphan, world.namespace)
    world.reconcile_sets()
    world.boot()
    world.reconcile_sets()
    before = {m["metadata"]["uid"] for m in world.machines()}
    assert len(before) == 2
    want = template_hash(MachineSet.model_validate(orphan).spec.template, None)

    def labelled() -> bool:
        found = next(s for s in world.sets() if s.metadata.name == "orphan")
        return (found.spec.selector is not None
                and found.spec.selector.match_labels.get("machine-template-hash") == want)  # fmt: skip

    world.settle(until=labelled, rounds=20)
    [adopted] = world.sets()  # no second set: the adopted one is the deployment's new set
    ref = adopted.metadata.controller_ref()
    assert ref is not None and ref.uid == d.metadata.uid
    assert adopted.metadata.labels["machine-template-hash"] == want
    assert adopted.spec.template.metadata.labels["machine-template-hash"] == want
    machines = world.machines_of(adopted)
    assert {m["metadata"]["uid"] for m in machines} == before
    assert all(m["metadata"]["labels"]["machine-template-hash"] == want for m in machines)
    world.settle()
    assert {m["metadata"]["uid"] for m in world.machines()} == before


def test_hash_collision_bumps_collision_count(world: World) -> None:
    body = deployment_body("pool", 1)
    d = world.create(body)
    squatter_name = machine_set_name("pool", template_hash(d.spec.template, None))
    squatter = {
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineSet",
        "metadata": {"name": squatter_name, "labels": {"name": "someone-else"}},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"name": "someone-else"}},
                 "template": {**template("class-other"), "metadata": {"labels": {"name": "someone-else"}}}},
    }  # fmt: skip
    ops.create(world.api, kinds.MACHINE_SET.resource, squatter, world.namespace)
    world.reconcile()
    d2 = world.deployment()
    assert d2 is not None and d2.status.collision_count == 1
    world.reconcile()
    mine = [s for s in world.sets() if s.metadata.name != squatter_name]
    assert len(mine) == 1 and mine[0].metadata.name == machine_set_name(
        "pool", template_hash(d.spec.template, 1)
    )
    assert isinstance(mine[0], MachineSet) and dump(mine[0])["spec"]["replicas"] == 1
