"""Bad input gives a clear status and a Warning Event, a sensible requeue, no exception (no crash
loop) and no repeated writes; fixing the input lets the machine go on."""

from __future__ import annotations

from typing import Any

import pytest

from mcm_tasks import kinds
from mcm_tasks.api import Machine
from mcm_tasks.kube import ops
from mcm_tasks.queue import Requeue
from tests.integration.machine_support import Env

pytestmark = pytest.mark.integration


def reconcile_twice(env: Env, name: str) -> tuple[Requeue | None, Machine]:
    """Reconcile twice; the second must not write (status de-duplication)."""
    requeue = env.reconcile(name)
    first = env.get(name)
    again = env.reconcile(name)
    assert again == requeue
    assert env.get(name).metadata.resource_version == first.metadata.resource_version
    return requeue, first


def assert_problem(env: Env, machine: Machine, text: str, reason: str = "ConfigurationError") -> None:
    op = machine.status.last_operation
    assert op.state == "Failed"
    assert text in op.description, op.description
    events = [e for e in env.events(machine.metadata.name or "") if e.get("reason") == reason]
    assert events and events[0]["type"] == "Warning"
    assert text in events[0]["message"]


def test_missing_class(env: Env) -> None:
    name = env.name("a")
    env.machine(name, env.name("nope"))
    requeue, machine = reconcile_twice(env, name)
    assert requeue is not None and requeue.after == 30.0
    assert_problem(env, machine, f"MachineClass {env.name('nope')} not found")
    assert machine.status.last_operation.error_code == "ConfigurationError"
    assert machine.status.current_status.phase == ""


def test_missing_secret_then_created(env: Env) -> None:
    cls, secret = env.name("class"), env.name("secret")
    env.machine_class(cls, secret=secret)
    name = env.name("b")
    env.machine(name, cls)
    requeue, machine = reconcile_twice(env, name)
    assert requeue is not None and requeue.after == 1.0
    assert_problem(
        env, machine, f"Secret {env.namespace}/{secret} referenced by MachineClass {cls} not found"
    )
    assert env.live_vms(name) == []

    env.secret(secret)
    env.reconcile(name)
    fixed = env.get(name)
    assert fixed.status.current_status.phase == "Pending"
    assert fixed.status.last_operation.state == "Processing"


def test_missing_user_data(env: Env) -> None:
    cls, secret = env.name("class"), env.name("secret")
    env.secret(secret, {"providerAccessKeyId": b"AKIA-not-shown"})
    env.machine_class(cls, secret=secret)
    name = env.name("c")
    env.machine(name, cls)
    requeue, machine = reconcile_twice(env, name)
    assert requeue is not None and requeue.after == 1.0
    assert_problem(env, machine, f"Secret data of MachineClass {cls} has no userData")
    assert "AKIA" not in str(env.events(name)) and "AKIA" not in machine.model_dump_json()


def test_invalid_class(env: Env) -> None:
    cls = env.setup_class(
        node_template={"capacity": {"cpu": "2"}, "instanceType": "t", "region": "r", "zone": "z"}
    )
    name = env.name("d")
    env.machine(name, cls)
    requeue, machine = reconcile_twice(env, name)
    assert requeue is not None and requeue.after == 1.0
    assert_problem(env, machine, f"MachineClass {cls} is invalid")
    assert "nodeTemplate.capacity.gpu" in machine.status.last_operation.description
    assert env.live_vms(name) == []


@pytest.mark.parametrize(
    "provider_spec",
    [{"bootDelaySeconds": "soon"}, {"noSuchField": 1}, {"failCreates": {"count": -1}}],
)
def test_malformed_provider_spec(env: Env, provider_spec: dict[str, Any]) -> None:
    cls = env.setup_class(provider_spec)
    name = env.name("e")
    env.machine(name, cls)
    requeue, machine = reconcile_twice(env, name)
    assert requeue is not None and requeue.after == 2.0  # MediumRetry for InvalidArgument
    assert machine.status.current_status.phase == "CrashLoopBackOff"
    assert machine.status.last_operation.error_code == "InvalidArgument"
    assert_problem(env, machine, "providerSpec", reason="MachineCrashLoopBackOff")
    assert env.live_vms(name) == []


def test_unknown_provider(env: Env) -> None:
    secret, cls = env.name("secret"), env.name("class")
    env.secret(secret)
    env.machine_class(cls, secret=secret, provider="no-such-cloud")
    name = env.name("f")
    env.machine(name, cls)
    requeue, machine = reconcile_twice(env, name)
    assert requeue is not None and requeue.after == 30.0
    assert_problem(env, machine, "unknown provider 'no-such-cloud'")


def test_invalid_machine(env: Env) -> None:
    cls = env.setup_class()
    name = env.name("g")
    env.machine(name, cls, drainTimeout="soon")
    requeue, machine = reconcile_twice(env, name)
    assert requeue is not None and requeue.after == 30.0
    assert_problem(env, machine, "validation of Machine failed")
    assert "spec.drainTimeout" in machine.status.last_operation.description


def test_machine_waits_for_the_class_finalizer_without_writing(env: Env) -> None:
    secret, cls = env.name("secret"), env.name("class")
    env.secret(secret)
    env.machine_class(cls, secret=secret, reconcile=False)
    name = env.name("h")
    env.machine(name, cls)
    requeue = env.reconcile(name)
    assert requeue is not None and requeue.after == 1.0
    waiting = env.get(name)
    assert waiting.status.current_status.phase == "" and not waiting.status.last_operation.description
    klass = ops.get(env.api, kinds.MACHINE_CLASS.resource, cls, env.namespace)
    assert klass is not None and not klass["metadata"].get("finalizers")


def test_a_fixed_problem_on_a_running_machine_is_cleared(env: Env) -> None:
    env.start_kubelet()
    cls = env.setup_class()
    name = env.name("i")
    env.machine(name, cls)
    env.reconcile_until(name, lambda m: m.status.current_status.phase == "Running")
    # the class loses a required node template field, then gets it back
    ops.patch(
        env.api,
        kinds.MACHINE_CLASS.resource,
        cls,
        {"nodeTemplate": {"capacity": {"cpu": "2"}, "instanceType": "t", "region": "r", "zone": "z"}},
        env.namespace,
    )
    env.reconcile(name)
    assert env.get(name).status.last_operation.error_code == "ConfigurationError"
    ops.patch(env.api, kinds.MACHINE_CLASS.resource, cls, {"nodeTemplate": None}, env.namespace)
    env.reconcile(name)
    cleared = env.get(name)
    assert cleared.status.last_operation.state == "Successful"
    assert cleared.status.current_status.phase == "Running"
