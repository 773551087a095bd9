"""Claiming (adopt, release, no adoption by a set being deleted), in-place propagation of the template,
and the deletion of a MachineSet cascading to its machines, on the recording fake and a real Redis."""

from __future__ import annotations

import pytest

from mcm_tasks import kinds
from mcm_tasks.api import API_VERSION
from mcm_tasks.api.constants import MCM_FINALIZER
from mcm_tasks.controllers.common.claim_io import CannotAdopt
from mcm_tasks.kube import ops
from tests.machineset_support import HOLD, Harness


def owner_uids(machine: dict) -> list[str]:  # type: ignore[type-arg]
    return [r["uid"] for r in machine["metadata"].get("ownerReferences", [])]


def test_adopts_a_matching_orphan(harness: Harness) -> None:
    harness.create_set("ad", 0)
    harness.settle("ad")
    harness.create_machine("stray", {"app": "ad", "tier": "t"})
    harness.create_machine("other", {"app": "someone-else"})
    harness.scale("ad", 2)
    harness.settle("ad")
    uid = harness.get_set("ad")["metadata"]["uid"]  # type: ignore[index]
    stray = ops.get(harness.api, kinds.MACHINE.resource, "stray", harness.ns)
    assert stray is not None and owner_uids(stray) == [uid]
    [ref] = stray["metadata"]["ownerReferences"]
    assert ref["controller"] is True and ref["blockOwnerDeletion"] is True
    assert len(harness.machines("ad")) == 2  # the orphan counts: only one machine was created
    assert owner_uids(ops.get(harness.api, kinds.MACHINE.resource, "other", harness.ns)) == []  # type: ignore[arg-type]


def test_an_orphan_adopted_by_someone_else_meanwhile_is_left_alone(harness: Harness) -> None:
    harness.create_set("race", 0)
    harness.settle("race")
    harness.create_machine("contested", {"app": "race", "tier": "t"})
    harness.sync()
    rival = harness.create_set("rival", 0)["metadata"]["uid"]  # never reconciled here: it keeps what it gets
    other = {
        "apiVersion": API_VERSION,
        "kind": "MachineSet",
        "name": "rival",
        "uid": rival,
        "controller": True,
    }
    ops.patch(
        harness.api,
        kinds.MACHINE.resource,
        "contested",
        {"metadata": {"ownerReferences": [other]}},
        harness.ns,
    )
    # the cache still shows an orphan: the adoption conflicts, and the fresh read says it is taken
    harness.reconcile("race")
    assert owner_uids(ops.get(harness.api, kinds.MACHINE.resource, "contested", harness.ns)) == [rival]  # type: ignore[arg-type]


def test_releases_a_machine_that_no_longer_matches(harness: Harness) -> None:
    harness.create_set("rl", 1)
    harness.settle("rl")
    [machine] = harness.machines("rl")
    name = machine["metadata"]["name"]
    ops.patch(
        harness.api, kinds.MACHINE.resource, name, {"metadata": {"labels": {"app": "elsewhere"}}}, harness.ns
    )
    harness.settle("rl")
    released = ops.get(harness.api, kinds.MACHINE.resource, name, harness.ns)
    assert released is not None and owner_uids(released) == []
    [replacement] = harness.machines("rl")
    assert replacement["metadata"]["name"] != name


def test_a_set_being_deleted_adopts_nothing(harness: Harness) -> None:
    harness.create_set("gone", 1)
    harness.settle("gone")
    harness.create_machine("orphan", {"app": "gone", "tier": "t"})
    harness.sync()
    # deleted now, but the cache does not know yet: the quorum read before adopting must catch it
    ops.delete(harness.api, kinds.MACHINE_SET.resource, "gone", harness.ns)
    with pytest.raises(CannotAdopt):
        harness.reconcile("gone")
    assert owner_uids(ops.get(harness.api, kinds.MACHINE.resource, "orphan", harness.ns)) == []  # type: ignore[arg-type]


def test_template_changes_propagate_in_place(harness: Harness) -> None:
    node_template = {"metadata": {"labels": {"role": "a"}}, "spec": {"taints": []}}
    harness.create_set(
        "pg", 2, template_finalizers=[HOLD], spec={"nodeTemplate": node_template, "drainTimeout": "5m"}
    )
    harness.settle("pg")
    before = {m["metadata"]["name"]: m for m in harness.machines("pg")}
    assert all(m["spec"]["drainTimeout"] == "5m" for m in before.values())
    first = sorted(before)[0]
    harness.set_phase(first, "Failed", state="Failed", type="HealthCheck")
    new_template = {
        "metadata": {"labels": {"role": "b"}, "annotations": {"x": "1"}},
        "spec": {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]},
    }
    harness.patch_set(
        "pg",
        {
            "spec": {
                "template": {
                    "spec": {"nodeTemplate": new_template, "drainTimeout": "7m", "healthTimeout": "3m"}
                }
            }
        },
    )
    harness.sync()
    harness.reconcile("pg")
    after = {m["metadata"]["name"]: m for m in harness.machines("pg")}
    assert set(after) == set(before)  # no rollout: the same machines (the Failed one held while deleting)
    second = sorted(before)[1]
    spec = after[second]["spec"]
    assert spec["nodeTemplate"] == new_template
    assert (spec["drainTimeout"], spec["healthTimeout"]) == ("7m", "3m")
    assert after[second]["metadata"]["generation"] > before[second]["metadata"]["generation"]
    # the Failed machine is not brought up to date: it is being replaced
    assert after[first]["spec"]["drainTimeout"] == "5m"
    assert after[first]["metadata"].get("deletionTimestamp")


def test_deleting_the_set_deletes_its_machines_then_the_finalizer(harness: Harness) -> None:
    harness.create_set("del", 3, template_finalizers=[HOLD])
    harness.settle("del")
    assert MCM_FINALIZER in harness.get_set("del")["metadata"]["finalizers"]  # type: ignore[index]
    ops.delete(harness.api, kinds.MACHINE_SET.resource, "del", harness.ns)
    harness.sync()
    harness.reconcile("del")
    machines = harness.machines("del")
    assert len(machines) == 3
    assert all(m["metadata"].get("deletionTimestamp") for m in machines)
    assert all(m["status"]["currentStatus"]["phase"] == "Terminating" for m in machines)
    harness.sync()
    harness.reconcile("del")
    assert harness.get_set("del") is not None  # held while machines remain
    harness.release_held()
    harness.sync()
    harness.reconcile("del")
    assert harness.get_set("del") is None
    assert harness.machines() == []
