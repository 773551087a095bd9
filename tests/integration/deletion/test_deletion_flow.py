"""The deletion flow's steps around the drain (reference §4.4) against the sandbox: forced deletion,
a VM or Node already gone, a machine that never got either, and a description nobody recognises."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from kubernetes import watch

from mcm_sandbox.procs import wait_until
from mcm_tasks.api.constants import MCM_FINALIZER
from mcm_tasks.controllers.common.context_io import creation_in_flight
from mcm_tasks.controllers.machine import deletion_io
from mcm_tasks.controllers.machine.deletion import reconcile_termination
from mcm_tasks.controllers.machine.deletion_steps import Step
from mcm_tasks.settings import get_settings
from providers.driver import DeleteMachineRequest
from tests.integration.deletion.support import (
    CLASS,
    GROUP,
    USER_DATA,
    VERSION,
    Env,
    Trace,
    assert_all_gone,
    drive,
    index,
    reconfigure,
    unique,
)

pytestmark = pytest.mark.integration

# the sandbox's fixtures, under their names


def test_force_deletion_label_deletes_pods_at_once_and_cleans_volume_attachments(env: Env) -> None:
    name = unique("force")
    env.launch(name, labels={"force-deletion": "1"})
    env.volume(f"{name}-f", f"vol-f-{name}")
    env.run_pod("guarded", name, labels={"app": "g"})
    env.run_pod("disk", name, claim=f"{name}-f")
    env.budget("never", {"app": "g"}, maxUnavailable=0)
    wait_until(lambda: env.running("guarded", "disk"), 15, what="pods running")
    wait_until(lambda: bool(env.storage.list_volume_attachment().items), 10, what="volume attached")
    env.delete_machine(name)
    started = time.monotonic()
    trace = drive(env, name)
    assert time.monotonic() - started < 15
    assert not any("Drain failed" in d for d in trace.descriptions)
    assert index(trace, "Force Drain successful. Delete Volume Attachments") < index(
        trace, "VM deletion was successful"
    )
    assert env.pod("guarded") is None and env.pod("disk") is None
    assert not [va for va in env.storage.list_volume_attachment().items if va.spec.node_name == name]
    assert_all_gone(env, name)


def test_vm_already_gone_at_deletion(env: Env) -> None:
    name = unique("novm")
    env.launch(name)
    env.run_pod("p", name)
    wait_until(lambda: env.running("p"), 15, what="pod running")
    request = DeleteMachineRequest(
        machine=env.machine(name), machine_class=env.machine_class(), secret=USER_DATA
    )
    env.driver.delete_machine(request)
    env.delete_machine(name)
    drive(env, name)
    assert env.pod("p") is None
    assert_all_gone(env, name)


def test_machine_without_node_or_vm_skips_the_drain(env: Env) -> None:
    name = unique("bare")
    env.custom.create_namespaced_custom_object(GROUP, VERSION, "default", "machines", _bare(name))
    env.delete_machine(name)
    trace = drive(env, name)
    assert trace.descriptions == [
        "Set machine status to termination. Now, getting VM Status",
        # GetMachineStatus said NotFound: on through the drain and DeleteMachine, as upstream does
        "VM was not found at provider. Moving forward to node drain. Initiate node drain",
        "Skipping drain as nodeName is not a valid one for machine. Initiate VM deletion",
        "VM deletion was successful. Initiate node object deletion",  # nothing to delete is success
        f'Label "node" not present on machine "{name}", continuing deletion flow. '
        "Initiate machine object finalizer removal",  # upstream #1097's words
    ]
    assert env.machine(name) is None


def test_without_target_cluster_a_labelled_machine_finds_no_node(env: Env) -> None:
    """Upstream's no-target mode: the node label names a Node nobody can look up, and the flow says so
    in ``deleteNodeObject``'s words for a missing Node (upstream #1097 dropped the combined text)."""
    from mcm_tasks.kube.clients import reset_clusters

    reconfigure(env, target_kubeconfig="none")
    reset_clusters()
    try:
        name = unique("nt")
        body = _bare(name)
        body["metadata"]["labels"] = {"node": f"{name}-node"}  # type: ignore[index]
        env.custom.create_namespaced_custom_object(GROUP, VERSION, "default", "machines", body)
        env.delete_machine(name)
        trace = drive(env, name)
        assert trace.descriptions == [
            "Set machine status to termination. Now, getting VM Status",
            "Running without target cluster, skipping node drain and volume attachment deletion. "
            "Initiate VM deletion",
            "VM deletion was successful. Initiate node object deletion",
            f'No node object found for "{name}-node", continuing deletion flow. '
            "Initiate machine object finalizer removal",
        ]
        assert env.machine(name) is None
    finally:
        reconfigure(env)
        reset_clusters()


@contextmanager
def watched_descriptions(env: Env, name: str) -> Iterator[list[str]]:
    """Every lastOperation description a watch on the Machine sees, in order, until it is deleted."""
    seen: list[str] = []
    deleted = threading.Event()
    w = watch.Watch()

    def run() -> None:
        stream = w.stream(env.custom.list_namespaced_custom_object, GROUP, VERSION, "default", "machines",
                          field_selector=f"metadata.name={name}", timeout_seconds=30)  # fmt: skip
        for event in stream:
            text = ((event["object"].get("status") or {}).get("lastOperation") or {}).get("description")
            if text and (not seen or seen[-1] != text):
                seen.append(text)
            if event["type"] == "DELETED":
                deleted.set()
                return

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield seen
    wait_until(deleted.is_set, 15, what=f"the watch to see {name} deleted")
    w.stop()
    thread.join(5)


def _bare(name: str) -> dict[str, object]:
    """A Machine with neither a VM nor a Node: its deletion has nothing to wait for."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Machine",
        "metadata": {"name": name, "namespace": "default", "finalizers": [MCM_FINALIZER]},
        "spec": {"class": {"kind": "MachineClass", "name": CLASS}},
    }


def test_one_pass_runs_every_step_that_moves_on_and_writes_only_where_it_stops(env: Env) -> None:
    """The default chains the steps: one reconcile takes a machine with nothing to wait for from its
    deletion to gone. A deliberate difference from MCM (it used to write each step's description):
    an observer sees the phase Terminating with step 1's description, its own write, and nothing
    else, since the pass ends by removing the finalizer and the Machine is gone with it."""
    reconfigure(env, deletion_steps_per_pass=7)
    name = unique("chain")
    env.custom.create_namespaced_custom_object(GROUP, VERSION, "default", "machines", _bare(name))
    with watched_descriptions(env, name) as seen:
        env.delete_machine(name)
        assert reconcile_termination(f"default/{name}") is None
        assert env.machine(name) is None
    assert seen == ["Set machine status to termination. Now, getting VM Status"]


def test_a_pass_that_waits_at_the_drain_writes_the_drain_description_there(env: Env) -> None:
    """A pod the budget will not let go: the pass moves through getVMStatus to the drain and waits
    there, writing the description it waits at (MCM's) once, after the Terminating phase."""
    reconfigure(env, deletion_steps_per_pass=7)
    name = unique("waits")
    env.launch(name)
    env.run_pod("held", name, labels={"app": "held"})
    env.run_pod("peer", "elsewhere", labels={"app": "held"})
    env.budget("hold", {"app": "held"}, minAvailable=1)  # 2 expected, 1 healthy, 1 must stay
    wait_until(lambda: env.running("held"), 15, what="pod running")
    wait_until(lambda: env.budget_status("hold").get("currentHealthy") == 1, 10, what="budget status")
    with watched_descriptions(env, name) as seen:
        env.delete_machine(name)
        result = reconcile_termination(f"default/{name}")
        assert result is not None and result.after is not None
        machine = env.machine(name)
        assert machine is not None
        assert machine.status.current_status.phase == "Terminating"
        assert machine.status.last_operation.description == "Initiate node drain"
        assert machine.status.last_operation.state == "Processing"
        env.policy.delete_namespaced_pod_disruption_budget("hold", env.namespace)
        drive(env, name)  # then, with the budget gone, the drain ends and the rest flows through
    assert seen == [
        "Machine is running",  # the watch's first sight of it
        "Set machine status to termination. Now, getting VM Status",
        "Initiate node drain",
    ]
    assert_all_gone(env, name)


class Killed(BaseException):
    """What SIGKILL does to a pass: nothing after it runs, no handler sees it."""


def test_a_worker_killed_after_the_vm_is_deleted_leaves_a_flow_the_next_pass_completes(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pass deletes the VM, its description not yet written, and dies: the Machine still shows
    the last written description, and the next pass repeats the steps after it (the drain of a
    drained node succeeds, deleting a VM that is gone moves on) to the end."""
    reconfigure(env, deletion_steps_per_pass=7)
    name = unique("killed")
    env.launch(name)
    env.delete_machine(name)

    def killed(_machine: object) -> None:
        raise Killed

    monkeypatch.setitem(deletion_io.DELETION_STEPS, Step.DELETE_NODE, killed)
    with pytest.raises(Killed):
        reconcile_termination(f"default/{name}")
    monkeypatch.undo()
    assert not env.live_vms(name)  # the VM went
    machine = env.machine(name)
    assert machine is not None and env.node(name) is not None
    assert (
        machine.status.last_operation.description
        == "Set machine status to termination. Now, getting VM Status"
    )

    reconfigure(env, deletion_steps_per_pass=1)  # a pass per step: the driver sees each description
    trace = drive(env, name)
    assert "Drain successful. Initiate VM deletion" in trace.descriptions
    assert index(trace, "Initiate node drain") < index(trace, "Initiate node object deletion")
    assert_all_gone(env, name)


def test_a_chained_pass_stops_at_its_step_limit_and_comes_back(env: Env) -> None:
    reconfigure(env, deletion_steps_per_pass=2)
    name = unique("limit")
    env.launch(name)
    env.delete_machine(name)
    result = reconcile_termination(f"default/{name}")
    assert result is not None and result.after == 0.05  # ConflictRetry, compressed
    machine = env.machine(name)
    assert machine is not None
    assert (
        machine.status.last_operation.description == "Initiate node drain"
    )  # two steps, one write at the limit
    trace = drive(env, name)
    assert trace.rounds < 7, "the rest of the flow also ran several steps per pass"
    assert_all_gone(env, name)


def test_a_creation_in_flight_holds_the_deletion_back(env: Env) -> None:
    reconfigure(env, deletion_steps_per_pass=7)
    name = unique("inflight")
    env.launch(name)
    env.delete_machine(name)
    with creation_in_flight(f"default/{name}", get_settings().reconcile_lock_ttl):
        result = reconcile_termination(f"default/{name}")
        assert result is not None and result.after == 0.5  # MediumRetry, compressed
        machine = env.machine(name)
        assert machine is not None and machine.status.current_status.phase != "Terminating"
    drive(env, name)
    assert_all_gone(env, name)


def test_node_deleted_by_hand(env: Env) -> None:
    name = unique("nonode")
    env.launch(name)
    env.run_pod("orphan", name)
    wait_until(lambda: env.running("orphan"), 15, what="pod running")
    env.core.delete_node(name)
    wait_until(lambda: env.node(name) is None, 5, what="node gone")
    env.delete_machine(name)
    trace = drive(env, name)
    assert env.pod("orphan") is None  # still evicted: it was bound to the node
    assert any(
        "Skipping deleteNodeVolAttachments" in d or "Drain successful" in d for d in trace.descriptions
    )
    assert f'No node object found for "{name}"' in trace.descriptions[-1]
    assert_all_gone(env, name)


def test_an_unrecognised_description_restarts_the_flow(env: Env) -> None:
    name = unique("lost")
    env.launch(name)
    env.delete_machine(name)
    drive(env, name, until=lambda t: "Initiate node drain" in t.descriptions)
    machine = env.machine(name)
    assert machine is not None
    body = machine.to_api()
    body["status"]["lastOperation"]["description"] = "written by someone else"
    env.custom.replace_namespaced_custom_object_status(GROUP, VERSION, "default", "machines", name, body)
    trace = drive(env, name, trace=Trace(descriptions=["written by someone else"]))
    assert trace.descriptions[1] == "Set machine status to termination. Now, getting VM Status"
    assert_all_gone(env, name)
