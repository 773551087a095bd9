"""MachineSet scaling against the sandbox API server and Redis: 0 → 1 → 6 → 2, expectations under a
lagging cache and after a pass that died mid-creation, the freeze label, Failed machines replaced,
the autoscaler's marked machines."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mcm_sandbox.procs import wait_until
from mcm_tasks import kinds
from mcm_tasks.api import Machine, MachineSet
from mcm_tasks.api.constants import (
    LAST_REPLICA_CHANGE_BY_SCALER_TIME_ANNOTATION,
    MACHINE_PRIORITY_ANNOTATION,
    MARKED_FOR_DELETION_TIME_ANNOTATION,
    MCM_FINALIZER,
)
from mcm_tasks.controllers.machineset import control, reconcile
from mcm_tasks.controllers.machineset.metrics import stale_machines_key
from mcm_tasks.kube import ops
from mcm_tasks.queue import Requeue, expectations
from mcm_tasks.settings import get_settings
from tests.integration.test_machineset_support import HOLD, Harness, crds, harness

__all__ = ["crds", "harness"]

pytestmark = pytest.mark.integration

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

    def list_then_the_informer_catches_up(machine_set: MachineSet) -> list[Machine]:
        stale = listed(machine_set)
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


def test_marked_machines_are_deleted_at_the_scaler_change(harness: Harness) -> None:
    harness.create_set("as", 3)
    harness.settle("as")
    marked = names(harness.machines("as"))[1]
    annotations = {
        MACHINE_PRIORITY_ANNOTATION: "1",
        MARKED_FOR_DELETION_TIME_ANNOTATION: "2026-02-01T10:00:00Z",
    }
    ops.patch(
        harness.api, kinds.MACHINE.resource, marked, {"metadata": {"annotations": annotations}}, harness.ns
    )
    harness.settle("as")
    assert marked in names(harness.machines("as"))  # the set has not been told yet
    harness.patch_set(
        "as",
        {"metadata": {"annotations": {LAST_REPLICA_CHANGE_BY_SCALER_TIME_ANNOTATION: "2026-02-01T10:00:05Z"}},
         "spec": {"replicas": 2}},
    )  # fmt: skip
    harness.settle("as")
    remaining = names(harness.machines("as"))
    assert len(remaining) == 2 and marked not in remaining


class Killed(BaseException):
    """The pass's process dies here (what a SIGKILL or the hard time limit looks like to the set)."""


def test_a_pass_that_died_mid_creation_holds_its_set_only_for_a_grace(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pass dies after its first two slow-start batches (3 of 10 created). Whatever message
    runs the set next finds the dead pass's expectations still open: it waits for them a short grace
    (for the informer to observe what the dead pass created), not the expectations timeout, then
    creates the rest and no more. Without the open mark it waited out the timeout."""
    harness.create_set("dies", 0)
    harness.settle("dies")
    harness.scale("dies", 10)
    harness.sync()
    batches: list[int] = []
    run_batch = control.run_concurrently

    def dies_at_the_third_batch(n: int, fn: Callable[[], None]) -> list[Exception | None]:
        batches.append(n)
        if len(batches) == 3:
            raise Killed
        return run_batch(n, fn)

    monkeypatch.setattr(control, "run_concurrently", dies_at_the_third_batch)
    with pytest.raises(Killed):
        harness.reconcile("dies")
    monkeypatch.undo()
    assert len(harness.machines("dies")) == 3
    harness.sync()  # the informer observes the three
    again = harness.reconcile("dies")
    assert again is not None and again.after <= expectations.ABANDONED_GRACE + 0.1, again
    assert len(harness.machines("dies")) == 3, "nothing created during the grace"
    wait_until(lambda: expectations.satisfied(harness.key("dies")), expectations.ABANDONED_GRACE + 3,
               interval=0.1, what="the dead pass's expectations to expire")  # fmt: skip
    harness.settle("dies")
    assert len(harness.machines("dies")) == 10
    again = harness.reconcile("dies")
    assert len(harness.machines("dies")) == 10 and again == Requeue.long()
