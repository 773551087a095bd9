"""The MachineDeployment tests that need the sandbox API server itself, not the recording fake the
others run on (tests/unit/test_machinedeployment_*.py): a MachineSet create the server refuses with a
500 (its fault injection), a set name it rejects with a 422 (its validation of names), and a live
pass reading nodes from the mirror a real informer keeps (its watch)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from mcm_sandbox.procs import ApiServer, wait_until
from mcm_sandbox.testing.informers import InformerThread, sandbox_settings
from mcm_tasks import kinds
from mcm_tasks.api import Obj
from mcm_tasks.cache.reader import CacheReader
from mcm_tasks.controllers.common import context_io as common_context
from mcm_tasks.controllers.machinedeployment.reconcile import reconcile_once
from tests.integration.machinedeployment_support import (
    World,
    _mcm_protected,
    _node_names,
    deployment_body,
    template,
)

pytestmark = pytest.mark.integration


def _progressing(world: World) -> tuple[str, str, str]:
    d = world.deployment()
    assert d is not None
    cond = next((c for c in d.status.conditions if c.type == "Progressing"), None)
    return ("", "", "") if cond is None else (str(cond.status), cond.reason, cond.message)


def test_a_live_pass_takes_the_rollouts_node_marks_from_the_mirror(
    world: World, apiserver: ApiServer, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second attempt of a pass after a Conflict decides the sizes on live MachineSets, but the
    taints and the scale-down protection (idempotent marks) take machines and nodes from the mirror:
    a LIST of every machine and node of a rollout of 300 was most of that attempt's time."""
    world.reconfigure(autoscaler_scaledown_annotation_during_rollout=True)
    world.create(deployment_body("pool", 3, surge=1, unavailable=0))
    world.settle()
    (v1,) = world.sets()
    with InformerThread(sandbox_settings(apiserver.kubeconfig, redis_url, world.namespace)) as informer:
        wait_until(informer.synced, 30.0, what="the mirror")
        names = _node_names(world, v1)
        reader = CacheReader()
        wait_until(
            lambda: len(reader.get_many(kinds.NODE.mirror, names)) == len(names), 10.0, what="nodes mirrored"
        )
        listed: list[str] = []
        real_list = common_context.ops.list_

        def list_(api: Any, resource: Any, *args: Any, **kwargs: Any) -> Any:
            listed.append(resource.plural)
            return real_list(api, resource, *args, **kwargs)

        monkeypatch.setattr(common_context.ops, "list_", list_)
        world.patch({"spec": {"template": template("class-v2")}})
        reconcile_once(world.namespace, world.name, live=True)

    assert "machinesets" in listed, listed  # the sizes are decided on live sets
    assert "machines" not in listed and "nodes" not in listed, listed
    assert all(_mcm_protected(world.node(n)) for n in names)


def _add_fault(server: ApiServer, rule: Obj) -> str:
    request = urllib.request.Request(
        server.url + "/sandbox/faults",
        data=json.dumps(rule).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=5) as resp:
        return str(json.loads(resp.read())["id"])


def _remove_fault(server: ApiServer, rule_id: str) -> None:
    request = urllib.request.Request(f"{server.url}/sandbox/faults/{rule_id}", method="DELETE")
    try:
        urllib.request.urlopen(request, timeout=5).close()
    except urllib.error.HTTPError as err:
        if err.code != 404:  # expired already
            raise


@pytest.fixture()
def failing_set_creates(apiserver: ApiServer) -> Iterator[str]:
    """The sandbox API server answers 500 to every MachineSet create while the rule is active (it
    expires on its own in case a test dies)."""
    rule_id = _add_fault(
        apiserver,
        {"action": "error", "status_code": 500, "verbs": ["create"], "resources": ["machinesets"],
         "message": "etcd is on fire", "duration_seconds": 60},
    )  # fmt: skip
    try:
        yield rule_id
    finally:
        _remove_fault(apiserver, rule_id)


def test_a_failed_set_create_is_reported_as_machine_set_create_error_until_it_succeeds(
    world: World, apiserver: ApiServer, failing_set_creates: str
) -> None:
    world.create(deployment_body("pool", 2))
    with pytest.raises(ApiException) as err:
        world.reconcile()  # the reconcile fails (the queue retries it) after recording the condition
    assert err.value.status == 500
    assert world.sets() == []
    status, reason, message = _progressing(world)
    assert (status, reason) == ("False", "MachineSetCreateError")
    assert message.startswith('Failed to create new machine set "pool-') and "etcd is on fire" in message
    (event,) = world.events("MachineSetCreateError")
    assert event["type"] == "Warning" and event["message"] == message

    _remove_fault(apiserver, failing_set_creates)
    world.reconcile()
    (created,) = world.sets()
    assert _progressing(world) == (
        "True",
        "NewMachineSetCreated",
        f'Created new machine set "{created.metadata.name}"',
    )
    world.settle()
    assert _progressing(world)[:2] == ("True", "NewMachineSetAvailable")


def test_a_set_name_the_api_server_rejects_is_a_machine_set_create_error(world: World) -> None:
    name = "p" * 250  # a valid deployment name, but <name>-<hash[:5]> exceeds the 253 characters
    world.create(deployment_body(name, 1))
    for _ in range(2):  # a permanent error: every pass fails the same way
        with pytest.raises(ApiException) as err:
            world.reconcile()
        assert err.value.status == 422
        status, reason, message = _progressing(world)
        assert (status, reason) == ("False", "MachineSetCreateError")
        assert "must be no more than 253 characters" in message
    assert world.sets() == []
