"""Orphan-VM collection and the unmanaged-node sweep against the sandbox API server, real Redis and the
local cloud, through the ``safety`` reconciler (key ``orphan-vms``), in-process with compressed time."""

from __future__ import annotations

from typing import Any

import pytest

from mcm_sandbox.procs import ApiServer, wait_until
from mcm_sandbox.testing.informers import InformerThread, sandbox_settings
from mcm_tasks import kinds
from mcm_tasks.api import Machine, MachineClass
from mcm_tasks.api.constants import NODE_FINALIZER, NODE_LABEL_KEY, NOT_MANAGED_BY_MCM_ANNOTATION
from mcm_tasks.cache import get_reader
from mcm_tasks.controllers.common import context_io
from mcm_tasks.controllers.safety import ORPHAN_VMS, orphans_io
from mcm_tasks.controllers.safety.orphans import node_action
from mcm_tasks.controllers.safety.orphans_io import collect_orphans
from mcm_tasks.controllers.safety.register import reconcile_safety
from mcm_tasks.controllers.safety.scope import SafetyScope
from mcm_tasks.kube import ops
from mcm_tasks.settings import get_settings
from providers.driver import CreateMachineRequest, Secret
from providers.local import LocalDriver
from tests.integration.machine_support import USER_DATA, Env

# no coalescing window: these tests check what one run does, run after run
pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("every_request_runs")]


def orphan_scope() -> SafetyScope:
    """The scope the safety queue's registration builds for the orphan job."""
    return SafetyScope.begin(ORPHAN_VMS, ORPHAN_VMS)


def load_class(env: Env, name: str) -> MachineClass:
    return MachineClass.model_validate(ops.get(env.api, kinds.MACHINE_CLASS.resource, name, env.namespace))


def launch_vm(env: Env, machine_class: MachineClass, machine_name: str) -> str:
    """A VM in the local cloud carrying a machine name, as a create would leave it; its providerID."""
    stub = Machine.model_validate({"metadata": {"name": machine_name, "namespace": env.namespace}})
    request = CreateMachineRequest(
        machine=stub, machine_class=machine_class, secret=Secret(data={"userData": USER_DATA})
    )
    return LocalDriver(env.redis_url).create_machine(request).provider_id


def with_phase(env: Env, name: str, phase: str) -> None:
    machine = env.get(name)
    body = machine.model_copy(
        update={
            "status": machine.status.model_copy(
                update={"current_status": machine.status.current_status.model_copy(update={"phase": phase})}
            )
        }
    )
    ops.update_status(env.api, kinds.MACHINE.resource, ops.to_dict(body))


def live(env: Env, machine_name: str) -> list[str]:
    return sorted(vm.provider_id for vm in env.live_vms(machine_name))


def test_orphans_are_deleted_and_vms_a_machine_accounts_for_are_kept(env: Env) -> None:
    cls = load_class(env, env.setup_class())
    n = env.name
    vms = {
        base: launch_vm(env, cls, n(base)) for base in ("orphan", "owned", "stale", "creating", "crashloop")
    }
    env.machine(n("owned"), cls.metadata.name or "", providerID=vms["owned"])
    with_phase(env, n("owned"), "Running")
    env.machine(n("stale"), cls.metadata.name or "", providerID="local:///zone-a/i-replaced")
    with_phase(env, n("stale"), "Running")
    env.machine(n("creating"), cls.metadata.name or "")  # no status yet: phase ""
    env.machine(n("crashloop"), cls.metadata.name or "")
    with_phase(env, n("crashloop"), "CrashLoopBackOff")

    assert reconcile_safety(ORPHAN_VMS) is None

    assert live(env, n("orphan")) == [], "a VM without a machine is deleted"
    assert live(env, n("stale")) == [], "a VM whose machine has another providerID is deleted"
    assert live(env, n("owned")) == [vms["owned"]]
    assert live(env, n("creating")) == [vms["creating"]], "a machine being created keeps its VM"
    assert live(env, n("crashloop")) == [vms["crashloop"]]
    assert collect_orphans(orphan_scope()).deleted == 0, "a second pass finds nothing left"


def test_a_class_that_cannot_be_listed_does_not_stop_the_others_and_a_running_create_is_respected(
    env: Env,
) -> None:
    good = load_class(env, env.setup_class())
    env.machine_class(env.name("broken"), {}, secret=env.name("missing-secret"), reconcile=False)
    orphan = launch_vm(env, good, env.name("orphan"))
    in_flight = launch_vm(env, good, env.name("in-flight"))  # its Machine is not visible yet

    with context_io.creation_in_flight(
        f"{env.namespace}/{env.name('in-flight')}", get_settings().reconcile_lock_ttl
    ):
        report = collect_orphans(orphan_scope())

    assert (report.classes, report.skipped_classes, report.vms, report.deleted) == (2, 1, 2, 1)
    assert live(env, env.name("orphan")) == [] and orphan
    assert live(env, env.name("in-flight")) == [in_flight]


def node_body(name: str, *, annotated: bool = False, finalized: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"kubernetes.io/hostname": name}}
    if annotated:
        meta["annotations"] = {NOT_MANAGED_BY_MCM_ANNOTATION: "1"}
    if finalized:
        meta["finalizers"] = [NODE_FINALIZER]
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta}


def node_meta(env: Env, name: str) -> dict[str, Any]:
    found = env.node(name)
    assert found is not None
    return dict(found["metadata"])


def test_nodes_without_a_machine_are_marked_not_managed_once_older_than_the_creation_timeout(
    env: Env,
) -> None:
    cls = env.setup_class()
    unclaimed, claimed = env.name("unclaimed"), env.name("claimed")
    ops.create(env.api, kinds.NODE.resource, node_body(unclaimed, finalized=True))
    ops.create(env.api, kinds.NODE.resource, node_body(claimed, annotated=True))
    env.machine(env.name("m"), cls, labels={NODE_LABEL_KEY: claimed})
    try:
        reconcile_safety(ORPHAN_VMS)  # creation timeout 60 s: the unclaimed node is too young to judge
        meta = node_meta(env, unclaimed)
        assert NOT_MANAGED_BY_MCM_ANNOTATION not in (meta.get("annotations") or {})
        assert meta.get("finalizers") == [NODE_FINALIZER]
        assert NOT_MANAGED_BY_MCM_ANNOTATION not in (node_meta(env, claimed).get("annotations") or {})

        env.settings(machine_creation_timeout="1s")

        def marked() -> bool:
            reconcile_safety(ORPHAN_VMS)
            return NOT_MANAGED_BY_MCM_ANNOTATION in (node_meta(env, unclaimed).get("annotations") or {})

        wait_until(marked, 10, interval=0.3, what="the unclaimed node to be marked")
        meta = node_meta(env, unclaimed)
        assert meta["annotations"][NOT_MANAGED_BY_MCM_ANNOTATION] == "1"
        assert not meta.get("finalizers"), "MCM's node finalizer is removed from a node it does not manage"
        assert NOT_MANAGED_BY_MCM_ANNOTATION not in (node_meta(env, claimed).get("annotations") or {})
    finally:
        for name in (unclaimed, claimed):
            ops.delete(env.api, kinds.NODE.resource, name)


def test_from_the_mirror_orphans_go_and_only_nodes_a_change_is_possible_for_are_decoded(
    env: Env, apiserver: ApiServer, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At rest every Node is claimed by one machine and unannotated: the sweep does not decode it
    (``may_need_action``); a claimed node carrying the annotation, and an unclaimed one, are judged."""
    cls = load_class(env, env.setup_class())
    n, class_name = env.name, cls.metadata.name or ""
    owned, orphan = launch_vm(env, cls, n("owned")), launch_vm(env, cls, n("orphan"))
    plain, annotated, unclaimed = n("plain"), n("annotated"), n("unclaimed")
    env.machine(n("owned"), class_name, providerID=owned, labels={NODE_LABEL_KEY: plain})
    with_phase(env, n("owned"), "Running")
    env.machine(n("other"), class_name, labels={NODE_LABEL_KEY: annotated})
    for body in (
        node_body(plain),
        node_body(annotated, annotated=True),
        node_body(unclaimed, finalized=True),
    ):
        ops.create(env.api, kinds.NODE.resource, body)
    judged: list[str] = []

    def spy(node: Any, *args: Any) -> Any:
        judged.append(node["metadata"]["name"])
        return node_action(node, *args)

    monkeypatch.setattr(orphans_io, "node_action", spy)
    env.settings(machine_creation_timeout="1s")
    settings = sandbox_settings(apiserver.kubeconfig, redis_url, env.namespace)
    try:
        with InformerThread(settings) as informer:
            wait_until(informer.synced, 15, what="mirror synced")
            reader = get_reader()
            wait_until(
                lambda: (
                    {plain, annotated, unclaimed} <= set(reader.keys(kinds.NODE.mirror))
                    and len(reader.keys(kinds.MACHINE.mirror)) == 2
                ),
                15,
                what="machines and nodes mirrored",
            )

            def swept() -> bool:
                judged.clear()
                reconcile_safety(ORPHAN_VMS)
                return NOT_MANAGED_BY_MCM_ANNOTATION in (node_meta(env, unclaimed).get("annotations") or {})

            wait_until(swept, 10, interval=0.3, what="the unclaimed node to be marked")
        assert live(env, n("orphan")) == [] and orphan
        assert live(env, n("owned")) == [owned]
        assert NOT_MANAGED_BY_MCM_ANNOTATION not in (node_meta(env, annotated).get("annotations") or {})
        assert plain not in judged, "a node claimed once without the annotation is not decoded"
        assert unclaimed in judged
    finally:
        for name in (plain, annotated, unclaimed):
            ops.delete(env.api, kinds.NODE.resource, name)
