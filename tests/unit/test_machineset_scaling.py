"""MachineSet scaling on the recording fake and a real Redis: 0 → 1 → 6 → 2, expectations under a
lagging cache and after a pass that died mid-creation, the freeze label, Failed machines replaced,
the autoscaler's marked machines."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from mcm_tasks import kinds
from mcm_tasks.api import API_VERSION, Machine
from mcm_tasks.api.constants import (
    DELETION_ORDER_ANNOTATION,
    LAST_REPLICA_CHANGE_BY_SCALER_TIME_ANNOTATION,
    MACHINE_PRIORITY_ANNOTATION,
    MARKED_FOR_DELETION_TIME_ANNOTATION,
    MCM_FINALIZER,
)
from mcm_tasks.controllers.machineset import control_io, reconcile
from mcm_tasks.controllers.machineset.facts import FactsOf
from mcm_tasks.controllers.machineset.metrics_io import stale_machines_key
from mcm_tasks.controllers.machineset.scope import MachineSetScope
from mcm_tasks.kube import ops
from mcm_tasks.queue import Requeue, expectations
from mcm_tasks.settings import get_settings
from tests.machineset_support import HOLD, Harness

DELETING = "Deleting machine from cloud provider"


def names(machines: list[dict]) -> list[str]:  # type: ignore[type-arg]
    return sorted(m["metadata"]["name"] for m in machines)


def test_replicas_0_1_6_2(harness: Harness) -> None:
    harness.create_set("web", 0, template_finalizers=[HOLD])
    harness.settle("web")
    ms = harness.get_set("web")
    assert ms is not None
    assert MCM_FINALIZER in ms["metadata"]["finalizers"]
    assert harness.machines() == []
    assert ms["status"]["observedGeneration"] == ms["metadata"]["generation"]
    assert ms["status"]["lastOperation"]["lastUpdateTime"]  # upstream calculateMachineSetStatus's stamp

    harness.scale("web", 1)
    harness.settle("web")
    [first] = harness.machines("web")
    meta = first["metadata"]
    assert meta["name"].startswith("web-") and meta.get("generateName") == "web-"
    assert meta["labels"] == {"app": "web", "tier": "t"}
    assert meta["finalizers"] == [HOLD, MCM_FINALIZER]  # the machine finalizer from the start
    [ref] = meta["ownerReferences"]
    assert (ref["kind"], ref["name"], ref["uid"], ref["controller"], ref["blockOwnerDeletion"]) == (
        "MachineSet", "web", ms["metadata"]["uid"], True, True,
    )  # fmt: skip

    harness.scale("web", 6)
    harness.settle("web")
    six = harness.machines("web")
    assert len(six) == 6
    assert len(harness.events("SuccessfulCreate")) >= 1
    for i, machine in enumerate(sorted(six, key=lambda m: m["metadata"]["creationTimestamp"])):
        harness.set_phase(machine["metadata"]["name"], "Running" if i < 3 else "Pending")
    harness.settle("web")
    assert harness.get_set("web")["status"]["readyReplicas"] == 3  # type: ignore[index]

    harness.scale("web", 2)
    harness.sync()
    harness.reconcile("web")
    deleting = [m for m in harness.machines("web") if m["metadata"].get("deletionTimestamp")]
    assert len(deleting) == 4
    # the Pending machines go first, then the oldest Running one
    assert all(m["status"]["currentStatus"]["phase"] == "Terminating" for m in deleting)
    assert all(m["status"]["lastOperation"]["description"] == DELETING for m in deleting)
    kept = harness.active("web")
    assert [m["status"]["currentStatus"]["phase"] for m in kept] == ["Running", "Running"]
    assert len(harness.events("SuccessfulDelete")) >= 1
    harness.settle("web")
    assert len(harness.active("web")) == 2  # nothing more deleted or created while they terminate
    harness.release_held()
    harness.settle("web")
    assert names(harness.machines("web")) == names(kept)
    assert harness.get_set("web")["status"]["replicas"] == 2  # type: ignore[index]


def waits_out_expectations(after: float) -> bool:
    """A pass that found unmet expectations comes back when they expire (their remaining TTL plus
    a hair), not before and not much later."""
    timeout = get_settings().expectations_timeout
    return timeout - 5.0 < after <= timeout + 0.1


def test_expectations_prevent_double_creation_while_the_cache_lags(harness: Harness) -> None:
    harness.create_set("lag", 0)
    harness.settle("lag")
    harness.scale("lag", 3)
    harness.sync()
    assert harness.reconcile("lag") == Requeue.long()
    assert len(harness.machines("lag")) == 3
    # the cache has not seen the three machines: a second pass must not create three more
    again = harness.reconcile("lag")
    assert len(harness.machines("lag")) == 3
    assert again is not None and waits_out_expectations(again.after)
    assert not expectations.satisfied(harness.key("lag"))
    harness.sync()
    assert expectations.satisfied(harness.key("lag"))
    harness.reconcile("lag")
    assert len(harness.machines("lag")) == 3


def test_expectations_are_read_before_the_machines(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """As upstream (``SatisfiedExpectations`` before the list, client-go's rule): creations observed
    between the pass's list and its expectations check must not make that stale list look trusted.
    Read the other way round, the pass below saw expectations met and a list without the three new
    machines, and created three more (a scale-up of a thousand overshot by a burst this way)."""
    harness.create_set("race", 0)
    harness.settle("race")
    harness.scale("race", 3)
    harness.sync()
    harness.reconcile("race")
    assert len(harness.machines("race")) == 3
    listed = reconcile.candidate_machines

    def list_then_the_informer_catches_up(
        scope: MachineSetScope, *, live: bool = False, read: FactsOf | None = None
    ) -> list[Machine]:
        stale = listed(scope, live=live, read=read)
        harness.sync()  # the creations show up, and their expectations are met, after the list
        return stale

    monkeypatch.setattr(reconcile, "candidate_machines", list_then_the_informer_catches_up)
    again = harness.reconcile("race")
    assert len(harness.machines("race")) == 3
    assert again is not None and waits_out_expectations(again.after)
    monkeypatch.undo()
    harness.settle("race")
    assert len(harness.machines("race")) == 3


def test_deletions_wait_for_the_cache_too(harness: Harness) -> None:
    harness.create_set("dlag", 4, template_finalizers=[HOLD])
    harness.settle("dlag")
    harness.scale("dlag", 2)
    harness.sync()
    harness.reconcile("dlag")
    assert len(harness.active("dlag")) == 2
    # the cache still shows four machines, none deleting: the pass waits instead of acting on that
    again = harness.reconcile("dlag")
    assert again is not None and waits_out_expectations(again.after)
    assert len(harness.active("dlag")) == 2
    harness.sync()  # the deletion timestamps are observed: the set acts again, and has nothing to do
    assert expectations.satisfied(harness.key("dlag"))
    assert harness.reconcile("dlag") == Requeue.long()
    assert len(harness.active("dlag")) == 2


def test_freeze_label_blocks_scale_up_only(harness: Harness) -> None:
    harness.create_set("fz", 3, labels={"freeze": "True"})
    harness.settle("fz")
    assert harness.machines("fz") == []
    harness.patch_set("fz", {"metadata": {"labels": {"freeze": None}}})
    harness.settle("fz")
    assert len(harness.machines("fz")) == 3
    harness.patch_set("fz", {"metadata": {"labels": {"freeze": "True"}}, "spec": {"replicas": 1}})
    harness.settle("fz")
    assert len(harness.machines("fz")) == 1  # scale-down goes on while frozen
    harness.scale("fz", 4)
    harness.settle("fz")
    assert len(harness.machines("fz")) == 1


def test_failed_machine_is_deleted_and_replaced(harness: Harness) -> None:
    harness.create_set("fl", 2, template_finalizers=[HOLD])
    harness.settle("fl")
    victim, other = names(harness.machines("fl"))
    harness.set_phase(other, "Running")
    harness.set_phase(victim, "Failed", state="Failed", type="HealthCheck", description="unhealthy")
    harness.sync()
    harness.reconcile("fl")
    gone = ops.get(harness.api, kinds.MACHINE.resource, victim, harness.ns)
    assert gone is not None and gone["metadata"].get("deletionTimestamp")
    assert gone["status"]["currentStatus"]["phase"] == "Terminating"
    assert int(harness.redis.get(stale_machines_key()) or 0) == 1
    status = harness.get_set("fl")["status"]  # type: ignore[index]
    assert [f["name"] for f in status["failedMachines"]] == [victim]
    harness.settle("fl")
    active = harness.active("fl")
    assert len(active) == 2 and victim not in names(active)


def _mark(harness: Harness, name: str, when: datetime) -> None:
    annotations = {
        MACHINE_PRIORITY_ANNOTATION: "1",
        MARKED_FOR_DELETION_TIME_ANNOTATION: when.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    ops.patch(
        harness.api, kinds.MACHINE.resource, name, {"metadata": {"annotations": annotations}}, harness.ns
    )


def test_marked_machines_are_deleted_at_the_scaler_change(harness: Harness) -> None:
    harness.create_set("as", 3)
    harness.settle("as")
    marked = names(harness.machines("as"))[1]
    now = datetime.now(UTC)
    _mark(harness, marked, now)
    harness.settle("as")
    # the set has not been told yet, and the mark is fresh: the scale-down is on its way (MCM #1078)
    assert marked in names(harness.machines("as"))
    # the pass asks to come back when the mark comes of age
    assert harness.reconcile("as") == Requeue(pytest.approx(get_settings().short_retry + 0.05, abs=2))
    changed = (now + timedelta(seconds=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    harness.patch_set(
        "as",
        {"metadata": {"annotations": {LAST_REPLICA_CHANGE_BY_SCALER_TIME_ANNOTATION: changed}},
         "spec": {"replicas": 2}},
    )  # fmt: skip
    harness.settle("as")
    remaining = names(harness.machines("as"))
    assert len(remaining) == 2 and marked not in remaining


def test_a_marked_machine_no_replica_change_accounts_for_is_replaced(harness: Harness) -> None:
    """MCM #1078: the autoscaler marked a machine and the replica count did not change; upstream
    keeps it forever, here it is deleted once its mark is short_retry old and the set replaces it."""
    harness.create_set("stuck", 3)
    harness.settle("stuck")
    first = names(harness.machines("stuck"))
    for name in first:
        harness.set_phase(name, "Running")
    old_mark = datetime.now(UTC) - timedelta(seconds=get_settings().short_retry + 1)
    for name in first[:2]:
        _mark(harness, name, old_mark)
    harness.settle("stuck")
    # one at a time: one marked machine went, and its replacement is still joining
    gone = [n for n in first[:2] if n not in names(harness.active("stuck"))]
    assert len(gone) == 1 and len(harness.active("stuck")) == 3
    [event] = harness.events("ReplacingMarkedMachine")
    assert f"Replacing machine {gone[0]}: marked for deletion (priority 1)" in event["message"]
    harness.settle("stuck")
    assert len(harness.events("ReplacingMarkedMachine")) == 1  # held while the replacement joins
    for name in names(harness.active("stuck")):
        harness.set_phase(name, "Running")
    harness.settle("stuck")
    remaining = names(harness.active("stuck"))
    assert len(remaining) == 3 and not set(first[:2]) & set(remaining)
    ms = harness.get_set("stuck")
    assert ms is not None and ms["spec"]["replicas"] == 3


def test_a_deployments_deletion_order_applies_to_its_sets(harness: Harness) -> None:
    """``mcm-tasks.io/deletion-order`` on the owning MachineDeployment (the set has none): under
    ``Oldest`` a joining machine is kept where upstream's order deletes it first."""
    deployment = ops.create(
        harness.api,
        kinds.MACHINE_DEPLOYMENT.resource,
        {"apiVersion": API_VERSION, "kind": "MachineDeployment",
         "metadata": {"name": "dep", "namespace": harness.ns,
                      "annotations": {DELETION_ORDER_ANNOTATION: "Oldest"}},
         "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "ordered"}},
                  "template": {"metadata": {"labels": {"app": "ordered"}},
                               "spec": {"class": {"kind": "MachineClass", "name": "cls"}}}}},
        harness.ns,
    )  # fmt: skip
    harness.create_set("ordered", 3)
    uid = deployment["metadata"]["uid"]
    owner = {"apiVersion": API_VERSION, "kind": "MachineDeployment", "name": "dep", "uid": uid,
             "controller": True, "blockOwnerDeletion": True}  # fmt: skip
    harness.patch_set("ordered", {"metadata": {"ownerReferences": [owner]}})
    harness.settle("ordered")
    by_age = [
        str(m["metadata"]["name"])
        for m in sorted(harness.machines("ordered"),
                        key=lambda m: (m["metadata"]["creationTimestamp"], m["metadata"]["name"]))
    ]  # fmt: skip
    for name in by_age[:2]:
        harness.set_phase(name, "Running")
    harness.set_phase(by_age[2], "Pending")  # the newest joins: upstream's order deletes it first
    harness.scale("ordered", 2)
    harness.settle("ordered")
    assert names(harness.active("ordered")) == sorted(by_age[1:])  # Oldest: the oldest goes


class Killed(BaseException):
    """The pass's process dies here (what a SIGKILL or the hard time limit looks like to the set)."""


def test_a_pass_that_died_mid_creation_ends_its_expectations_on_evidence(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pass dies after its first two slow-start batches (3 of 10 created). Whatever message
    runs the set next finds the dead pass's expectations still open: it lists the set's machines
    from the API server (which holds the three, however late the informer is) and creates the rest,
    no more, at once. Without the open mark it waited out the timeout; with a fixed grace a watch
    later than the grace let it count from a mirror without the three (issue 29)."""
    harness.create_set("dies", 0)
    harness.settle("dies")
    harness.scale("dies", 10)
    harness.sync()
    batches: list[int] = []
    run_batch = control_io.run_concurrently

    def dies_at_the_third_batch(n: int, fn: Callable[[], None]) -> list[Exception | None]:
        batches.append(n)
        if len(batches) == 3:
            raise Killed
        return run_batch(n, fn)

    monkeypatch.setattr(control_io, "run_concurrently", dies_at_the_third_batch)
    with pytest.raises(Killed):
        harness.reconcile("dies")
    monkeypatch.undo()
    assert len(harness.machines("dies")) == 3
    # the informer has NOT observed the three (a lagging watch): the next pass still counts them
    harness.reconcile("dies")
    assert len(harness.machines("dies")) == 10, "the rest created from the live list, no more"
    harness.sync()
    harness.settle("dies")
    assert len(harness.machines("dies")) == 10
    again = harness.reconcile("dies")
    assert len(harness.machines("dies")) == 10 and again == Requeue.long()
