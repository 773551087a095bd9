"""The API-server freeze against the sandbox API server made to answer 503 (its fault injection),
with the freeze state in real Redis, through the ``safety`` reconciler (key ``apiserver``)."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from mcm_sandbox.procs import ApiServer, wait_until
from mcm_sandbox.testing.hostile import nested
from mcm_tasks import kinds
from mcm_tasks.controllers.common.frozen_io import is_frozen
from mcm_tasks.controllers.machine.metrics_io import MachineCollector
from mcm_tasks.controllers.machine.reconcile import reconcile_machine
from mcm_tasks.controllers.problems_io import UNREADABLE_REASON
from mcm_tasks.controllers.safety import APISERVER
from mcm_tasks.controllers.safety.apiserver import RESET_DESCRIPTION
from mcm_tasks.controllers.safety.apiserver_io import down_since_key
from mcm_tasks.controllers.safety.register import reconcile_safety
from mcm_tasks.kube import ops
from mcm_tasks.queue import Requeue
from mcm_tasks.queue.messages import queue_keys
from mcm_tasks.redisdb import get_redis
from tests.integration.machine_support import Env

pytestmark = pytest.mark.integration

TIMEOUT = 1.0


class Faults:
    """503s from the sandbox API server for one resource's GETs, removed at the end of the test."""

    def __init__(self, server: ApiServer) -> None:
        self.url = server.url
        self.ids: list[str] = []

    def fail_gets(self, resource: str) -> str:
        rule = {"action": "error", "status_code": 503, "verbs": ["get"], "resources": [resource]}
        req = urllib.request.Request(
            f"{self.url}/sandbox/faults",
            data=json.dumps(rule).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=5) as resp:
            rule_id = str(json.loads(resp.read())["id"])
        self.ids.append(rule_id)
        return rule_id

    def remove(self, rule_id: str) -> None:
        req = urllib.request.Request(f"{self.url}/sandbox/faults/{rule_id}", method="DELETE")
        urllib.request.urlopen(req, timeout=5).close()
        self.ids.remove(rule_id)

    def clear(self) -> None:
        for rule_id in list(self.ids):
            self.remove(rule_id)


@pytest.fixture()
def faults(apiserver: ApiServer) -> Iterator[Faults]:
    f = Faults(apiserver)
    try:
        yield f
    finally:
        f.clear()


@pytest.fixture()
def fast(env: Env) -> Env:
    env.settings(
        machine_safety_apiserver_statuscheck_timeout=f"{TIMEOUT}s",
        machine_safety_apiserver_statuscheck_period=f"{TIMEOUT}s",
    )
    return env


def machine_in_phase(env: Env, base: str, cls: str, phase: str, **spec: Any) -> str:
    name = env.name(base)
    machine = env.machine(name, cls, **spec)
    status = machine.status.model_copy(
        update={"current_status": machine.status.current_status.model_copy(update={"phase": phase})}
    )
    ops.update_status(
        env.api, kinds.MACHINE.resource, ops.to_dict(machine.model_copy(update={"status": status}))
    )
    return name


def frozen_gauge() -> float:
    for family in MachineCollector().collect():
        if family.name == "mcm_machine_controller_frozen":
            return float(family.samples[0].value)
    raise AssertionError("no mcm_machine_controller_frozen")


def check() -> Requeue | None:
    return reconcile_safety(APISERVER)


def freeze_under(faults: Faults, resource: str) -> str:
    """Make ``resource`` fail and check until frozen; the fault's id."""
    rule = faults.fail_gets(resource)
    first = check()
    assert isinstance(first, Requeue) and TIMEOUT < first.after < TIMEOUT + 1, (
        "re-checks when the timeout ends"
    )
    assert get_redis().exists(down_since_key()) and not is_frozen()

    def frozen() -> bool:
        check()
        return is_frozen()

    wait_until(frozen, TIMEOUT + 10, interval=0.2, what="the machine controller to freeze")
    return rule


def test_control_down_past_the_timeout_freezes_and_up_again_resets_unknown_machines(
    fast: Env, faults: Faults
) -> None:
    env = fast
    cls = env.setup_class()
    unknown = machine_in_phase(env, "unknown", cls, "Unknown")
    running = machine_in_phase(env, "running", cls, "Running")
    before = env.get(running).metadata.resource_version
    assert check() is None and not is_frozen() and frozen_gauge() == 0

    rule = freeze_under(faults, "machines")
    assert frozen_gauge() == 1
    assert check() is None and is_frozen(), "still down: stays frozen"

    faults.remove(rule)
    assert check() is None
    assert not is_frozen() and not get_redis().exists(down_since_key()) and frozen_gauge() == 0
    reset = env.get(unknown)
    assert reset.status.current_status.phase == "Running"
    assert reset.status.last_operation.description == RESET_DESCRIPTION
    assert (reset.status.last_operation.type, reset.status.last_operation.state) == (
        "HealthCheck",
        "Successful",
    )
    assert env.get(running).metadata.resource_version == before, (
        "machines that were not Unknown are untouched"
    )
    delayed = get_redis().zrange(queue_keys("machine").delayed, 0, -1)
    assert {env.key(unknown), env.key(running)} <= set(delayed), (
        "every machine reconciles again after a delay"
    )


def test_target_down_freezes_machine_reconciles_until_it_answers(fast: Env, faults: Faults) -> None:
    env = fast
    cls = env.setup_class()
    name = env.name("m")
    env.machine(name, cls)
    rule = freeze_under(faults, "nodes")

    result = reconcile_machine(env.key(name))
    assert result == Requeue.long(), "a frozen machine controller only comes back later"
    assert env.get(name).status.current_status.phase == "", "and does nothing to the machine"

    faults.remove(rule)
    check()
    assert not is_frozen()


def test_servers_answering_again_before_the_timeout_clear_the_timer(fast: Env, faults: Faults) -> None:
    fast.settings(
        machine_safety_apiserver_statuscheck_timeout="60s", machine_safety_apiserver_statuscheck_period="60s"
    )
    rule = faults.fail_gets("machines")
    assert isinstance(check(), Requeue)
    assert check() is not None and get_redis().exists(down_since_key()) and not is_frozen()
    faults.remove(rule)
    assert check() is None
    assert not get_redis().exists(down_since_key()) and not is_frozen()


def test_an_unreadable_machine_does_not_keep_the_controller_frozen(fast: Env, faults: Faults) -> None:
    """Issue 13, item 6: the unfreeze reads every machine; one that does not parse gets a Warning
    Event and is left out, the Unknown machines beside it get their health timeout back."""
    env = fast
    cls = env.setup_class()
    unknown = machine_in_phase(env, "unknown", cls, "Unknown")
    bad = machine_in_phase(env, "deep", cls, "Unknown", nodeTemplate={"spec": nested(110)})
    rule = freeze_under(faults, "machines")

    faults.remove(rule)
    assert check() is None
    assert not is_frozen()
    assert env.get(unknown).status.current_status.phase == "Running"
    assert UNREADABLE_REASON in env.event_reasons(bad)
