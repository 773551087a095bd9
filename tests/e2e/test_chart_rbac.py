"""The chart's least-privilege RBAC, enforced: the sandbox API servers run with
--authorization-mode=RBAC, the chart's manifests are applied to them, and every controller process
authenticates as the chart's ServiceAccount for it. A rollout (with a pod drained off the old nodes)
and a deletion pass without a single refused request, and every grant the chart gives is used (or
named below with the path that needs it). With one grant removed the rollout stalls on a 403."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from rich.console import Console

from mcm_sandbox.fleet import Fleet, machine_class, machine_deployment
from mcm_sandbox.procs import wait_until
from tests.e2e.chart_world import MACHINE_NS, ChartWorld, Docs, chart_world, granted

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

#: grants the scenario does not reach, each with the path that needs it
NOT_EXERCISED: dict[str, dict[tuple[str, str, str], str]] = {
    "informer": {},
    "worker": {
        ("", "events", "get"): "the event correlator's create racing another worker's (409, then read)",
        ("", "events", "patch"): "the event correlator's repeat of an Event (count, lastTimestamp)",
        ("", "events", "create"): "core/v1 Events, where the API server does not serve events.k8s.io/v1",
        ("events.k8s.io", "events", "get"): "the event correlator's create racing another worker's",
        ("events.k8s.io", "events", "patch"): "the event correlator's repeat of an Event (series)",
        ("", "pods", "delete"): "a forced drain (force-deletion label, drain timeout, unhealthy node)",
        ("", "persistentvolumes", "get"): "the drain's volume reads while the mirror has not listed them",
        (
            "",
            "persistentvolumeclaims",
            "get",
        ): "the drain's volume reads while the mirror has not listed them",
        ("storage.k8s.io", "volumeattachments", "list"): "the same, for VolumeAttachments",
        (
            "storage.k8s.io",
            "volumeattachments",
            "delete",
        ): "live VolumeAttachments of a deleted machine's node",
        ("", "secrets", "create"): "bootstrap tokens (kube-system) for userData with <<BOOTSTRAP_TOKEN>>",
        ("", "secrets", "delete"): "bootstrap tokens (kube-system), deleted with their machine",
        ("machine.sapcloud.io", "machineclasses", "get"): "a fresh read of a class the mirror lacks",
        ("machine.sapcloud.io", "machinesets", "get"): "a fresh read after a write conflict",
        # reads of the clusters themselves while the Redis mirror is not synced (a Redis restart)
        ("machine.sapcloud.io", "machines", "list"): "a reconcile while the mirror is not synced",
        ("machine.sapcloud.io", "machinesets", "list"): "a reconcile while the mirror is not synced",
        ("", "nodes", "list"): "a reconcile while the mirror is not synced",
        ("", "pods", "list"): "a drain while the mirror is not synced",
        ("policy", "poddisruptionbudgets", "list"): "a drain while the mirror is not synced",
        ("mcm-tasks.io", "machinedrainrules/status", "update"): "a drain rule's Valid condition",
        ("", "namespaces", "list"): "a drain rule selecting pods by their Namespace's labels",
    },
}


def _fleet(world: ChartWorld) -> Fleet:
    return Fleet(world.control.admin, world.target.admin, MACHINE_NS)


def _run_pod_on(world: ChartWorld, node: str) -> None:
    from kubernetes import config

    api = config.new_client_from_config(config_file=str(world.target.admin))
    try:
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "app", "namespace": "default"},
            "spec": {
                "nodeName": node,
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "c", "image": "busybox"}],
            },
        }
        client.CoreV1Api(api).create_namespaced_pod("default", body)
    finally:
        api.close()


def _stuck(world: ChartWorld, fleet: Fleet, what: str) -> str:
    console = Console(record=True, width=160, file=io.StringIO())
    console.print(fleet.view(what))
    refused = sorted(
        {(d["cluster"], d["user"], d["verb"], d.get("resource", d["path"])) for d in world.denied()}
    )
    return f"{console.export_text()}\nrefused: {refused}\n{world.logs()}"


def test_rollout_and_deletion_under_the_charts_rbac(tmp_path: Path) -> None:
    with chart_world(tmp_path) as world:
        fleet = _fleet(world)
        try:
            fleet.create_secret("rbac-secret")
            for name, itype in (("rbac-a", "local.small"), ("rbac-b", "local.large")):
                fleet.create("machineclasses", machine_class(name, itype, MACHINE_NS, "rbac-secret"))
            fleet.create("machinedeployments", machine_deployment("rbac", MACHINE_NS, 2, "rbac-a"))
            try:
                wait_until(fleet.running(2, "rbac-a"), 180, interval=0.5, what="2 machines")
                _run_pod_on(world, fleet.nodes()[0].metadata.name)
                fleet.set_class("rbac", "rbac-b")
                wait_until(fleet.running(2, "rbac-b"), 240, interval=0.5, what="rolled to rbac-b")
                fleet.delete("rbac")
                wait_until(lambda: not fleet.machines() and not fleet.nodes(), 180, interval=0.5, what="gone")
            except TimeoutError as err:
                pytest.fail(_stuck(world, fleet, str(err)))
        finally:
            fleet.close()

        assert not world.denied(), f"requests the chart's RBAC refused: {world.denied()}"
        unused = {}
        for component in ("informer", "worker"):
            grants = granted(world.control_docs + world.target_docs, component)
            used = world.used(world.control, component) | world.used(world.target, component)
            left = grants - used - set(NOT_EXERCISED[component])
            if left:
                unused[component] = sorted(left)
        assert not unused, (
            f"grants no request used (remove them, or name the path in NOT_EXERCISED): {unused}"
        )


def _drop_verb(docs: Docs, role_suffix: str, resource: str, verb: str) -> None:
    """Take one verb on one resource out of a rendered Role, leaving the rule's other grants."""
    for doc in docs:
        if doc["kind"] in ("Role", "ClusterRole") and doc["metadata"]["name"].endswith(role_suffix):
            for rule in doc["rules"]:
                if resource in rule["resources"] and verb in rule["verbs"]:
                    rule["resources"] = [r for r in rule["resources"] if r != resource]
                    kept = [v for v in rule["verbs"] if v != verb]
                    doc["rules"].append({**rule, "resources": [resource], "verbs": kept})
                    return
    raise AssertionError(f"no {verb} {resource} in *{role_suffix}")


def test_a_missing_grant_stalls_the_rollout_with_a_403(tmp_path: Path) -> None:
    def without_machine_create(control: Docs, target: Docs) -> None:
        _drop_verb(control, "-worker", "machines", "create")

    with chart_world(tmp_path, without_machine_create) as world:
        fleet = _fleet(world)
        try:
            fleet.create_secret("rbac-secret")
            fleet.create("machineclasses", machine_class("rbac-a", "local.small", MACHINE_NS, "rbac-secret"))
            fleet.create("machinedeployments", machine_deployment("rbac", MACHINE_NS, 2, "rbac-a"))

            def refused() -> list[dict[str, Any]]:
                return [
                    d for d in world.denied() if d.get("resource") == "machines" and d["verb"] == "create"
                ]

            wait_until(lambda: bool(refused()), 90, interval=0.5, what="a refused machine create")
            assert not fleet.machines()
            assert refused()[0]["user"].endswith(":mcm-tasks-worker")
        finally:
            fleet.close()
