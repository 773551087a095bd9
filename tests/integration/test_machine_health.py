"""The health check against the sandbox: Ready=False → Unknown → Failed, and the permit giver keeping
at most one replacement in flight per MachineDeployment, across concurrent reconciles."""

from __future__ import annotations

import threading

import pytest

from mcm_sandbox.procs import wait_until
from mcm_tasks import kinds
from mcm_tasks.api import Machine
from mcm_tasks.api.constants import MCM_FINALIZER
from mcm_tasks.kube import ops
from tests.integration.machine_support import WAIT, Env, phase_is, running_machine

pytestmark = pytest.mark.integration

READY_FALSE = {"sandbox.mcm-tasks.io/condition-Ready": "False"}


def test_not_ready_node_goes_unknown_then_failed_after_the_health_timeout(env: Env) -> None:
    env.settings(machine_health_timeout="2s")
    env.start_kubelet()
    cls = env.setup_class()
    name = running_machine(env, "a", cls)

    env.annotate_node(name, READY_FALSE)
    unknown = env.reconcile_until(name, phase_is("Unknown"))
    assert unknown.status.last_operation.type == "HealthCheck"
    assert unknown.status.last_operation.description.startswith(f"Machine {name} is unhealthy")
    assert any(c.type == "Ready" and c.status == "False" for c in unknown.status.conditions)

    failed = env.reconcile_until(name, phase_is("Failed"))
    assert "health checks failing since last 2s minutes" in failed.status.last_operation.description
    assert {"MachineUnknown", "MachineFailed"} <= env.event_reasons(name)


def test_unknown_machine_recovers_when_the_node_is_ready_again(env: Env) -> None:
    env.start_kubelet()
    cls = env.setup_class()
    name = running_machine(env, "b", cls)
    env.annotate_node(name, READY_FALSE)
    env.reconcile_until(name, phase_is("Unknown"))
    env.annotate_node(name, {"sandbox.mcm-tasks.io/condition-Ready": None})
    back = env.reconcile_until(name, phase_is("Running"))
    assert back.status.last_operation.description == f"Machine {name} successfully re-joined the cluster"


def test_disable_health_timeout_keeps_it_unknown(env: Env) -> None:
    env.settings(machine_health_timeout="1s")
    env.start_kubelet()
    cls = env.setup_class()
    name = running_machine(env, "c", cls, disableHealthTimeout=True)
    env.annotate_node(name, READY_FALSE)
    unknown = env.reconcile_until(name, phase_is("Unknown"))
    wait_until(lambda: _past(unknown, 1.5), 5, what="health timeout to pass")
    env.reconcile(name)
    assert env.get(name).status.current_status.phase == "Unknown"


def _past(machine: Machine, seconds: float) -> bool:
    from mcm_tasks.api import now_utc

    since = machine.status.current_status.last_update_time
    return since is not None and (now_utc() - since).total_seconds() > seconds


def test_only_one_machine_of_a_deployment_is_failed_at_a_time(env: Env) -> None:
    # 4 of the zone's machines go unhealthy: a zone outage by default (issue 29), which would hold
    # them all; this test is about MCM's one-at-a-time rule
    env.settings(machine_health_timeout="1s", zone_unhealthy_threshold="0")
    env.start_kubelet()
    cls = env.setup_class()
    labels = {"name": env.name("deploy")}
    names = [running_machine(env, f"p{i}", cls, labels=labels) for i in range(3)]
    # a machine of another deployment is not held back
    other = running_machine(env, "other", cls, labels={"name": env.name("other-deploy")})

    for name in [*names, other]:
        env.annotate_node(name, READY_FALSE)
    for name in [*names, other]:
        env.reconcile_until(name, phase_is("Unknown"))
    wait_until(lambda: all(_past(env.get(n), 1.2) for n in [*names, other]), 10, what="health timeouts")

    def phases() -> list[str]:
        return [str(env.get(n).status.current_status.phase) for n in names]

    for _ in range(3):  # concurrent reconciles, as several workers would run them
        threads = [threading.Thread(target=env.reconcile, args=(n,)) for n in names]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert phases().count("Failed") == 1
    env.reconcile_until(other, phase_is("Failed"))

    held = [env.get(n) for n in names if env.get(n).status.current_status.phase == "Unknown"]
    assert len(held) == 2
    for m in held:
        assert m.status.last_operation.description == (
            f"Machine {m.metadata.name} couldn't be marked FAILED, other machines are getting replaced"
        )

    # the failed one is replaced (here: removed); the next one may fail now, still one at a time
    [failed] = [n for n in names if env.get(n).status.current_status.phase == "Failed"]
    _remove(env, failed)
    remaining = [n for n in names if n != failed]

    def next_failed() -> bool:
        for n in remaining:
            env.reconcile(n)
        return [env.get(n).status.current_status.phase for n in remaining].count("Failed") == 1

    wait_until(next_failed, WAIT, interval=0.2, what="the next machine to fail")
    for n in remaining:
        env.reconcile(n)
    assert [env.get(n).status.current_status.phase for n in remaining].count("Failed") == 1


def _remove(env: Env, name: str) -> None:
    machine = env.get(name)
    finalizers = [f for f in machine.metadata.finalizers if f != MCM_FINALIZER]
    ops.patch(env.api, kinds.MACHINE.resource, name, {"metadata": {"finalizers": finalizers}}, env.namespace)
    ops.delete(env.api, kinds.MACHINE.resource, name, env.namespace, missing_ok=True)


def _in_place_failed(env: Env, name: str, seconds_ago: float) -> None:
    """The state a failed in-place update leaves: phase InPlaceUpdateFailed, operation InPlaceUpdate."""
    from datetime import timedelta

    from mcm_tasks.api import format_time, now_utc

    machine = ops.get(env.api, kinds.MACHINE.resource, name, env.namespace)
    assert machine is not None
    since = format_time(now_utc() - timedelta(seconds=seconds_ago))
    machine["status"]["currentStatus"] = {"phase": "InPlaceUpdateFailed", "lastUpdateTime": since}
    machine["status"]["lastOperation"] = {
        "description": "Machine failed to update dependencies",
        "state": "Failed",
        "type": "InPlaceUpdate",
        "lastUpdateTime": since,
    }
    ops.update_status(env.api, kinds.MACHINE.resource, machine, env.namespace)


def test_a_failed_in_place_update_is_failed_through_the_permit_and_never_with_disable_health_timeout(
    env: Env,
) -> None:
    """Upstream ``reconcileMachineHealth``: an InPlaceUpdateFailed machine past its health timeout
    goes through ``tryMarkingMachineFailed`` (the deployment's permit: it waits while another
    machine of its deployment is being replaced), and stays InPlaceUpdateFailed with
    ``disableHealthTimeout``."""
    env.settings(machine_health_timeout="1s")
    env.start_kubelet()
    cls = env.setup_class()
    labels = {"name": env.name("inplace-deploy")}
    updated, replaced = (running_machine(env, f"u{i}", cls, labels=labels) for i in range(2))
    kept = running_machine(env, "u-kept", cls, labels={"name": env.name("other")}, disableHealthTimeout=True)
    env.annotate_node(replaced, READY_FALSE)
    env.reconcile_until(replaced, phase_is("Unknown"))
    env.reconcile_until(replaced, phase_is("Failed"))  # a replacement in flight in the deployment
    for name in (updated, kept):
        _in_place_failed(env, name, seconds_ago=5)

    for name in (updated, kept):
        env.reconcile(name)
    held = env.get(updated)
    assert held.status.current_status.phase == "InPlaceUpdateFailed"
    assert held.status.last_operation.description == (
        f"Machine {updated} couldn't be marked FAILED, other machines are getting replaced"
    )
    _remove(env, replaced)
    failed = env.reconcile_until(updated, phase_is("Failed"))
    assert failed.status.last_operation.type == "InPlaceUpdate"
    assert "health checks failing since last 1s minutes" in failed.status.last_operation.description
    env.reconcile(kept)
    assert env.get(kept).status.current_status.phase == "InPlaceUpdateFailed"
