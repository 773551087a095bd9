"""InitializeMachine failing (§4.2): the local provider's ``failInitializes`` against a real Redis, then the
machine controller against it with the sandbox API server and the kubelet simulator.

MCM's contract: after a fresh create (or GetMachineStatus answering Uninitialized) the controller calls
InitializeMachine; a failure other than Unimplemented writes "Provider error: <err>. Initialize VM
Instance" (Create, Failed, the error's code), phase CrashLoopBackOff (Failed past the creation timeout),
and comes back after ShortRetry; the next pass finds the VM Uninitialized and initializes it again.
"""

from __future__ import annotations

from typing import Any

import pytest

from mcm_sandbox.kubelet.simulator import KubeletSimulator
from mcm_tasks.api import Machine, MachineClass
from providers.driver import (
    CreateMachineRequest,
    GetMachineStatusRequest,
    InitializeMachineRequest,
    Secret,
)
from providers.errors import Code, MachineError
from providers.local import LocalDriver
from tests.integration.machine_support import Env, phase_is

pytestmark = pytest.mark.integration

SECRET = Secret(data={"userData": b"#!/bin/sh\n"})


def _class(**spec: Any) -> MachineClass:
    return MachineClass.model_validate(
        {"metadata": {"name": "init", "namespace": "default"}, "provider": "local", "providerSpec": spec}
    )


def _machine(name: str) -> Machine:
    return Machine.model_validate(
        {"metadata": {"name": name, "namespace": "default"}, "spec": {"class": {"name": "init"}}}
    )


def _code_of(call: Any) -> Code:
    with pytest.raises(MachineError) as info:
        call()
    return info.value.code


# --- the local provider's fault injection ----------------------------------------------------------------


def test_local_driver_fail_initializes(redis_url: str) -> None:
    driver = LocalDriver(redis_url)
    cls, m = _class(failInitializes={"count": 2, "code": "Internal"}), _machine("m1")
    created = driver.create_machine(CreateMachineRequest(machine=m, machine_class=cls, secret=SECRET))
    status = GetMachineStatusRequest(machine=m, machine_class=cls, secret=SECRET)
    init = InitializeMachineRequest(machine=m, machine_class=cls, secret=SECRET)
    [vm] = driver.cloud.by_machine("m1")
    assert not vm.initialized and not vm.joins(vm.ready_at)  # its kubelet waits

    assert _code_of(lambda: driver.get_machine_status(status)) is Code.Uninitialized
    assert _code_of(lambda: driver.initialize_machine(init)) is Code.Internal
    assert _code_of(lambda: LocalDriver(redis_url).initialize_machine(init)) is Code.Internal  # shared budget
    assert _code_of(lambda: driver.get_machine_status(status)) is Code.Uninitialized

    done = driver.initialize_machine(init)
    assert (done.provider_id, done.node_name) == (created.provider_id, "m1")
    assert driver.get_machine_status(status).provider_id == created.provider_id
    [vm] = driver.cloud.by_machine("m1")
    assert vm.initialized and vm.joins(vm.ready_at)
    assert driver.initialize_machine(init).provider_id == created.provider_id  # idempotent once done

    # without the field a class needs no initialization: Unimplemented, and its VMs start initialized
    plain = _class()
    driver.create_machine(CreateMachineRequest(machine=_machine("m2"), machine_class=plain, secret=SECRET))
    init_plain = InitializeMachineRequest(machine=_machine("m2"), machine_class=plain, secret=SECRET)
    assert _code_of(lambda: driver.initialize_machine(init_plain)) is Code.Unimplemented
    [vm2] = driver.cloud.by_machine("m2")
    assert vm2.initialized


# --- the machine controller ------------------------------------------------------------------------------


def test_initialize_fails_twice_then_the_machine_is_reinitialized_and_runs(env: Env) -> None:
    cls = env.setup_class({"failInitializes": {"count": 2, "code": "Internal"}})
    name = env.name("a")
    env.machine(name, cls)

    # pass 1: the VM is launched and recorded on the machine, then InitializeMachine fails
    requeue = env.reconcile(name)
    first = env.get(name)
    assert requeue is not None and requeue.after == 1.0  # ShortRetry (an Internal create error: 2s)
    [vm] = env.live_vms(name)
    assert not vm.initialized
    assert first.spec.provider_id == vm.provider_id
    assert first.metadata.labels["node"] == name
    op = first.status.last_operation
    assert first.status.current_status.phase == "CrashLoopBackOff"
    assert op.description == (
        "Provider error: machine codes error: code = [Internal] message = [injected initialize failure "
        f"for class {env.namespace}/{cls} (failInitializes)]. Initialize VM Instance"
    )
    assert (op.type, op.state, op.error_code) == ("Create", "Failed", "Internal")
    [crash] = [e for e in env.events(name) if e["reason"] == "MachineCrashLoopBackOff"]
    assert crash["type"] == "Warning"
    assert crash["message"] == f"phase <none> -> CrashLoopBackOff: {op.description}"

    # an uninitialized VM's kubelet does not register its Node
    kubelet = KubeletSimulator(env.api, env.cloud(), heartbeat_interval=0.5, node_grace=2.0)
    assert "register" not in kubelet.tick()
    assert env.node(name) is None

    # pass 2: GetMachineStatus answers Uninitialized, so InitializeMachine runs again on the same VM
    # (no second create) and fails again; the same status is not written twice
    requeue = env.reconcile(name)
    assert requeue is not None and requeue.after == 1.0
    second = env.get(name)
    assert second.metadata.resource_version == first.metadata.resource_version
    assert [v.id for v in env.live_vms(name)] == [vm.id]

    # pass 3: the budget of two failures is spent: initialized, then Pending as after any create
    requeue = env.reconcile(name)
    assert requeue is not None and requeue.after == 1.0
    pending = env.get(name)
    assert pending.status.current_status.phase == "Pending"
    assert pending.status.current_status.timeout_active
    op = pending.status.last_operation
    assert (op.description, op.type, op.state, op.error_code) == (
        "Creating machine on cloud provider",
        "Create",
        "Processing",
        "",
    )
    [vm_after] = env.live_vms(name)
    assert vm_after.id == vm.id and vm_after.initialized
    assert pending.spec.provider_id == vm.provider_id

    env.start_kubelet()
    running = env.reconcile_until(name, phase_is("Running"))
    assert running.status.last_operation.description == f"Machine {name} successfully joined the cluster"
    assert (running.status.last_operation.type, running.status.last_operation.state) == (
        "Create",
        "Successful",
    )
    # the recovery is told by CrashLoopBackOff -> Pending; the join of the creation records no Event
    reasons = env.event_reasons(name)
    assert {"MachineCrashLoopBackOff", "MachinePending"} <= reasons and "MachineRunning" not in reasons
    assert [v.id for v in env.live_vms(name)] == [vm.id]


def test_initialization_failing_past_the_creation_timeout_fails_the_machine(env: Env) -> None:
    env.settings(machine_creation_timeout="2s")
    cls = env.setup_class({"failInitializes": {"count": 1000}})  # code: Uninitialized by default
    name = env.name("b")
    env.machine(name, cls)

    env.reconcile(name)
    crashing = env.get(name)
    assert crashing.status.current_status.phase == "CrashLoopBackOff"
    assert crashing.status.last_operation.error_code == "Uninitialized"

    failed = env.reconcile_until(name, phase_is("Failed"))
    op = failed.status.last_operation
    assert op.description.startswith("Provider error: machine codes error: code = [Uninitialized]")
    assert op.description.endswith(". Initialize VM Instance")
    assert (op.type, op.state, op.error_code) == ("Create", "Failed", "Uninitialized")
    assert "MachineFailed" in env.event_reasons(name)

    # a Failed machine is neither created nor initialized again; its VM waits for the machine's deletion
    [vm] = env.live_vms(name)
    env.reconcile(name)
    assert env.get(name).metadata.resource_version == failed.metadata.resource_version
    assert [v.id for v in env.live_vms(name)] == [vm.id] and not env.live_vms(name)[0].initialized
