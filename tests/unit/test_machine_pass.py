"""Whole passes of the machine controller (``reconcile_machine``, the ``machine`` queue's entry) on
the recording fake (tests/kube_fake.py): objects in, one pass run in-process, the recorded writes
out. The local provider's cloud and the queue's keys live in a real Redis, as in production."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mcm_tasks.api import Machine
from mcm_tasks.api.constants import (
    MACHINE_JOIN_DURATION_ANNOTATION,
    MCM_FINALIZER,
    NODE_FINALIZER,
    NODE_LABEL_KEY,
)
from mcm_tasks.controllers.common.frozen_io import set_frozen
from mcm_tasks.controllers.common.remediation import MAX_REPLACEMENTS_REACHED
from mcm_tasks.controllers.machine.health import not_marked_description
from mcm_tasks.controllers.machine.reconcile import machine_pass, reconcile_machine
from mcm_tasks.controllers.machine.scope import MachineScope
from mcm_tasks.redisdb import get_redis
from mcm_tasks.settings import configure, get_settings, reset_settings
from providers.local import LocalCloud
from tests.kube_fake import FakeKube
from tests.unit.pass_support import (
    MACHINES,
    NS,
    Obj,
    machine,
    machine_class,
    machine_deployment,
    node,
    secret,
)

KEY = f"{NS}/m1"


def stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture(autouse=True)
def settings(redis_url: str) -> Iterator[None]:
    configure({"redis_url": redis_url, "namespace": NS})
    yield
    reset_settings()


def writes(kube: FakeKube) -> list[tuple[str, str, str | None, str | None]]:
    return [(a.verb, a.resource, a.name, a.subresource) for a in kube.writes(MACHINES, "nodes")]


def test_a_new_machine_gets_its_finalizer_a_vm_and_goes_pending() -> None:
    kube = FakeKube([secret(), machine_class(), machine("m1")])

    with kube.installed():
        requeue = reconcile_machine(KEY)

    assert writes(kube) == [
        ("patch", MACHINES, "m1", None),  # MCM's finalizer
        ("patch", MACHINES, "m1", None),  # node label, providerID
        ("update", MACHINES, "m1", "status"),  # Pending
    ]
    (vm,) = LocalCloud(get_redis()).by_machine("m1")
    m1 = kube.get_object(MACHINES, "m1", NS)
    assert m1 is not None
    assert m1["metadata"]["finalizers"] == [MCM_FINALIZER]
    assert m1["spec"]["providerID"] == vm.provider_id
    assert m1["metadata"]["labels"][NODE_LABEL_KEY] == "m1"
    assert m1["status"]["currentStatus"]["phase"] == "Pending"
    assert m1["status"]["lastOperation"]["type"] == "Create"
    assert requeue is not None


def test_a_status_write_sends_the_machines_identity_and_status_only() -> None:
    """The status subresource keeps everything but status from the stored object, so the body
    carries no spec, labels or managedFields; the object keeps them all."""
    fields = [{"manager": "gardener", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {}}]
    kube = FakeKube([secret(), machine_class(), machine("m1", labels={"pool": "a"}, managedFields=fields)])

    with kube.installed():
        reconcile_machine(KEY)

    (put,) = [a for a in kube.writes(MACHINES) if a.subresource == "status"]
    assert set(put.body) == {"apiVersion", "kind", "metadata", "status"}
    assert set(put.body["metadata"]) == {"name", "namespace", "uid", "resourceVersion"}
    assert put.body["status"]["currentStatus"]["phase"] == "Pending"
    m1 = kube.get_object(MACHINES, "m1", NS)
    assert m1 is not None and m1["metadata"]["labels"]["pool"] == "a" and m1["spec"]["providerID"]
    assert m1["metadata"]["managedFields"] == fields


def running(phase: str = "Running", since: str = "2026-01-01T00:00:00Z", ready: str = "True") -> Obj:
    """A machine past its creation: finalizer, VM, node label, the node's conditions copied."""
    return machine("m1", labels={NODE_LABEL_KEY: "n1"}, finalizers=True, spec={"providerID": "local:///n1"},
                   status={"currentStatus": {"phase": phase, "lastUpdateTime": since},
                           "lastOperation": {"description": "ok", "state": "Successful",
                                             "type": "HealthCheck", "lastUpdateTime": since},
                           "conditions": node("n1", ready)["status"]["conditions"]})  # fmt: skip


def test_a_running_machine_whose_node_is_not_ready_goes_unknown() -> None:
    kube = FakeKube([secret(), machine_class(), running(), node("n1", ready="False")])

    with kube.installed():
        requeue = reconcile_machine(KEY)

    assert writes(kube) == [
        ("update", MACHINES, "m1", "status"),  # Unknown
        ("patch", "nodes", "n1", None),  # node sync: machine-name label and node finalizer
    ]
    m1 = kube.get_object(MACHINES, "m1", NS)
    assert m1 is not None and m1["status"]["currentStatus"]["phase"] == "Unknown"
    assert m1["status"]["conditions"][0]["status"] == "False"  # the node's conditions copied
    (event,) = kube.writes("events")
    assert event.body["reason"] == "MachineUnknown" and event.body["type"] == "Warning"
    assert requeue is not None and requeue.after == get_settings().health_recheck_period


def test_an_unknown_machine_past_its_health_timeout_is_marked_failed() -> None:
    """No deployment owns it (no ``name`` label), so no budget holds it: Failed at once, and the
    short retry hands it to the deletion that its MachineSet will ask for."""
    kube = FakeKube(
        [secret(), machine_class(), running(phase="Unknown", ready="False"), node("n1", ready="False")]
    )

    with kube.installed():
        requeue = reconcile_machine(KEY)

    assert ("update", MACHINES, "m1", "status") in writes(kube)
    m1 = kube.get_object(MACHINES, "m1", NS)
    assert m1 is not None and m1["status"]["currentStatus"]["phase"] == "Failed"
    assert m1["status"]["lastOperation"]["description"].startswith("Machine m1 health checks failing since")
    (event,) = kube.writes("events")
    assert event.body["reason"] == "MachineFailed"
    assert requeue is not None and requeue.after == get_settings().short_retry


def test_an_unknown_machine_within_its_health_timeout_stays_unknown() -> None:
    recent = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    kube = FakeKube([secret(), machine_class(), running(phase="Unknown", since=recent, ready="False"),
                     node("n1", ready="False")])  # fmt: skip

    with kube.installed():
        requeue = reconcile_machine(KEY)

    assert ("update", MACHINES, "m1", "status") not in writes(kube)
    assert requeue is not None and requeue.after <= get_settings().health_recheck_period


def test_an_unknown_machine_waits_while_its_deployment_has_a_replacement_in_flight() -> None:
    """The replacement budget (MCM's one at a time, ``--max-replacements``): a machine of the
    same deployment is already Failed and being replaced, so this one is not marked Failed yet; it
    says why on its status and in the pass's outcome."""
    unknown = running(phase="Unknown", ready="False")
    unknown["metadata"]["labels"]["name"] = "web"
    replaced = machine("m0", labels={"name": "web"}, finalizers=True,
                       status={"currentStatus": {"phase": "Failed"}})  # fmt: skip
    kube = FakeKube([secret(), machine_class(), machine_deployment(3), unknown, replaced,
                     node("n1", ready="False")])  # fmt: skip

    with kube.installed():
        requeue = reconcile_machine(KEY)

    m1 = kube.get_object(MACHINES, "m1", NS)
    assert m1 is not None and m1["status"]["currentStatus"]["phase"] == "Unknown"
    assert m1["status"]["lastOperation"]["description"] == not_marked_description("m1")
    assert requeue is not None and MAX_REPLACEMENTS_REACHED in requeue.note
    assert requeue.after <= get_settings().health_recheck_period


def test_a_create_the_cloud_refuses_leaves_the_machine_in_crash_loop_back_off() -> None:
    """ResourceExhausted (the zone is out of capacity): CrashLoopBackOff within the creation
    timeout, the cloud's message on the machine, and the retry the code calls for."""
    refusing = machine_class(providerSpec={"failCreates": {"count": 1, "code": "ResourceExhausted"}})
    kube = FakeKube([secret(), refusing, machine("m1", creationTimestamp=stamp(datetime.now(UTC)))])

    with kube.installed():
        requeue = reconcile_machine(KEY)

    assert not LocalCloud(get_redis()).by_machine("m1")
    m1 = kube.get_object(MACHINES, "m1", NS)
    assert m1 is not None and m1["status"]["currentStatus"]["phase"] == "CrashLoopBackOff"
    assert m1["status"]["lastOperation"]["state"] == "Failed"
    assert "providerID" not in m1["spec"]
    assert requeue is not None and requeue.after == get_settings().resource_exhausted_retry


def test_a_create_the_cloud_refuses_past_the_creation_timeout_fails_the_machine() -> None:
    """The same refusal once the machine is older than its creation timeout: Failed, for its
    MachineSet to replace (and no VM launched again for it)."""
    refusing = machine_class(providerSpec={"failCreates": {"count": 1, "code": "ResourceExhausted"}})
    long_ago = datetime.now(UTC) - timedelta(seconds=get_settings().machine_creation_timeout + 60)
    kube = FakeKube([secret(), refusing, machine("m1", creationTimestamp=stamp(long_ago))])

    with kube.installed():
        reconcile_machine(KEY)

    m1 = kube.get_object(MACHINES, "m1", NS)
    assert m1 is not None and m1["status"]["currentStatus"]["phase"] == "Failed"
    assert not LocalCloud(get_redis()).by_machine("m1")


def test_a_frozen_machine_controller_launches_nothing() -> None:
    """The API-server check froze the controller (a flag in Redis): a pass adds the finalizer, as
    MCM does before it looks, and stops there until the freeze ends."""
    set_frozen(True, get_redis())
    kube = FakeKube([secret(), machine_class(), machine("m1")])

    with kube.installed():
        requeue = reconcile_machine(KEY)

    assert writes(kube) == [("patch", MACHINES, "m1", None)]  # the finalizer only
    assert not LocalCloud(get_redis()).by_machine("m1")
    assert requeue is not None and requeue.after == get_settings().long_retry


def test_a_pending_machine_whose_node_joins_ready_goes_running() -> None:
    kube = FakeKube([secret(), machine_class(), machine("m1")])
    with kube.installed():
        reconcile_machine(KEY)  # created: Pending, node label "m1"
    kube.add(node("m1"))
    kube.clear()

    with kube.installed():
        reconcile_machine(KEY)

    m1 = kube.get_object(MACHINES, "m1", NS)
    assert m1 is not None and m1["status"]["currentStatus"]["phase"] == "Running"
    assert m1["status"]["conditions"][0]["type"] == "Ready"
    assert MACHINE_JOIN_DURATION_ANNOTATION in m1["metadata"]["annotations"]
    joined = kube.get_object("nodes", "m1")
    assert joined is not None and NODE_FINALIZER in joined["metadata"]["finalizers"]


def test_a_pass_reads_clients_settings_and_clock_from_its_scope_alone() -> None:
    """Built around the fake's clients and a fixed clock, with no process client installed (reading
    one would fail: there is no kubeconfig), the creation pass and a health pass run whole: every
    phase takes what it reads and writes through from its scope (tools/check_pass_scope.py)."""
    kube = FakeKube([secret(), machine_class(), machine("m1")])
    clock = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

    def scope_of(raw: Obj | None) -> MachineScope:
        assert raw is not None
        return MachineScope(key=KEY, obj=Machine.model_validate(raw), settings=get_settings(),
                            listers=kube.listers(NS), clients=(kube, kube), now=clock,
                            clock=lambda: clock)  # fmt: skip

    assert machine_pass(scope_of(kube.get_object(MACHINES, "m1", NS))) is not None
    m1 = kube.get_object(MACHINES, "m1", NS)
    assert m1 is not None and m1["status"]["currentStatus"]["phase"] == "Pending"
    assert m1["status"]["lastOperation"]["lastUpdateTime"] == stamp(clock)

    kube.add(node("m1", ready="True"))
    machine_pass(scope_of(kube.get_object(MACHINES, "m1", NS)))
    m1 = kube.get_object(MACHINES, "m1", NS)
    assert m1 is not None and m1["status"]["currentStatus"]["phase"] == "Running"


def test_a_bootstrap_token_expires_by_the_scopes_precise_clock() -> None:
    """The token's expiry is measured from ``scope.precise_clock()`` (to the microsecond, unlike the
    status fields' ``clock``), so a test fixes it as it fixes ``clock``. (A machine, class and Secret of
    its own: the local cloud in Redis and the process's Secret cache keep those of the tests before.)"""
    with_token = secret("tokcloud")
    with_token["data"]["userData"] = base64.b64encode(b"#!/bin/sh\njoin <<BOOTSTRAP_TOKEN>>\n").decode()
    ref = {"name": "tokcloud", "namespace": NS}
    tok1 = machine("tok1", spec={"class": {"kind": "MachineClass", "name": "tokcls"}})
    kube = FakeKube([with_token, machine_class("tokcls", secretRef=ref), tok1])
    clock = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    precise = clock.replace(microsecond=500_000)
    raw = kube.get_object(MACHINES, "tok1", NS)
    assert raw is not None
    scope = MachineScope(key=f"{NS}/tok1", obj=Machine.model_validate(raw), settings=get_settings(),
                         listers=kube.listers(NS), clients=(kube, kube), now=clock,
                         clock=lambda: clock, precise_clock=lambda: precise)  # fmt: skip

    machine_pass(scope)

    [token] = [
        s
        for s in kube.list_objects("secrets", "kube-system")
        if s["metadata"]["name"].startswith("bootstrap-token-")
    ]
    expiration = base64.b64decode(token["data"]["expiration"]).decode()
    assert expiration.startswith("2026-03-01T"), expiration


@pytest.mark.parametrize("resource", ["machineclasses", "secrets", "nodes"])
@pytest.mark.parametrize("writers", [1, 2])
def test_a_finalizer_write_on_a_version_written_since_is_tried_on_a_live_read_not_failed(
    resource: str, writers: int
) -> None:
    """A class, secret or node pass that adds its finalizer on a version someone has written since
    (a Conflict: another pass, a user's edit, the kubelet's status) reads the object live and tries
    again on that version; should it be written once more meanwhile, the pass comes back soon, as
    every other kind's pass does on a Conflict. Never a failure, with a Warning and a backoff."""
    from mcm_tasks.api.constants import MC_SECRET_FINALIZER, MCM_FINALIZER, NODE_FINALIZER, NODE_LABEL_KEY
    from mcm_tasks.controllers.machine.classes import reconcile_machine_class
    from mcm_tasks.controllers.machine.nodes import reconcile_node
    from mcm_tasks.controllers.machine.secrets import reconcile_secret

    reconcile, name, namespace, finalizer = {
        "machineclasses": (reconcile_machine_class, "cls", NS, MCM_FINALIZER),
        "secrets": (reconcile_secret, "cloud", NS, MC_SECRET_FINALIZER),
        "nodes": (reconcile_node, "n1", None, NODE_FINALIZER),
    }[resource]
    kube = FakeKube([secret(), machine_class(), machine("m1", labels={NODE_LABEL_KEY: "n1"}), node("n1")])
    kube.change(resource, name, namespace, lambda o: o["metadata"].update(finalizers=[]))
    stale = kube.mirror()
    edits = iter(range(writers))

    def edit() -> None:
        n = next(edits, None)
        if n is not None:
            kube.change(resource, name, namespace, lambda o: o["metadata"].update(labels={"edit": str(n)}))

    edit()  # written since the mirror's version
    serve = kube._serve

    def serving(method: str, p: Any, *args: Any) -> Any:
        answer = serve(method, p, *args)
        if method == "GET" and p.resource == resource and p.name == name:
            edit()  # and, with two writers, once more right after the live read
        return answer

    kube._serve = serving  # type: ignore[method-assign,assignment]

    def finalizers() -> list[str]:
        found = kube.get_object(resource, name, namespace)
        assert found is not None
        return list(found["metadata"].get("finalizers") or [])

    key = f"{NS}/{name}" if namespace else name
    with kube.installed(mirror=stale):
        requeue = reconcile(key)
    if writers == 1:
        assert finalizer in finalizers()
        assert requeue is None or requeue.after != get_settings().conflict_retry
    else:
        assert finalizer not in finalizers()
        assert requeue is not None and requeue.after == get_settings().conflict_retry
        with kube.installed():
            reconcile(key)
        assert finalizer in finalizers()
