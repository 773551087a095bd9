"""What one machine's deletion costs the API servers, request by request: the flow's writes are MCM's
(the Node's condition, cordon, finalizer and deletion, the Machine's finalizer) but for the status
writes, one per pass where it stops (here one: the Terminating phase; a pass that ends by removing the
finalizer writes no more), its Events two, and the Node is read from the mirror, never again from the
API server.

The requests are those the controller's own clients send to the sandbox API server (recorded on their
way out, all of them answered by the real server)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from kubernetes.client import ApiClient

from mcm_sandbox.procs import wait_until
from mcm_tasks.api import Machine
from mcm_tasks.api.constants import (
    NODE_FINALIZER,
    NODE_TERMINATING_CONDITION,
    NODE_TERMINATING_REASON_UNHEALTHY,
)
from mcm_tasks.controllers.common import context_io
from mcm_tasks.controllers.common.registration import mirror_pass
from mcm_tasks.controllers.machine.deletion import reconcile_termination
from tests.integration.deletion.support import (
    GROUP,
    VERSION,
    Env,
    assert_all_gone,
    reconfigure,
    unique,
)

pytestmark = pytest.mark.integration


def _resource(url: str) -> str:
    """``…/namespaces/default/machines/m/status`` → ``machines/status``; ``…/nodes/n`` → ``nodes``."""
    parts = url.split("?")[0].split("/")
    kinds = ("machines", "nodes", "events", "machinesets", "pods", "volumeattachments")
    for i, part in enumerate(parts):
        if part in kinds:
            rest = parts[i + 2 :] if len(parts) > i + 2 else []
            return "/".join([part, *rest])
    return "/".join(parts[-2:])


@contextmanager
def requests_sent() -> Iterator[list[tuple[str, str]]]:
    """(method, resource) of every request the controller's clients send meanwhile."""
    sent: list[tuple[str, str]] = []
    clients: list[ApiClient] = []
    for api in (context_io.control_api(), context_io.target_api()):
        if api is not None and all(api is not c for c in clients):
            clients.append(api)
    originals = [c.call_api for c in clients]

    def recording(original: Any) -> Any:
        def call_api(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            sent.append((method, _resource(url)))
            return original(method, url, *args, **kwargs)

        return call_api

    for c, original in zip(clients, originals, strict=True):
        c.call_api = recording(original)  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        for c, original in zip(clients, originals, strict=True):
            c.call_api = original  # type: ignore[method-assign]


def _deleting(name: str) -> bool:
    machine = context_io.get_machine(context_io.control_api(), name, "default")
    return machine is not None and machine.metadata.is_deleting


def test_a_machine_with_nothing_to_drain_costs_one_status_write_and_one_event(env: Env, mirror: Any) -> None:
    reconfigure(env, deletion_steps_per_pass=7)
    name = unique("writes")
    env.launch(name)
    env.core.patch_node(name, {"metadata": {"finalizers": [NODE_FINALIZER]}})  # as the node task adds it
    env.delete_machine(name)
    wait_until(
        lambda: NODE_FINALIZER in str(context_io.get_node(context_io.target_api(), name)),
        10,
        what="the mirror sees the node",
    )
    # else the pass may read the machine from the mirror before its deletion, and do nothing
    wait_until(lambda: _deleting(name), 10, what="the mirror sees the machine deleting")
    with requests_sent() as sent:
        assert reconcile_termination(f"default/{name}") is None  # one pass, nothing to wait for
    assert_all_gone(env, name)

    writes = Counter(call for call in sent if call[0] != "GET")
    assert writes == {
        # MCM writes five (a description per step): a deliberate difference, the pass writes step 1's
        # Terminating phase and, ending with the finalizer's removal, nothing more
        ("PUT", "machines/status"): 1,
        ("PATCH", "nodes/status"): 1,  # the Terminating condition
        ("PATCH", "nodes"): 2,  # cordon; the node finalizer
        ("DELETE", "nodes"): 1,
        ("PATCH", "machines"): 1,  # the machine finalizer
        ("POST", "events"): 1,  # MachineTerminating; a drain with nothing to do records none
    }
    assert ("GET", "nodes") not in sent  # read from the mirror, the finalizer removed by name
    assert sorted(reason for reason, _ in env.events(name)) == ["MachineTerminating"]


def test_a_failed_machine_s_node_keeps_the_unhealthy_reason_the_flow_gave_it(env: Env, mirror: Any) -> None:
    """MCM marks a Failed machine's Node Terminating with reason Unhealthy when the flow starts, and the
    drain's own condition keeps a reason already there. In one pass, as a worker runs it (the mirror
    read once per pass), the drain must see the Node as the pass's own write left it: not take the
    condition for absent, write it again and turn the reason into ScaleDown."""
    reconfigure(env, deletion_steps_per_pass=3)  # set Terminating, get the VM status, drain: then stop
    name = unique("failed")
    env.launch(name)
    body = {"status": {"currentStatus": {"phase": "Failed"}}}
    env.custom.patch_namespaced_custom_object_status(GROUP, VERSION, "default", "machines", name, body)
    env.delete_machine(name)

    def seen_failed_and_deleting() -> bool:
        machine = context_io.get_machine(context_io.control_api(), name, "default")
        return (
            machine is not None
            and machine.metadata.is_deleting
            and machine.status.current_status.phase == "Failed"
        )

    wait_until(seen_failed_and_deleting, 10, what="the mirror sees the failed machine deleting")
    with requests_sent() as sent, mirror_pass():  # as the worker's pass scope
        reconcile_termination(f"default/{name}")

    assert sent.count(("PATCH", "nodes/status")) == 1, "the condition is written once"
    conditions = (env.node(name) or {})["status"]["conditions"]
    terminating = next(c for c in conditions if c["type"] == NODE_TERMINATING_CONDITION)
    assert (terminating["status"], terminating["reason"]) == ("True", NODE_TERMINATING_REASON_UNHEALTHY)
    assert "Drain successful" in (env.machine(name) or Machine()).status.last_operation.description
