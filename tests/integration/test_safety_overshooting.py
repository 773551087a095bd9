"""Overshooting against the sandbox API server: MachineSets (and their MachineDeployment) frozen and
unfrozen by machine counts and by the unfreeze annotation, through the ``safety`` reconciler (key
``overshooting``). No MachineSet controller runs, so machine counts are exactly what the test makes."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from mcm_sandbox.procs import ApiServer, wait_until
from mcm_sandbox.testing.hostile import nested
from mcm_sandbox.testing.informers import InformerThread, sandbox_settings
from mcm_tasks import kinds
from mcm_tasks.api.constants import FREEZE_LABEL_KEY, UNFREEZE_ANNOTATION
from mcm_tasks.cache import get_reader
from mcm_tasks.cache.reader import CacheReader
from mcm_tasks.controllers.problems_io import UNREADABLE_REASON
from mcm_tasks.controllers.safety import OVERSHOOTING
from mcm_tasks.controllers.safety.register import reconcile_safety
from mcm_tasks.kube import ops
from mcm_tasks.kube.resources import Resource
from tests.integration.machine_support import Env

# no coalescing window: these tests check what one run does, run after run
pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("every_request_runs")]

API = "machine.sapcloud.io/v1alpha1"
SELECTOR = {"matchLabels": {"app": "w"}}


def template() -> dict[str, Any]:
    return {"metadata": {"labels": {"app": "w"}}, "spec": {"class": {"kind": "MachineClass", "name": "c"}}}


def controller_ref(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    return {"apiVersion": API, "kind": obj["kind"], "name": meta["name"], "uid": meta["uid"],
            "controller": True, "blockOwnerDeletion": True}  # fmt: skip


def deployment(env: Env, name: str, replicas: int, max_surge: int | str) -> dict[str, Any]:
    body = {
        "apiVersion": API,
        "kind": "MachineDeployment",
        "metadata": {"name": name, "namespace": env.namespace},
        "spec": {
            "replicas": replicas,
            "selector": SELECTOR,
            "template": template(),
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": max_surge, "maxUnavailable": 0},
            },
        },
    }
    return ops.create(env.api, kinds.MACHINE_DEPLOYMENT.resource, body, env.namespace)


def machine_set(
    env: Env,
    name: str,
    replicas: int,
    owner: dict[str, Any] | None = None,
    template_spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": env.namespace}
    if owner is not None:
        meta["ownerReferences"] = [controller_ref(owner)]
    body = {
        "apiVersion": API,
        "kind": "MachineSet",
        "metadata": meta,
        "spec": {"replicas": replicas, "selector": SELECTOR, "template": template()},
    }
    body["spec"]["template"]["spec"].update(template_spec or {})
    return ops.create(env.api, kinds.MACHINE_SET.resource, body, env.namespace)


def add_machines(env: Env, owner: dict[str, Any], n: int) -> list[str]:
    names = []
    for _ in range(n):
        body = {
            "apiVersion": API,
            "kind": "Machine",
            "metadata": {"generateName": f"{owner['metadata']['name']}-", "namespace": env.namespace,
                         "labels": {"app": "w"}, "ownerReferences": [controller_ref(owner)]},
            "spec": {"class": {"kind": "MachineClass", "name": "c"}},
        }  # fmt: skip
        names.append(ops.create(env.api, kinds.MACHINE.resource, body, env.namespace)["metadata"]["name"])
    return names


def read(env: Env, res: Resource, name: str) -> dict[str, Any]:
    found = ops.get(env.api, res, name, env.namespace)
    assert found is not None
    return found


def frozen_state(env: Env, res: Resource, name: str) -> tuple[bool, str | None]:
    """(freeze label set, reason of a True Frozen condition or None), read from the raw API object."""
    obj = read(env, res, name)
    labels = obj["metadata"].get("labels") or {}
    key = "machineSetCondition" if res is kinds.MACHINE_SET.resource else "conditions"
    conditions = (obj.get("status") or {}).get(key) or []
    frozen = [c for c in conditions if c["type"] == "Frozen" and c["status"] == "True"]
    return labels.get(FREEZE_LABEL_KEY) == "True", frozen[0]["reason"] if frozen else None


FROZEN = (True, "OverShootingReplicaCount")
FREE = (False, None)


def check() -> None:
    assert reconcile_safety(OVERSHOOTING) is None


def annotate(env: Env, res: Resource, name: str, value: str | None) -> None:
    ops.patch(env.api, res, name, {"metadata": {"annotations": {UNFREEZE_ANNOTATION: value}}}, env.namespace)


def test_a_set_over_its_deployment_limit_freezes_with_its_deployment_and_thaws_below_it(env: Env) -> None:
    d_name, s_name = env.name("d"), env.name("s")
    d = deployment(env, d_name, replicas=1, max_surge=1)  # higher = 1 + 1 + 2 = 4, lower = 3
    s = machine_set(env, s_name, replicas=1, owner=d)
    machines = add_machines(env, s, 3)
    check()
    assert (
        frozen_state(env, kinds.MACHINE_SET.resource, s_name) == FREE
        and frozen_state(env, kinds.MACHINE_DEPLOYMENT.resource, d_name) == FREE
    )

    machines += add_machines(env, s, 1)
    check()
    assert frozen_state(env, kinds.MACHINE_SET.resource, s_name) == FROZEN
    assert frozen_state(env, kinds.MACHINE_DEPLOYMENT.resource, d_name) == FROZEN
    assert "FrozeMachineSet" in env.event_reasons(s_name)
    assert "FrozeMachineDeployment" in env.event_reasons(d_name)
    condition = read(env, kinds.MACHINE_SET.resource, s_name)["status"]["machineSetCondition"][0]
    assert "is 4 >= 4 which is the Max-ScaleUp-Limit" in condition["message"]
    version = read(env, kinds.MACHINE_SET.resource, s_name)["metadata"]["resourceVersion"]
    check()
    assert read(env, kinds.MACHINE_SET.resource, s_name)["metadata"]["resourceVersion"] == version, (
        "a frozen set is left alone"
    )

    ops.delete(env.api, kinds.MACHINE.resource, machines.pop(), env.namespace)  # 3 = lower
    check()
    assert (
        frozen_state(env, kinds.MACHINE_SET.resource, s_name) == FREE
        and frozen_state(env, kinds.MACHINE_DEPLOYMENT.resource, d_name) == FREE
    )
    assert "UnfrozeMachineSet" in env.event_reasons(s_name)
    assert "UnfrozeMachineDeployment" in env.event_reasons(d_name)


def test_the_unfreeze_annotation_thaws_at_once_and_is_removed(env: Env) -> None:
    d_name, s_name = env.name("d"), env.name("s")
    d = deployment(env, d_name, replicas=4, max_surge="25%")  # higher = 4 + 1 + 2 = 7
    s = machine_set(env, s_name, replicas=4, owner=d)
    add_machines(env, s, 7)
    check()
    assert frozen_state(env, kinds.MACHINE_SET.resource, s_name) == FROZEN

    annotate(env, kinds.MACHINE_SET.resource, s_name, "True")
    check()
    assert frozen_state(env, kinds.MACHINE_SET.resource, s_name) == FREE
    assert frozen_state(env, kinds.MACHINE_DEPLOYMENT.resource, d_name) == FREE
    assert UNFREEZE_ANNOTATION not in (
        read(env, kinds.MACHINE_SET.resource, s_name)["metadata"].get("annotations") or {}
    )
    check()
    assert frozen_state(env, kinds.MACHINE_SET.resource, s_name) == FROZEN, (
        "still overshooting: frozen again next pass"
    )

    annotate(
        env, kinds.MACHINE_DEPLOYMENT.resource, d_name, "True"
    )  # on the deployment: thaws the deployment and its sets
    check()
    assert frozen_state(env, kinds.MACHINE_SET.resource, s_name) == FREE
    assert frozen_state(env, kinds.MACHINE_DEPLOYMENT.resource, d_name) == FREE
    assert UNFREEZE_ANNOTATION not in (
        read(env, kinds.MACHINE_DEPLOYMENT.resource, d_name)["metadata"].get("annotations") or {}
    )


def test_every_overshooting_set_freezes_in_one_pass_including_standalone_ones(env: Env) -> None:
    d = deployment(env, env.name("d"), replicas=1, max_surge=0)  # higher = 3
    a = machine_set(env, env.name("a"), replicas=1, owner=d)
    b = machine_set(env, env.name("b"), replicas=0, owner=d)
    alone = machine_set(env, env.name("alone"), replicas=1)  # standalone: higher = 2·1 + 2 = 4
    quiet = machine_set(env, env.name("quiet"), replicas=2)  # higher = 6
    add_machines(env, a, 3)
    add_machines(env, b, 3)
    add_machines(env, alone, 4)
    add_machines(env, quiet, 5)
    check()
    for s in (a, b, alone):
        assert frozen_state(env, kinds.MACHINE_SET.resource, s["metadata"]["name"]) == FROZEN
    assert frozen_state(env, kinds.MACHINE_SET.resource, quiet["metadata"]["name"]) == FREE
    assert frozen_state(env, kinds.MACHINE_DEPLOYMENT.resource, d["metadata"]["name"]) == FROZEN


def test_sets_it_cannot_read_or_judge_are_skipped_and_the_healthy_one_beside_them_freezes(env: Env) -> None:
    """Issue 13, item 6: negative replicas mean nothing, so they must not freeze a set (its higher
    limit would be below zero); a set too deep to parse gets a Warning Event; neither stops the pass."""
    negative = machine_set(env, env.name("negative"), replicas=-5)
    unreadable = machine_set(
        env, env.name("deep"), replicas=1, template_spec={"nodeTemplate": {"spec": nested(110)}}
    )
    good = machine_set(env, env.name("good"), replicas=1)  # standalone: higher = 2·1 + 2 = 4
    for s in (negative, unreadable, good):
        add_machines(env, s, 4)
    check()
    assert frozen_state(env, kinds.MACHINE_SET.resource, good["metadata"]["name"]) == FROZEN
    assert frozen_state(env, kinds.MACHINE_SET.resource, negative["metadata"]["name"]) == FREE
    assert frozen_state(env, kinds.MACHINE_SET.resource, unreadable["metadata"]["name"]) == FREE
    assert UNREADABLE_REASON in env.event_reasons(unreadable["metadata"]["name"])


def unreadable_machine(env: Env, owner: dict[str, Any]) -> str:
    """A machine of ``owner`` our model refuses (a node template nested too deep): still a VM."""
    body = {
        "apiVersion": API,
        "kind": "Machine",
        "metadata": {"generateName": f"{owner['metadata']['name']}-deep-", "namespace": env.namespace,
                     "labels": {"app": "w"}, "ownerReferences": [controller_ref(owner)]},
        "spec": {"class": {"kind": "MachineClass", "name": "c"}, "nodeTemplate": {"spec": nested(110)}},
    }  # fmt: skip
    return str(ops.create(env.api, kinds.MACHINE.resource, body, env.namespace)["metadata"]["name"])


@pytest.mark.parametrize("mirrored", [True, False], ids=["mirror", "live-list"])
def test_every_machine_a_set_controls_counts_an_unreadable_one_too_and_the_mirror_reads_none(
    env: Env, apiserver: ApiServer, redis_url: str, mirrored: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The count is the owner index's size once the mirror is synced (no machine read: at a thousand
    machines parsing them was the job's whole cost), a LIST's machines by their metadata otherwise;
    either way a machine our model refuses is counted, as the VM it is."""
    s = machine_set(env, env.name("s"), replicas=1)  # standalone: higher = 2·1 + 2 = 4
    add_machines(env, s, 3)
    unreadable_machine(env, s)
    read: list[str] = []
    for method in ("list", "list_stored", "list_stored_if_synced", "get_many", "get_many_stored"):
        original = getattr(CacheReader, method)

        def spy(self: CacheReader, kind: str, *args: Any, _original: Any = original) -> Any:
            read.append(kind)
            return _original(self, kind, *args)

        monkeypatch.setattr(CacheReader, method, spy)
    settings = sandbox_settings(apiserver.kubeconfig, redis_url, env.namespace)
    with InformerThread(settings) if mirrored else contextlib.nullcontext() as informer:
        if informer is not None:
            wait_until(informer.synced, 15, what="mirror synced")
            wait_until(
                lambda: len(get_reader().keys(kinds.MACHINE.mirror)) == 4, 15, what="machines mirrored"
            )
        read.clear()
        check()
    assert frozen_state(env, kinds.MACHINE_SET.resource, s["metadata"]["name"]) == FROZEN
    assert kinds.MACHINE.mirror not in read, "no machine is read from the mirror"
