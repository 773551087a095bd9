"""The remediation budgets end to end in the sandbox (issue 29), with real workers, the informer and
the kubelet simulator on compressed time: ``max-replacements: 30%`` replaces 3 of 10 at once,
``max-unhealthy: 40%`` stops at 5 of 10 unhealthy and resumes when one heals, and a zone whose
kubelets all report NotReady keeps every machine while another zone is remediated, with no churn
once it heals.

Each test has its own zone (its own MachineClass), because the zone view spans the namespace. The
zone threshold is 60 % here so that the 5-of-10 short-circuit test is judged by ``max-unhealthy`` and
not by the zone rule (which a whole zone going down trips at any threshold)."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from kubernetes.client import ApiClient

from mcm_sandbox.procs import wait_until
from mcm_sandbox.runner import Sandbox
from mcm_tasks import kinds
from mcm_tasks.api import API_VERSION, Machine, MachineDeployment
from mcm_tasks.api.constants import MAX_REPLACEMENTS_ANNOTATION, MAX_UNHEALTHY_ANNOTATION
from mcm_tasks.api.meta import get_condition
from mcm_tasks.celery_app import celery_config
from mcm_tasks.controllers.common.remediation import REMEDIATION_ALLOWED, TOO_MANY_UNHEALTHY, ZONE_UNHEALTHY
from mcm_tasks.kube import ops
from mcm_tasks.queue.history import read_history
from mcm_tasks.settings import get_settings
from tests.e2e.support import connected, running_sandbox

pytestmark = [pytest.mark.e2e, pytest.mark.integration]
Clients = tuple[ApiClient, ApiClient, redis.Redis]

NS = "default"
WAIT = 120.0
HEALTH_TIMEOUT = 3.0
ENV = {
    "MCM_LONG_RETRY": "10s",
    "MCM_CLASS_RESYNC_PERIOD": "10s",
    "MCM_MACHINE_DRAIN_TIMEOUT": "5s",
    "MCM_MACHINE_HEALTH_TIMEOUT": f"{HEALTH_TIMEOUT:g}s",
    "MCM_ZONE_UNHEALTHY_THRESHOLD": "60%",
}
READY_FALSE = {"sandbox.mcm-tasks.io/condition-Ready": "False"}
READY_TRUE = {"sandbox.mcm-tasks.io/condition-Ready": "True"}


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    with running_sandbox(Path(tmp_path_factory.mktemp("remediation-e2e")), ENV, with_beat=False) as started:
        yield started


class Fleet:
    def __init__(self, clients: Clients) -> None:
        self.control, self.target, self.redis = clients

    def wait(self, predicate: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
        wait_until(predicate, timeout, interval=0.2, what=what)

    def zone_class(self, zone: str) -> str:
        """A MachineClass whose VMs boot in ``zone`` (their Nodes carry it as topology label)."""
        name = f"class-{zone}"
        ops.create(
            self.control,
            kinds.MACHINE_CLASS.resource,
            {
                "apiVersion": API_VERSION,
                "kind": "MachineClass",
                "metadata": {"name": name, "namespace": NS},
                "provider": "local",
                "providerSpec": {"bootDelaySeconds": 0.3, "zone": zone},
                "secretRef": {"name": "rem-secret", "namespace": NS},
            },
        )
        return name

    def deployment(self, name: str, replicas: int, class_name: str, annotations: dict[str, str]) -> None:
        labels = {"pool": name, "name": name}  # Gardener's ``name`` label: the permit key
        body = {
            "apiVersion": API_VERSION,
            "kind": "MachineDeployment",
            "metadata": {"name": name, "namespace": NS, "annotations": annotations},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"pool": name}},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"class": {"kind": "MachineClass", "name": class_name}},
                },
            },
        }
        ops.create(self.control, kinds.MACHINE_DEPLOYMENT.resource, body)
        self.wait(lambda: len(self.running(name)) == replicas, f"{replicas} machines of {name} Running")

    def machines(self, pool: str) -> list[Machine]:
        items = ops.list_(self.control, kinds.MACHINE.resource, NS, label_selector=f"pool={pool}")["items"]
        return [Machine.model_validate(m) for m in items]

    def phases(self, pool: str) -> dict[str, str]:
        return {m.metadata.name or "": str(m.status.current_status.phase) for m in self.machines(pool)}

    def running(self, pool: str) -> list[str]:
        return sorted(
            m.metadata.name or ""
            for m in self.machines(pool)
            if m.status.current_status.phase == "Running" and not m.metadata.is_deleting
        )

    def set_ready(self, names: list[str], ready: bool) -> None:
        for name in names:
            ops.patch(
                self.target,
                kinds.NODE.resource,
                name,
                {"metadata": {"annotations": READY_TRUE if ready else READY_FALSE}},
            )

    def condition(self, name: str) -> tuple[str, str, str]:
        raw = ops.get(self.control, kinds.MACHINE_DEPLOYMENT.resource, name, NS)
        found = get_condition(MachineDeployment.model_validate(raw).status.conditions, REMEDIATION_ALLOWED)
        return ("", "", "") if found is None else (found.status, found.reason, found.message)

    def events(self, name: str, reason: str) -> int:
        items = ops.list_(self.control, kinds.EVENT.resource, NS)["items"]
        return sum(
            int(e.get("count") or 1)
            for e in items
            if (e.get("involvedObject") or {}).get("name") == name and e.get("reason") == reason
        )

    def outcomes(self, machine: str) -> list[str]:
        return [r.outcome for r in read_history("machine", f"{NS}/{machine}", self.redis)]


@pytest.fixture(scope="module")
def fleet(sandbox: Sandbox) -> Iterator[Fleet]:
    with connected(sandbox) as clients:
        user_data = base64.b64encode(b"#!/bin/sh\necho <<MACHINE_NAME>>\n").decode()
        ops.create(
            clients[0],
            kinds.SECRET.resource,
            {"metadata": {"name": "rem-secret", "namespace": NS}, "data": {"userData": user_data}},
        )
        yield Fleet(clients)


class Watcher:
    """Polls a pool's machines in the background and keeps the most machines seen at once in a
    replacement phase (Failed or Terminating, the machines being replaced)."""

    def __init__(self, fleet: Fleet, pool: str, originals: set[str]) -> None:
        self.fleet, self.pool, self.originals = fleet, pool, originals
        self.most = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            phases = self.fleet.phases(self.pool)
            replacing = sum(
                1 for n, p in phases.items() if n in self.originals and p in ("Failed", "Terminating")
            )
            self.most = max(self.most, replacing)
            time.sleep(0.1)

    def __enter__(self) -> Watcher:
        self.thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self.stop.set()
        self.thread.join(5)


@contextmanager
def machine_sets_paused(sandbox: Sandbox) -> Iterator[None]:
    """The workers stop taking MachineSet reconciles (Celery's ``cancel_consumer``) until the block
    ends; their messages wait in Redis meanwhile."""
    settings = get_settings().model_copy(update={"redis_url": sandbox.redis_url})
    queue = settings.queue_name(kinds.Queue.MACHINE_SET)
    app = Celery("remediation-e2e", set_as_current=False)
    app.conf.update(celery_config(settings))

    def consumers() -> int:
        active = app.control.inspect(timeout=1.0).active_queues() or {}
        return sum(1 for queues in active.values() for q in queues if q["name"] == queue)

    try:
        assert consumers() == 2, f"both workers consume {queue}"
        replies = app.control.cancel_consumer(queue, reply=True, timeout=2.0)
        assert len(replies) >= 2, f"cancel_consumer: {replies}"
        wait_until(lambda: consumers() == 0, 10, interval=0.2, what=f"nobody consuming {queue}")
        try:
            yield
        finally:
            replies = app.control.add_consumer(queue, reply=True, timeout=2.0)
            assert len(replies) >= 2, f"add_consumer: {replies}"
    finally:
        app.close()


def test_max_replacements_30_percent_replaces_3_of_10_at_once(sandbox: Sandbox, fleet: Fleet) -> None:
    """Upstream's count takes a Terminating machine twice, so how many sick machines fail together
    depends on whether the set deletes the first before the third is checked. The set is held while
    the four are judged, which makes the budget alone decide: three Failed, the fourth held."""
    klass = fleet.zone_class("zone-r")
    fleet.deployment("rem-r", 10, klass, {MAX_REPLACEMENTS_ANNOTATION: "30%"})
    originals = fleet.running("rem-r")
    sick = originals[:4]

    def held() -> bool:
        return any(
            "couldn't be marked FAILED" in m.status.last_operation.description
            for m in fleet.machines("rem-r")
            if m.metadata.name in sick
        )

    with Watcher(fleet, "rem-r", set(originals)) as watcher:
        with machine_sets_paused(sandbox):
            fleet.set_ready(sick, False)
            fleet.wait(lambda: watcher.most >= 3, "3 machines Failed at once")
            # the fourth waits for the budget, and says so
            fleet.wait(held, "the fourth held by the budget")
            assert list(fleet.phases("rem-r").values()).count("Failed") == 3
        fleet.wait(
            lambda: not set(sick) & set(fleet.phases("rem-r")) and len(fleet.running("rem-r")) == 10,
            "all four replaced, 10 Running",
        )
    assert watcher.most == 3


def test_max_unhealthy_40_percent_stops_at_5_of_10(fleet: Fleet) -> None:
    klass = fleet.zone_class("zone-u")
    fleet.deployment("rem-u", 10, klass, {MAX_UNHEALTHY_ANNOTATION: "40%"})
    originals = fleet.running("rem-u")
    sick = originals[:5]
    fleet.set_ready(sick, False)
    fleet.wait(lambda: fleet.condition("rem-u")[:2] == ("False", TOO_MANY_UNHEALTHY), "TooManyUnhealthy")
    assert "5 of 10 machines unhealthy" in fleet.condition("rem-u")[2]
    # three health timeouts later: nothing Failed, nothing deleted, one Warning Event
    deadline = time.monotonic() + 3 * HEALTH_TIMEOUT
    while time.monotonic() < deadline:
        phases = fleet.phases("rem-u")
        assert sorted(phases) == originals
        assert "Failed" not in phases.values()
        time.sleep(0.2)
    assert fleet.events("rem-u", TOO_MANY_UNHEALTHY) == 1
    held = fleet.machines("rem-u")
    assert any("more than max-unhealthy 4" in m.status.last_operation.description for m in held)
    fleet.wait(
        lambda: any("held: TooManyUnhealthy 5/10" in o for n in sick for o in fleet.outcomes(n)),
        "the pass outcome says why",
    )

    # one heals: 4 of 10 is within the budget, remediation resumes on its own
    fleet.set_ready(sick[:1], True)
    fleet.wait(lambda: fleet.condition("rem-u")[0] == "True", "RemediationAllowed=True")
    fleet.wait(
        lambda: not set(sick[1:]) & set(fleet.phases("rem-u")) and len(fleet.running("rem-u")) == 10,
        "the other four replaced",
    )
    assert sick[0] in fleet.running("rem-u")
    assert fleet.events("rem-u", "RemediationResumed") >= 1


def test_a_zone_outage_fails_no_machine_and_other_zones_are_remediated(fleet: Fleet) -> None:
    down_class = fleet.zone_class("zone-down")
    up_class = fleet.zone_class("zone-up")
    fleet.deployment("rem-zd", 4, down_class, {})
    fleet.deployment("rem-zu", 3, up_class, {})
    zone_machines = fleet.running("rem-zd")
    other = fleet.running("rem-zu")

    fleet.set_ready(zone_machines, False)
    fleet.wait(lambda: fleet.condition("rem-zd")[:2] == ("False", ZONE_UNHEALTHY), "ZoneUnhealthy")
    assert "zone-down" in fleet.condition("rem-zd")[2]
    fleet.set_ready(other[:1], False)  # an unhealthy machine in a zone that is up
    deadline = time.monotonic() + 3 * HEALTH_TIMEOUT
    while time.monotonic() < deadline:
        phases = fleet.phases("rem-zd")
        assert sorted(phases) == zone_machines
        assert "Failed" not in phases.values()
        time.sleep(0.2)
    fleet.wait(
        lambda: other[0] not in fleet.phases("rem-zu") and len(fleet.running("rem-zu")) == 3,
        "the other zone's unhealthy machine replaced",
    )
    assert fleet.condition("rem-zu")[0] in ("", "True")

    # the zone heals: every machine comes back, none replaced
    fleet.set_ready(zone_machines, True)
    fleet.wait(lambda: fleet.running("rem-zd") == zone_machines, "the zone's machines Running again")
    fleet.wait(lambda: fleet.condition("rem-zd")[0] == "True", "RemediationAllowed=True")
    assert sorted(fleet.phases("rem-zd")) == zone_machines
    assert fleet.events("rem-zd", ZONE_UNHEALTHY) == 1
