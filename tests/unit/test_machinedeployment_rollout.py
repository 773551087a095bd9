"""MachineDeployment rollouts on the recording fake (tests/kube_fake.py) and a real Redis, with the MachineSet
reconciler creating and deleting the machines: creation, RollingUpdate budgets at every step (with
taints and autoscaler protection), Recreate, in-place propagation, proportional scaling during a
rollout, revisionHistoryLimit and the progress deadline."""

from __future__ import annotations

from typing import Any

from mcm_sandbox.procs import wait_until
from mcm_tasks.api.constants import (
    CA_SCALE_DOWN_DISABLED_ANNOTATION,
    CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION,
    DESIRED_REPLICAS_ANNOTATION,
    MACHINE_TEMPLATE_HASH_LABEL_KEY,
    MAX_REPLICAS_ANNOTATION,
    PREFER_NO_SCHEDULE_KEY,
    REVISION_ANNOTATION,
)
from tests.machinedeployment_support import World, deployment_body, template


def _taint_keys(node: dict[str, Any] | None) -> list[str]:
    return [t.get("key") for t in ((node or {}).get("spec") or {}).get("taints") or []]


def _annotations(obj: dict[str, Any] | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("annotations") or {})


def test_create_makes_a_new_set_with_hash_revision_and_annotations(world: World) -> None:
    body = deployment_body("pool", 3)
    body["metadata"]["annotations"] = {"team": "infra"}
    world.create(body)
    world.reconcile()
    (ms,) = world.sets()
    d = world.deployment()
    assert d is not None
    hash_value = ms.metadata.labels[MACHINE_TEMPLATE_HASH_LABEL_KEY]
    assert ms.metadata.name == f"pool-{hash_value[:5]}"
    assert (
        ms.spec.selector is not None
        and ms.spec.selector.match_labels[MACHINE_TEMPLATE_HASH_LABEL_KEY] == hash_value
    )
    assert ms.spec.template.metadata.labels[MACHINE_TEMPLATE_HASH_LABEL_KEY] == hash_value
    assert ms.metadata.controller_ref() is not None and ms.metadata.controller_ref().uid == d.metadata.uid  # type: ignore[union-attr]
    assert ms.spec.replicas == 3
    assert ms.metadata.annotations[REVISION_ANNOTATION] == "1"
    assert ms.metadata.annotations["team"] == "infra"
    assert (
        ms.metadata.annotations[DESIRED_REPLICAS_ANNOTATION],
        ms.metadata.annotations[MAX_REPLICAS_ANNOTATION],
    ) == ("3", "5")
    assert d.metadata.annotations[REVISION_ANNOTATION] == "1"
    assert "machine.sapcloud.io/machine-controller-manager" in d.metadata.finalizers
    progressing = next(c for c in d.status.conditions if c.type == "Progressing")
    assert progressing.reason == "NewMachineSetCreated"
    world.settle()
    d = world.deployment()
    assert d is not None and (d.status.replicas, d.status.available_replicas, d.status.updated_replicas) == (
        3,
        3,
        3,
    )
    assert d.status.observed_generation == d.metadata.generation


def test_status_is_written_only_when_it_changed(world: World) -> None:
    world.create(deployment_body("pool", 2))
    world.settle()
    before = world.deployment()
    assert before is not None
    world.reconcile()
    world.reconcile()
    after = world.deployment()
    assert after is not None and after.metadata.resource_version == before.metadata.resource_version


def test_rolling_update_keeps_budgets_taints_old_nodes_and_protects_from_scale_down(world: World) -> None:
    replicas, surge, unavailable = 10, 2, 1
    world.create(deployment_body("pool", replicas, surge=surge, unavailable=unavailable))
    world.settle()
    (old,) = world.sets()
    old_nodes = [m["metadata"]["name"] for m in world.machines_of(old)]

    world.patch({"spec": {"template": template("class-v2")}})
    tainted = protected = False
    for _ in range(80):
        world.reconcile()
        world.check(replicas + surge, replicas - unavailable)
        world.reconcile_sets()
        world.check(replicas + surge, replicas - unavailable)
        tainted = tainted or all(PREFER_NO_SCHEDULE_KEY in _taint_keys(world.node(n)) for n in old_nodes[:3])
        protected = protected or all(
            _annotations(world.node(n)).get(CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION) == "true"
            for n in old_nodes[:3]
        )
        world.boot(count=1)
        world.reconcile_sets()
        world.check(replicas + surge, replicas - unavailable)
        if world.complete():
            break
    else:
        raise AssertionError(world.describe())
    world.reconcile()
    assert tainted and protected
    assert world.seen_max_total == replicas + surge  # the surge was used
    new = next(s for s in world.sets() if s.metadata.uid != old.metadata.uid)
    old_now = next(s for s in world.sets() if s.metadata.uid == old.metadata.uid)
    assert (old_now.spec.replicas, old_now.status.replicas) == (0, 0)
    assert old_now.metadata.annotations[PREFER_NO_SCHEDULE_KEY] == "True"
    assert (
        new.spec.replicas,
        new.status.available_replicas,
        new.metadata.annotations[REVISION_ANNOTATION],
    ) == (10, 10, "2")
    d = world.deployment()
    assert d is not None and d.metadata.annotations[REVISION_ANNOTATION] == "2"
    for machine in world.machines_of(new):
        annotations = _annotations(world.node(machine["metadata"]["name"]))
        assert CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION not in annotations
        assert CA_SCALE_DOWN_DISABLED_ANNOTATION not in annotations


def test_no_scale_down_protection_when_the_flag_is_off(world: World) -> None:
    world.reconfigure(autoscaler_scaledown_annotation_during_rollout=False)
    world.create(deployment_body("pool", 2, surge=1, unavailable=0))
    world.settle()
    (old,) = world.sets()
    old_nodes = [m["metadata"]["name"] for m in world.machines_of(old)]
    world.patch({"spec": {"template": template("class-v2")}})
    world.reconcile()
    assert all(PREFER_NO_SCHEDULE_KEY in _taint_keys(world.node(n)) for n in old_nodes)
    assert not any(CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION in _annotations(world.node(n)) for n in old_nodes)


def test_recreate_empties_old_set_before_creating_new_machines(world: World) -> None:
    world.create(deployment_body("pool", 3, strategy="Recreate"))
    world.settle()
    (old,) = world.sets()
    world.patch({"spec": {"template": template("class-v2")}})
    world.reconcile()
    assert [s.spec.replicas for s in world.sets()] == [0]  # old scaled down, no new set yet
    world.reconcile()
    assert len(world.sets()) == 1  # still waiting: the old machines exist
    world.reconcile_sets()
    assert world.machines() == []
    world.reconcile()
    assert len(world.sets()) == 1  # the old set's status still counts 3 machines
    world.reconcile_sets()  # its status catches up
    world.reconcile()
    sets = world.sets()
    assert len(sets) == 2
    new = next(s for s in sets if s.metadata.uid != old.metadata.uid)
    assert new.spec.replicas == 3
    world.settle()
    assert all(m["metadata"]["ownerReferences"][0]["uid"] == new.metadata.uid for m in world.machines())


def test_in_place_fields_propagate_to_the_set_without_a_rollout(world: World) -> None:
    world.create(deployment_body("pool", 2))
    world.settle()
    (ms,) = world.sets()
    changed = template("class-v1", drainTimeout="7m", nodeTemplate={"metadata": {"labels": {"tier": "b"}}})
    changed["spec"]["class"]["kind"] = "AWSMachineClass"
    world.patch({"spec": {"template": changed}})
    world.reconcile()
    (same,) = world.sets()
    assert same.metadata.uid == ms.metadata.uid
    spec = same.spec.template.spec
    assert (spec.drain_timeout, spec.class_.kind) == ("7m", "AWSMachineClass")
    assert spec.node_template is not None and spec.node_template.metadata.labels == {"tier": "b"}
    world.reconcile_sets()
    assert all(m["spec"].get("drainTimeout") == "7m" for m in world.machines())


def test_scaling_during_a_rollout_is_proportional(world: World) -> None:
    world.create(deployment_body("pool", 10, surge=2, unavailable=1))
    world.settle()
    world.patch({"spec": {"template": template("class-v2")}})
    for _ in range(3):  # part way: both sets active
        world.reconcile()
        world.reconcile_sets()
        world.boot(count=2)
        world.reconcile_sets()
    before = {s.metadata.name: s.spec.replicas for s in world.sets()}
    assert all(v > 0 for v in before.values()) and len(before) == 2
    world.patch({"spec": {"replicas": 2}})
    world.reconcile()
    after = {s.metadata.name: s.spec.replicas for s in world.sets()}
    assert sum(after.values()) == 2 + 2  # replicas + maxSurge, shared by both sets
    for name, size in after.items():
        assert 0 < size < before[name], (before, after)  # both shrank, in proportion to their size
    for ms in world.sets():
        assert ms.metadata.annotations[DESIRED_REPLICAS_ANNOTATION] == "2"
    world.settle()
    d = world.deployment()
    assert d is not None and d.status.updated_replicas == 2


def test_revision_history_limit_deletes_oldest_empty_sets(world: World) -> None:
    world.create(deployment_body("pool", 2, revisionHistoryLimit=1))
    world.settle()
    first = world.sets()[0].metadata.name
    for version in ("class-v2", "class-v3"):
        world.patch({"spec": {"template": template(version)}})
        world.settle()
    names = [s.metadata.name for s in world.sets()]
    assert first not in names
    assert len(names) == 2  # the new set and one old one


def test_progress_deadline_exceeded_when_new_machines_never_join(world: World) -> None:
    world.create(deployment_body("pool", 2, surge=1, unavailable=0, progressDeadlineSeconds=1))
    world.settle()
    world.patch({"spec": {"template": template("class-v2")}})

    def timed_out() -> bool:
        world.reconcile()
        world.reconcile_sets()
        d = world.deployment()
        cond = next((c for c in d.status.conditions if c.type == "Progressing"), None) if d else None
        return cond is not None and (cond.status, cond.reason) == ("False", "ProgressDeadlineExceeded")

    wait_until(timed_out, timeout=20, interval=0.3, what="ProgressDeadlineExceeded")
    requeue = world.reconcile()
    assert requeue is not None
