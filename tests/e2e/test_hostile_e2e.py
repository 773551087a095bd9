"""A bad object harms only itself (issue 13, item 6), end to end in the sandbox.

Several hundred generated invalid and hostile objects (``mcm_sandbox.testing.hostile``) are applied
through the official client beside a healthy MachineDeployment, with the informer, real workers and
beat running the safety jobs on compressed periods. Then:
- no process died or restarted, and no log holds a traceback;
- every bad object the API server accepted is answered: a Warning Event on it, a problem on its
  status (a MachineDrainRule's ``Valid=False``), or it is gone (the garbage collector removes what
  a missing owner left behind);
- the healthy deployment scales 1 → 3 as usual, and no bad object got a VM.
"""

from __future__ import annotations

import base64
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kubernetes import client as k8s
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from mcm_sandbox import fleet
from mcm_sandbox.procs import wait_until
from mcm_sandbox.runner import Sandbox, _alive
from mcm_sandbox.testing.hostile import Generator, Hostile
from mcm_tasks import kinds
from mcm_tasks.kube import ops
from providers.local import LocalCloud
from tests.e2e.support import connected, running_sandbox

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

NS = "default"
SEED = 1313
COUNT = 300
WAIT = 90.0
ENV = {
    "MCM_LONG_RETRY": "10s",
    "MCM_CLASS_RESYNC_PERIOD": "10s",
    "MCM_MACHINE_SAFETY_ORPHAN_VMS_PERIOD": "3s",
    "MCM_MACHINE_SAFETY_OVERSHOOTING_PERIOD": "3s",
    "MCM_MACHINE_SAFETY_APISERVER_STATUSCHECK_PERIOD": "3s",
    "MCM_MACHINE_SAFETY_APISERVER_STATUSCHECK_TIMEOUT": "2s",
    "MCM_SAFETY_EVENT_MIN_INTERVAL": "1s",
}
#: in the pool secret's userData, which many bad classes reference: it must reach no log and no Event
SECRET_MARKER = b"hostile-fuzz-secret-7d1f"
USER_DATA = base64.b64encode(b"#!/bin/sh\necho <<MACHINE_NAME>> " + SECRET_MARKER + b"\n")

Clients = tuple[ApiClient, ApiClient, redis.Redis]


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    with running_sandbox(Path(tmp_path_factory.mktemp("hostile-e2e")), ENV, with_beat=True) as started:
        yield started


@pytest.fixture(scope="module")
def clients(sandbox: Sandbox) -> Iterator[Clients]:
    with connected(sandbox) as made:
        yield made


def _healthy(control: ApiClient) -> None:
    """The healthy pool: a secret, a class and a one-machine deployment, as the demo makes them."""
    secret = {"metadata": {"name": "pool-secret", "namespace": NS}, "data": {"userData": USER_DATA.decode()}}
    ops.create(control, kinds.SECRET.resource, secret)
    ops.create(
        control,
        kinds.MACHINE_CLASS.resource,
        fleet.machine_class("pool-class", "local.small", NS, "pool-secret"),
    )
    ops.create(
        control, kinds.MACHINE_DEPLOYMENT.resource, fleet.machine_deployment("healthy", NS, 1, "pool-class")
    )


def _running_healthy(control: ApiClient) -> int:
    return sum(
        1
        for m in ops.list_(control, kinds.MACHINE.resource, NS)["items"]
        if (m["metadata"].get("labels") or {}).get("name") == "healthy"
        and ((m.get("status") or {}).get("currentStatus") or {}).get("phase") == "Running"
        and not m["metadata"].get("deletionTimestamp")
    )


def _apply(control: ApiClient, objects: list[Hostile]) -> tuple[list[Hostile], list[Hostile]]:
    """Create each object through the official client; (accepted, rejected by the API server)."""
    custom = k8s.CustomObjectsApi(control)
    accepted, rejected = [], []
    for obj in objects:
        try:
            res = obj.resource
            custom.create_namespaced_custom_object(res.group, res.version, NS, res.plural, obj.body)
        except ApiException as err:
            assert err.status in (400, 413, 422), f"{obj.why}: {err.status} {err.reason}"
            rejected.append(obj)
        else:
            accepted.append(obj)
    return accepted, rejected


def _warned(control: ApiClient) -> set[tuple[str, str]]:
    events = k8s.CoreV1Api(control).list_namespaced_event(NS)
    return {
        (e.involved_object.kind, e.involved_object.name)
        for e in events.items
        if e.type == "Warning" and e.involved_object is not None
    }


def _status_problem(obj: dict[str, Any]) -> bool:
    status = obj.get("status") or {}
    operation = status.get("lastOperation") or {}
    conditions = status.get("conditions") or status.get("machineSetCondition") or []
    return operation.get("state") == "Failed" or any(
        (c.get("status") == "True" and c.get("type") == "ReplicaFailure")
        or (c.get("status") == "False" and c.get("type") == "Valid")  # a MachineDrainRule
        for c in conditions
    )


def _unanswered(control: ApiClient, accepted: list[Hostile]) -> list[Hostile]:
    custom = k8s.CustomObjectsApi(control)
    warned = _warned(control)
    out = []
    for obj in accepted:
        if (obj.kind, obj.name) in warned:
            continue
        try:
            res = obj.resource
            live = custom.get_namespaced_custom_object(res.group, res.version, NS, res.plural, obj.name)
        except ApiException as err:
            if err.status == 404:
                continue
            raise
        if not _status_problem(live):
            out.append(obj)
    return out


def _informer_problems(sandbox: Sandbox) -> float:
    """``mcm_informer_object_problems_total`` summed over its labels, from the informer's /metrics."""
    with urllib.request.urlopen(f"{sandbox.endpoints['informer']}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("mcm_informer_object_problems_total{")
    )


def _tracebacks(sandbox: Sandbox) -> dict[str, str]:
    found = {}
    for log in sorted((sandbox.dir / "logs").glob("*.log")):
        text = log.read_text(errors="replace")
        at = text.find("Traceback")
        if at >= 0:
            found[log.name] = text[max(0, at - 500) : at + 2500]
    return found


def test_hostile_objects_harm_only_themselves(sandbox: Sandbox, clients: Clients) -> None:
    control, _, client = clients
    pids = dict(sandbox.pids)
    _healthy(control)
    wait_until(lambda: _running_healthy(control) == 1, WAIT, what="the healthy deployment's first machine")

    objects = Generator(SEED, NS, "pool-secret").generate(COUNT)
    started = time.monotonic()
    accepted, rejected = _apply(control, objects)
    applied_in = time.monotonic() - started
    assert len(accepted) >= COUNT // 2, f"the API server took too few: {len(accepted)} of {COUNT}"

    # the healthy deployment scales as usual beside them
    ops.patch(control, kinds.MACHINE_DEPLOYMENT.resource, "healthy", {"spec": {"replicas": 3}}, NS)
    scale_started = time.monotonic()
    wait_until(lambda: _running_healthy(control) == 3, WAIT, what="the healthy deployment at 3")
    scaled_in = time.monotonic() - scale_started

    last: list[Hostile] = []

    def all_answered() -> bool:
        last[:] = _unanswered(control, accepted)
        return not last

    try:
        wait_until(all_answered, WAIT, what="every accepted bad object answered")
    except TimeoutError:
        listed = "\n".join(f"  {o.kind} {o.name}: {o.why}" for o in last[:40])
        raise AssertionError(
            f"{len(last)} of {len(accepted)} accepted bad objects unanswered:\n{listed}"
        ) from None

    dead = [name for name, pid in pids.items() if not _alive(pid)]
    assert not dead, f"processes died: {dead}"
    assert sandbox.pids == pids
    tracebacks = _tracebacks(sandbox)
    assert not tracebacks, "tracebacks in logs:\n" + "\n----\n".join(
        f"{k}:\n{v}" for k, v in tracebacks.items()
    )

    # the informer said why it could not use some of them: a metric and Events on the objects
    assert _informer_problems(sandbox) > 0
    events = k8s.CoreV1Api(control).list_namespaced_event(NS).items
    assert any(e.reason == "InvalidSelector" for e in events)
    # no secret in any message
    leaks = [e.message for e in events if SECRET_MARKER.decode() in (e.message or "")]
    assert not leaks, leaks
    for log in (sandbox.dir / "logs").glob("*.log"):
        text = log.read_bytes()
        assert SECRET_MARKER not in text and USER_DATA not in text, log.name

    # no bad object got a VM: every live VM belongs to the healthy pool's class
    classes = {vm.machine_class for vm in LocalCloud(client).all() if vm.live()}
    assert classes <= {f"{NS}/pool-class"}, classes
    print(
        f"hostile: {len(accepted)} accepted, {len(rejected)} rejected, applied in {applied_in:.1f}s; "
        f"healthy 1 -> 3 in {scaled_in:.1f}s"
    )
