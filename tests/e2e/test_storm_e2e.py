"""A node-deletion storm end to end in the sandbox (issue 29): ``kubectl delete nodes --all`` on a
20-machine fleet deletes at most the threshold (20 % = 4) of its machines, holds the other 16 with
their VMs (``mcm-tasks admin held`` lists them), and both ways out end the hold with no VM lost:
Nodes registering again (the VM's kubelet restarts) and ``mcm-tasks admin release deployment/<name>``.

The health timeout is long here, so held machines stay Unknown and only the storm guard decides."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mcm_sandbox.procs import wait_until
from mcm_sandbox.runner import Sandbox
from mcm_tasks import kinds
from mcm_tasks.api import API_VERSION, Machine
from mcm_tasks.api.constants import HELD_ANNOTATION, NODE_DELETION_RELEASED_ANNOTATION
from mcm_tasks.controllers.machine.storm import HELD_CONDITION, NODE_DELETION_STORM
from mcm_tasks.kube import ops
from providers.local import LocalCloud
from tests.e2e.support import connected, local_class, running_sandbox

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

NS = "default"
WAIT = 180.0
POOL = "storm"
ENV = {
    "MCM_LONG_RETRY": "10s",
    "MCM_CLASS_RESYNC_PERIOD": "10s",
    "MCM_MACHINE_DRAIN_TIMEOUT": "5s",
    "MCM_MACHINE_HEALTH_TIMEOUT": "10m",
}
MCM_TASKS = str(Path(sys.executable).with_name("mcm-tasks"))


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    with running_sandbox(Path(tmp_path_factory.mktemp("storm-e2e")), ENV, with_beat=False) as started:
        yield started


def admin(sandbox: Sandbox, *args: str) -> Any:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("MCM_")}, **sandbox.env()}
    done = subprocess.run(
        [MCM_TASKS, "admin", *args, "--output", "json"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_delete_nodes_all_holds_all_but_the_threshold_and_loses_no_vm(sandbox: Sandbox) -> None:
    with connected(sandbox) as (control, target, client):

        def wait(predicate: Callable[[], bool], what: str) -> None:
            wait_until(predicate, WAIT, interval=0.3, what=what)

        def machines() -> dict[str, Machine]:
            items = ops.list_(control, kinds.MACHINE.resource, NS, label_selector=f"pool={POOL}")["items"]
            return {i["metadata"]["name"]: Machine.model_validate(i) for i in items}

        def running() -> set[str]:
            return {
                n
                for n, m in machines().items()
                if m.status.current_status.phase == "Running" and not m.metadata.is_deleting
            }

        def held() -> set[str]:
            return {n for n, m in machines().items() if m.metadata.annotations.get(HELD_ANNOTATION)}

        def live_vms() -> dict[str, str]:
            """machine → VM id of the pool's live VMs"""
            return {
                vm.machine: vm.id
                for vm in LocalCloud(client).all()
                if vm.live() and vm.machine.startswith(POOL)
            }

        local_class(control, "storm-class", {"bootDelaySeconds": 0.3}, NS)
        labels = {"pool": POOL, "name": POOL}
        ops.create(
            control,
            kinds.MACHINE_DEPLOYMENT.resource,
            {
                "apiVersion": API_VERSION,
                "kind": "MachineDeployment",
                "metadata": {"name": POOL, "namespace": NS},
                "spec": {
                    "replicas": 20,
                    "selector": {"matchLabels": {"pool": POOL}},
                    "strategy": {
                        "type": "RollingUpdate",
                        "rollingUpdate": {"maxSurge": 2, "maxUnavailable": 0},
                    },
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {"class": {"kind": "MachineClass", "name": "storm-class"}},
                    },
                },
            },
        )
        wait(lambda: len(running()) == 20, "20 machines Running")
        originals = sorted(running())
        vms_before = live_vms()
        assert sorted(vms_before) == originals

        # kubectl delete nodes --all
        for node in ops.list_(target, kinds.NODE.resource)["items"]:
            ops.delete(target, kinds.NODE.resource, node["metadata"]["name"], missing_ok=True)

        def settled() -> bool:
            """Every original deleted, or held and saying so: a hold is two writes (the annotation,
            then the status with its condition), and a read between them is not settled."""
            present = machines()
            gone_or_going = {n for n in originals if n not in present or present[n].metadata.is_deleting}
            said = {
                n
                for n in originals
                if n in present
                and present[n].metadata.annotations.get(HELD_ANNOTATION)
                and any(c.type == HELD_CONDITION for c in present[n].status.conditions)
            }
            return len(gone_or_going) + len(said) == 20

        wait(settled, "every original machine either deleted or held")
        present = machines()
        deleted = {n for n in originals if n not in present or present[n].metadata.is_deleting}
        kept = held() & set(originals)
        assert len(deleted) <= 4, deleted
        assert len(kept) >= 16
        for name in kept:  # held machines say so: condition, lastOperation, Event; their VMs live
            m = present[name]
            assert any(
                c.type == HELD_CONDITION and c.reason == NODE_DELETION_STORM for c in m.status.conditions
            )
            assert "node-deletion storm" in m.status.last_operation.description
            assert vms_before[name] == live_vms().get(name)
        listed = admin(sandbox, "held")
        assert {h["machine"] for h in listed} == kept
        assert all(h["deployment"] == POOL and h["reason"] == NODE_DELETION_STORM for h in listed)
        events = ops.list_(control, kinds.EVENT.resource, NS)["items"]
        assert any(
            e.get("reason") == NODE_DELETION_STORM
            and (e.get("involvedObject") or {}).get("kind") == "MachineDeployment"
            for e in events
        )

        # way out 1: half of the VMs' kubelets start again and register their Nodes
        first = sorted(kept)[: len(kept) // 2]
        cloud = LocalCloud(client)
        for name in first:
            cloud.restart_kubelet(vms_before[name])
        wait(lambda: set(first) <= running() and not set(first) & held(), "re-registered Nodes end the hold")

        # way out 2: the operator releases the rest; then their Nodes come back too
        rest = sorted(kept - set(first))
        answer = admin(sandbox, "release", f"deployment/{POOL}")
        assert answer["released"] == rest
        assert not held()
        assert admin(sandbox, "held") == []
        for name in rest:
            assert NODE_DELETION_RELEASED_ANNOTATION in machines()[name].metadata.annotations
            cloud.restart_kubelet(vms_before[name])
        wait(lambda: len(running()) == 20 and set(kept) <= running(), "20 Running, every held machine back")

        # no VM lost: every held machine kept its own VM, the fleet is whole
        after = live_vms()
        assert {n: after.get(n) for n in kept} == {n: vms_before[n] for n in kept}
        wait(lambda: len(live_vms()) == 20, "20 live VMs")
        assert not any(
            NODE_DELETION_RELEASED_ANNOTATION in m.metadata.annotations for m in machines().values()
        )
