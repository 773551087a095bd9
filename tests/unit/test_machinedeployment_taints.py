"""What a MachineDeployment does to Nodes and to its own conditions, on the recording fake
(tests/kube_fake.py) and a real Redis: the PreferNoSchedule taint and the cluster-autoscaler's scale-down
protection coming off again (rollback, completed rollout), the Progressing reason
FoundNewMachineSet, and a node template change reaching the Machines and
their Nodes without a rollout (through the real machine reconcile).
MachineSetCreateError needs the sandbox API server (its fault injection and name validation):
tests/integration/test_machinedeployment_api_server.py."""

from __future__ import annotations

import json

from mcm_sandbox.procs import wait_until
from mcm_tasks import kinds
from mcm_tasks.api import MachineSet, Obj
from mcm_tasks.api.constants import (
    CA_SCALE_DOWN_DISABLED_ANNOTATION,
    CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION,
    LAST_APPLIED_ANNO_LABELS_TAINTS_ANNOTATION,
    MACHINE_PRIORITY_ANNOTATION,
    PREFER_NO_SCHEDULE_KEY,
    REVISION_ANNOTATION,
)
from mcm_tasks.controllers.machine.reconcile import reconcile_machine
from mcm_tasks.controllers.machinedeployment.hash import has_hash_key
from mcm_tasks.kube import ops
from tests.machinedeployment_support import (
    LABELS,
    World,
    _annotations,
    _joined,
    _local_class,
    _mcm_protected,
    _node_names,
    deployment_body,
    template,
)

#: a taint someone else put on a node: the deployment must never touch it
FOREIGN_TAINT: Obj = {"key": "dedicated", "value": "infra", "effect": "NoSchedule"}


# --- helpers ---------------------------------------------------------------------------------------------


def _taints(node: Obj | None) -> list[Obj]:
    return list(((node or {}).get("spec") or {}).get("taints") or [])


def _has_prefer_no_schedule(node: Obj | None) -> bool:
    return any(
        t.get("key") == PREFER_NO_SCHEDULE_KEY and t.get("effect") == "PreferNoSchedule"
        for t in _taints(node)
    )


def _labels(obj: Obj | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("labels") or {})


def _set(world: World, uid: str | None) -> MachineSet:
    return next(s for s in world.sets() if s.metadata.uid == uid)


def _progressing(world: World) -> tuple[str, str, str]:
    d = world.deployment()
    assert d is not None
    cond = next((c for c in d.status.conditions if c.type == "Progressing"), None)
    return ("", "", "") if cond is None else (str(cond.status), cond.reason, cond.message)


def _annotate_machine(world: World, name: str, annotations: dict[str, str]) -> None:
    ops.patch(
        world.api, kinds.MACHINE.resource, name, {"metadata": {"annotations": annotations}}, world.namespace
    )


def _half_rolled_out(world: World, v1: MachineSet) -> None:
    """Change the class (a rollout) and run the controllers until the old set ``v1`` has lost some
    of its machines but still holds at least two."""
    world.patch({"spec": {"template": template("class-v2")}})

    def part_way() -> bool:
        remaining = len(world.machines_of(v1))
        return 2 <= remaining < v1.spec.replicas

    world.settle(until=part_way)
    assert len(world.sets()) == 2, world.describe()


# --- 1. the PreferNoSchedule taint and the scale-down protection come off again ---------------------------


def test_rollback_takes_the_taint_off_the_nodes_of_the_set_rolled_back_to(world: World) -> None:
    world.create(deployment_body("pool", 4, surge=1, unavailable=1))
    world.settle()
    (v1,) = world.sets()
    # keep one machine of v1 to the end (deleted last) and put someone else's taint on its node
    keeper = _node_names(world, v1)[0]
    _annotate_machine(world, keeper, {MACHINE_PRIORITY_ANNOTATION: "5"})
    ops.patch(world.api, kinds.NODE.resource, keeper, {"spec": {"taints": [FOREIGN_TAINT]}})

    _half_rolled_out(world, v1)
    v1_nodes = _node_names(world, v1)
    assert keeper in v1_nodes
    # the rollout tainted the old set's nodes and marked the set
    assert all(_has_prefer_no_schedule(world.node(n)) for n in v1_nodes), v1_nodes
    assert _set(world, v1.metadata.uid).metadata.annotations.get(PREFER_NO_SCHEDULE_KEY) == "True"

    world.patch({"spec": {"rollbackTo": {"revision": 0}}})
    world.reconcile()  # the rollback pass alone: it must untaint, not a later rollout pass

    d = world.deployment()
    assert d is not None and d.spec.rollback_to is None and d.spec.template.spec.class_.name == "class-v1"
    for name in v1_nodes:
        assert not _has_prefer_no_schedule(world.node(name)), (name, _taints(world.node(name)))
    assert PREFER_NO_SCHEDULE_KEY not in _set(world, v1.metadata.uid).metadata.annotations
    assert FOREIGN_TAINT in _taints(world.node(keeper))  # only our taint came off

    # the rollout back to v1 then taints the set that became old (v2) and leaves v1's nodes alone
    world.settle()
    v2 = next(s for s in world.sets() if s.metadata.uid != v1.metadata.uid)
    assert v2.metadata.annotations.get(PREFER_NO_SCHEDULE_KEY) == "True"
    v1_now = _set(world, v1.metadata.uid)
    assert PREFER_NO_SCHEDULE_KEY not in v1_now.metadata.annotations
    for name in _node_names(world, v1_now):
        assert not _has_prefer_no_schedule(world.node(name)), name
    assert keeper in _node_names(world, v1_now)


def test_completed_rollout_untaints_a_once_old_new_set_and_ends_scale_down_protection(world: World) -> None:
    world.create(deployment_body("pool", 4, surge=1, unavailable=1))
    world.settle()
    (v1,) = world.sets()
    # this machine is deleted last; its node carries a scale-down protection of someone else's
    keeper = _node_names(world, v1)[0]
    _annotate_machine(world, keeper, {MACHINE_PRIORITY_ANNOTATION: "5"})
    ops.patch(
        world.api,
        kinds.NODE.resource,
        keeper,
        {"metadata": {"annotations": {CA_SCALE_DOWN_DISABLED_ANNOTATION: "true"}}},
    )

    _half_rolled_out(world, v1)
    v1_nodes = _node_names(world, v1)
    ours = [n for n in v1_nodes if n != keeper]
    assert keeper in v1_nodes and ours
    assert all(_has_prefer_no_schedule(world.node(n)) for n in v1_nodes)
    # during the rollout MCM protects the nodes from the autoscaler, but not over a user's protection
    assert all(
        _annotations(world.node(n)).get(CA_SCALE_DOWN_DISABLED_ANNOTATION) == "true"
        and _mcm_protected(world.node(n))
        for n in ours
    )
    assert not _mcm_protected(world.node(keeper))

    # the template goes back to v1's (an edit, not rollbackTo): v1 is the new set again
    world.patch({"spec": {"template": template("class-v1")}})
    world.reconcile()
    new = _set(world, v1.metadata.uid)
    (v2,) = [s for s in world.sets() if s.metadata.uid != v1.metadata.uid]
    assert new.metadata.annotations[REVISION_ANNOTATION] == "3"
    # not complete yet: v1's nodes keep the taint until the rollout completes
    assert all(_has_prefer_no_schedule(world.node(n)) for n in v1_nodes)
    assert new.metadata.annotations.get(PREFER_NO_SCHEDULE_KEY) == "True"

    seen_protected: set[str] = set()

    def done() -> bool:
        for machine in world.machines():
            name = machine["metadata"]["name"]
            if _mcm_protected(world.node(name)):
                seen_protected.add(name)
        return world.complete()

    world.settle(until=done)

    v1_now = _set(world, v1.metadata.uid)
    assert (v1_now.spec.replicas, _set(world, v2.metadata.uid).spec.replicas) == (4, 0)
    final_nodes = _node_names(world, v1_now)
    assert set(v1_nodes) <= set(final_nodes)  # the once-old machines are part of the new set
    for name in final_nodes:
        node = world.node(name)
        assert not _has_prefer_no_schedule(node), (name, _taints(node))
    assert PREFER_NO_SCHEDULE_KEY not in v1_now.metadata.annotations
    # the protection MCM put on comes off everywhere once the rollout is complete ...
    assert set(ours) <= seen_protected
    for name in final_nodes:
        if name == keeper:
            continue
        notes = _annotations(world.node(name))
        assert CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION not in notes, (name, notes)
        assert CA_SCALE_DOWN_DISABLED_ANNOTATION not in notes, (name, notes)
    # ... and a user's protection (no MCM marker) stays
    assert _annotations(world.node(keeper)).get(CA_SCALE_DOWN_DISABLED_ANNOTATION) == "true"
    assert not _mcm_protected(world.node(keeper))


# --- 2. Progressing reasons ------------------------------------------------------------------------------


def test_an_adopted_set_with_the_template_is_found_as_the_new_set(world: World) -> None:
    orphan = {
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineSet",
        "metadata": {"name": "pool-adopted", "labels": dict(LABELS)},
        "spec": {"replicas": 0, "selector": {"matchLabels": dict(LABELS)}, "template": template()},
    }
    ops.create(world.api, kinds.MACHINE_SET.resource, orphan, world.namespace)
    world.create(deployment_body("pool", 2))
    # the adopted set first gets the machine-template-hash label (addHashKeyToISAndMachines), a step
    # a pass; the deployment's passes wait for it
    world.settle(boot=False, until=lambda: all(has_hash_key(s) for s in world.sets()), rounds=10)
    world.reconcile()

    (only,) = world.sets()
    assert only.metadata.name == "pool-adopted"  # adopted and found: no set created
    d = world.deployment()
    assert d is not None
    ref = only.metadata.controller_ref()
    assert ref is not None and ref.uid == d.metadata.uid
    assert _progressing(world) == ("True", "FoundNewMachineSet", 'Found new machine set "pool-adopted"')
    assert only.metadata.annotations[REVISION_ANNOTATION] == "1"
    assert d.metadata.annotations[REVISION_ANNOTATION] == "1"

    world.settle()
    assert [s.metadata.name for s in world.sets()] == ["pool-adopted"]
    assert _progressing(world)[:2] == ("True", "NewMachineSetAvailable")


# --- 3. the node template reaches the machines and their nodes without a rollout --------------------------


def _reconcile_machines(world: World) -> None:
    for machine in world.machines():
        reconcile_machine(f"{world.namespace}/{machine['metadata']['name']}")


def _node_template(labels: dict[str, str | None], annotations: dict[str, str], taints: list[Obj]) -> Obj:
    return {"metadata": {"labels": labels, "annotations": annotations}, "spec": {"taints": taints}}


def _carries(
    node: Obj | None, labels: dict[str, str], annotations: dict[str, str], taints: list[Obj]
) -> bool:
    node_labels, node_annotations = _labels(node), _annotations(node)
    return (
        all(node_labels.get(k) == v for k, v in labels.items())
        and all(node_annotations.get(k) == v for k, v in annotations.items())
        and all(t in _taints(node) for t in taints)
    )


def test_node_template_change_reaches_machines_and_nodes_without_a_rollout(world: World) -> None:
    _local_class(world, "class-v1")
    before = _node_template(
        {"tier": "a", "retired": "soon"},
        {"team": "x"},
        [{"key": "pool", "value": "a", "effect": "NoSchedule"}],
    )
    world.create(deployment_body("pool", 2, tmpl=template("class-v1", nodeTemplate=before)))
    world.settle()
    (ms,) = world.sets()
    machines = {m["metadata"]["name"]: m["metadata"]["uid"] for m in world.machines()}
    assert len(machines) == 2
    for name in machines:
        _joined(world, name)
    _reconcile_machines(world)
    for name in machines:
        node = world.node(name)
        assert _carries(
            node,
            {"tier": "a", "retired": "soon"},
            {"team": "x"},
            [{"key": "pool", "value": "a", "effect": "NoSchedule"}],
        ), node
        assert LAST_APPLIED_ANNO_LABELS_TAINTS_ANNOTATION in _annotations(node)
    # the machine controller kept them Running (the health check saw Ready nodes)
    assert {m["status"]["currentStatus"]["phase"] for m in world.machines()} == {"Running"}

    after_labels, after_annotations = {"tier": "b"}, {"team": "y"}
    after_taints = [
        {"key": "pool", "value": "b", "effect": "NoSchedule"},
        {"key": "gpu", "value": "true", "effect": "PreferNoSchedule"},
    ]
    # a merge patch: the label no longer wanted is removed with null
    changed = _node_template({**after_labels, "retired": None}, after_annotations, after_taints)
    world.patch({"spec": {"template": template("class-v1", nodeTemplate=changed)}})
    d = world.deployment()
    assert d is not None and d.spec.template.spec.node_template is not None
    assert d.spec.template.spec.node_template.metadata.labels == after_labels

    # MachineDeployment → MachineSet, in place
    world.reconcile()
    (same,) = world.sets()
    assert same.metadata.uid == ms.metadata.uid
    assert same.metadata.annotations[REVISION_ANNOTATION] == "1"
    template_now = same.spec.template.spec.node_template
    assert template_now is not None and template_now.metadata.labels == after_labels
    # MachineSet → Machines, in place
    world.reconcile_sets()
    now = world.machines()
    assert {m["metadata"]["name"]: m["metadata"]["uid"] for m in now} == machines
    for machine in now:
        assert machine["spec"]["nodeTemplate"]["metadata"]["labels"] == after_labels
        assert machine["spec"]["nodeTemplate"]["spec"]["taints"] == after_taints

    # Machine → Node: the machine controller's node sync (three-way: what was applied before goes)
    def nodes_synced() -> bool:
        _reconcile_machines(world)
        return all(_carries(world.node(n), after_labels, after_annotations, after_taints) for n in machines)

    wait_until(nodes_synced, timeout=20, interval=0.2, what="the new node template on the nodes")
    for name in machines:
        node = world.node(name)
        labels, taints = _labels(node), _taints(node)
        assert "retired" not in labels, labels
        assert {"key": "pool", "value": "a", "effect": "NoSchedule"} not in taints, taints
        assert labels["kubernetes.io/hostname"] == name  # what the template never set is left alone
        assert (
            json.loads(_annotations(node)[LAST_APPLIED_ANNO_LABELS_TAINTS_ANNOTATION])["metadata"]["labels"]
            == after_labels
        )

    # and still no rollout: one set, the same machines, the deployment complete at revision 1
    world.reconcile()
    world.reconcile_sets()
    assert [s.metadata.uid for s in world.sets()] == [ms.metadata.uid]
    assert {m["metadata"]["name"]: m["metadata"]["uid"] for m in world.machines()} == machines
    d = world.deployment()
    assert d is not None and d.metadata.annotations[REVISION_ANNOTATION] == "1"
    assert world.complete()
