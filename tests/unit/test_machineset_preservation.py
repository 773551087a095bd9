"""Auto-preservation in the MachineSet pass on the recording fake and a real Redis: no
auto-preservation in a set whose deployment is being rolled out (upstream MCM #1137), and again once
the old set is gone; a lowered ``autoPreserveFailedMachineMax`` takes the annotation off."""

from __future__ import annotations

from typing import Any

from mcm_tasks import kinds
from mcm_tasks.api import API_VERSION
from mcm_tasks.api.constants import PRESERVE_ANNOTATION, PRESERVE_AUTO_PRESERVED
from mcm_tasks.controllers.machineset.reconcile import AUTO_PRESERVATION_STOPPED_REASON
from mcm_tasks.kube import ops
from tests.machineset_support import HOLD, Harness


def owned_by_a_deployment(harness: Harness, name: str) -> None:
    """Under one MachineDeployment (no deployment controller runs here: the sets are the test's)."""
    deployment = ops.get(harness.api, kinds.MACHINE_DEPLOYMENT.resource, "roll", harness.ns, missing_ok=True)
    if deployment is None:
        body = {
            "apiVersion": API_VERSION,
            "kind": "MachineDeployment",
            "metadata": {"name": "roll", "namespace": harness.ns},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"roll": "x"}},
                "strategy": {"type": "RollingUpdate"},
                "template": {
                    "metadata": {"labels": {"roll": "x"}},
                    "spec": {"class": {"kind": "MachineClass", "name": "cls"}},
                },
            },
        }
        deployment = ops.create(harness.api, kinds.MACHINE_DEPLOYMENT.resource, body, harness.ns)
    ref = {
        "apiVersion": API_VERSION,
        "kind": "MachineDeployment",
        "name": "roll",
        "uid": deployment["metadata"]["uid"],
        "controller": True,
    }
    harness.patch_set(name, {"metadata": {"ownerReferences": [ref]}})


def preserve_value(machine: dict[str, Any]) -> str | None:
    return (machine["metadata"].get("annotations") or {}).get(PRESERVE_ANNOTATION)


def fail_one(harness: Harness, owner: str) -> str:
    [machine] = harness.active(owner)
    name = str(machine["metadata"]["name"])
    harness.set_phase(name, "Failed", state="Failed", type="HealthCheck", description="unhealthy")
    harness.sync()
    return name


def test_no_auto_preservation_while_the_deployment_rolls_out(harness: Harness) -> None:
    harness.create_set("old", 1, template_finalizers=[HOLD])
    harness.create_set("new", 1, template_finalizers=[HOLD], spec={})
    harness.patch_set("new", {"spec": {"autoPreserveFailedMachineMax": 1}})
    for name in ("old", "new"):
        owned_by_a_deployment(harness, name)
        harness.settle(name)

    # the old set still has its machine: a Failed machine of the new set is replaced, not kept
    failed = fail_one(harness, "new")
    harness.reconcile("new")
    [machine] = [m for m in harness.machines("new") if m["metadata"]["name"] == failed]
    assert preserve_value(machine) is None
    assert machine["metadata"].get("deletionTimestamp"), "replaced like any Failed machine"
    harness.release_held()
    harness.settle("new")

    # the old set gone: auto-preservation applies again
    harness.scale("old", 0)
    harness.settle("old")
    harness.release_held()
    harness.settle("old")
    assert harness.active("old") == []
    failed = fail_one(harness, "new")
    harness.reconcile("new")
    [machine] = [m for m in harness.machines("new") if m["metadata"]["name"] == failed]
    assert preserve_value(machine) == PRESERVE_AUTO_PRESERVED
    assert not machine["metadata"].get("deletionTimestamp"), "kept while its preservation is pending"

    # a rollout begins again (the old set wants a machine): the auto-preserved one lets go
    harness.scale("old", 1)
    harness.settle("old")
    harness.sync()
    harness.reconcile("new")
    [machine] = [m for m in harness.machines("new") if m["metadata"]["name"] == failed]
    assert preserve_value(machine) is None
    assert machine["metadata"].get("deletionTimestamp")
    [event] = harness.events(AUTO_PRESERVATION_STOPPED_REASON)
    assert (
        event["message"]
        == f"Auto-preservation of machine {failed} stopped: its MachineDeployment is being rolled out"
    )


def test_a_lowered_maximum_takes_the_annotation_off(harness: Harness) -> None:
    harness.create_set("max", 1, template_finalizers=[HOLD])
    harness.patch_set("max", {"spec": {"autoPreserveFailedMachineMax": 1}})
    harness.settle("max")
    failed = fail_one(harness, "max")
    harness.settle("max")
    [machine] = [m for m in harness.machines("max") if m["metadata"]["name"] == failed]
    assert preserve_value(machine) == PRESERVE_AUTO_PRESERVED
    assert harness.get_set("max")["status"]["autoPreserveFailedMachineCount"] == 1  # type: ignore[index]

    harness.patch_set("max", {"spec": {"autoPreserveFailedMachineMax": 0}})
    harness.sync()
    harness.reconcile("max")
    [machine] = [m for m in harness.machines("max") if m["metadata"]["name"] == failed]
    assert preserve_value(machine) is None
    assert machine["metadata"].get("deletionTimestamp"), "replaced once it is no longer preserved"
    [event] = harness.events(AUTO_PRESERVATION_STOPPED_REASON)
    assert (
        event["message"]
        == f"Auto-preservation of machine {failed} stopped: autoPreserveFailedMachineMax is 0"
    )
