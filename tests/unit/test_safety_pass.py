"""Whole passes of the safety jobs (``reconcile_safety``, the ``safety`` queue's entry, under each
job's key) on the recording fake (tests/kube_fake.py): the installation's objects in, one job run
in-process, the recorded writes out. The local cloud's VMs, the freeze flag and the queue's keys
live in a real Redis, as in production."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from mcm_tasks.api import API_VERSION
from mcm_tasks.api.constants import FREEZE_LABEL_KEY, NOT_MANAGED_BY_MCM_ANNOTATION
from mcm_tasks.api.drainrule import OWN_API_VERSION
from mcm_tasks.controllers.common import drainrules_io
from mcm_tasks.controllers.common.frozen_io import is_frozen, set_frozen
from mcm_tasks.controllers.machine.reconcile import reconcile_machine
from mcm_tasks.controllers.safety import APISERVER, DRAIN_RULES, ORPHAN_VMS, OVERSHOOTING
from mcm_tasks.controllers.safety.apiserver import RESET_DESCRIPTION
from mcm_tasks.controllers.safety.apiserver_io import down_since_key
from mcm_tasks.controllers.safety.debounce_io import window_key as debounce_key
from mcm_tasks.controllers.safety.register import reconcile_safety
from mcm_tasks.queue.state import due_of
from mcm_tasks.redisdb import get_redis, rkey
from mcm_tasks.settings import configure, get_settings, reset_settings
from providers.local import LocalCloud
from tests.kube_fake import FakeKube
from tests.unit.pass_support import (
    DEPLOYMENTS,
    MACHINES,
    NS,
    SETS,
    Obj,
    machine,
    machine_class,
    machine_deployment,
    node,
    secret,
)


@pytest.fixture(autouse=True)
def settings(redis_url: str) -> Iterator[None]:
    configure({"redis_url": redis_url, "namespace": NS})
    yield
    reset_settings()


def live_vms(name: str) -> list[str]:
    return [vm.id for vm in LocalCloud(get_redis()).by_machine(name) if vm.live()]


def writes(kube: FakeKube) -> list[tuple[str, str, str | None, str | None]]:
    return [(a.verb, a.resource, a.name, a.subresource) for a in kube.writes()]


# --- orphan VMs ------------------------------------------------------------------------------------------


def test_the_orphan_job_deletes_a_vm_no_machine_accounts_for_and_marks_a_stray_node() -> None:
    """``gone``'s Machine object went without its deletion flow (a VM left behind); ``stray`` is an
    old Node no machine backs, ``joining`` a new one still within the creation timeout."""
    just_now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    kube = FakeKube([secret(), machine_class(), machine("kept"), machine("gone"), node("stray"),
                     node("joining", creationTimestamp=just_now)])  # fmt: skip
    with kube.installed():
        reconcile_machine(f"{NS}/kept")
        reconcile_machine(f"{NS}/gone")
    del kube.objects[(MACHINES, NS, "gone")]
    kube.clear()

    with kube.installed():
        requeue = reconcile_safety(ORPHAN_VMS)

    assert not live_vms("gone") and live_vms("kept")
    assert ("get", MACHINES, NS, "gone") in [(a.verb, a.resource, a.namespace, a.name) for a in kube.actions]
    assert writes(kube) == [("patch", "nodes", "stray", None)]  # neither machine's VM nor "joining"
    stray = kube.get_object("nodes", "stray")
    assert stray is not None and stray["metadata"]["annotations"][NOT_MANAGED_BY_MCM_ANNOTATION] == "1"
    assert requeue is None


def test_the_orphan_job_keeps_a_vm_whose_machine_the_api_server_still_has() -> None:
    """The mirror may lag a new Machine: the job confirms each orphan against the API server."""
    kube = FakeKube([secret(), machine_class()])
    lagging = kube.mirror()  # taken before the machine was made: it lists none
    kube.add(machine("new"))
    with kube.installed():
        reconcile_machine(f"{NS}/new")
    kube.clear()

    with kube.installed(mirror=lagging):
        reconcile_safety(ORPHAN_VMS)

    assert live_vms("new")
    assert not writes(kube)


# --- API-server freeze -----------------------------------------------------------------------------------


def unknown_machine() -> Obj:
    unhealthy = {"description": "unhealthy", "state": "Processing", "type": "HealthCheck"}
    return machine(
        "m1", finalizers=True, status={"currentStatus": {"phase": "Unknown"}, "lastOperation": unhealthy}
    )


def test_the_apiserver_job_freezes_the_machine_controller_once_the_target_is_down_too_long() -> None:
    control, target = FakeKube([unknown_machine()]), FakeKube()
    target.unavailable = True

    with control.installed(target):
        first = reconcile_safety(APISERVER)

    assert not is_frozen() and get_redis().get(down_since_key()) is not None  # the timer runs
    timeout = get_settings().machine_safety_apiserver_statuscheck_timeout
    get_redis().set(down_since_key(), repr(time.time() - timeout - 1))  # as if a run long ago started it

    with control.installed(target):
        reconcile_safety(APISERVER)

    assert is_frozen()
    assert first is not None and timeout <= first.after <= timeout + 1  # looks again at the deadline
    assert not control.writes()  # the freeze is a flag in Redis; no machine is touched


def test_the_overshooting_job_probes_the_api_servers_once_per_period_and_hands_the_recheck_over() -> None:
    """At MCM's default periods the API-server check rides on the overshooting job (beat fires no
    ``apiserver`` entry): its first run of a period probes before anything else, later runs within
    the period (the informer's bursts) do not, and the re-check a failed probe asks for waits under
    the ``apiserver`` key, which freezes on time."""
    control, target = FakeKube([unknown_machine()]), FakeKube()
    target.unavailable = True

    with control.installed(target):
        reconcile_safety(OVERSHOOTING)

    assert get_redis().get(down_since_key()) is not None  # probed: the timer runs
    timeout = get_settings().machine_safety_apiserver_statuscheck_timeout
    recheck = due_of("safety", APISERVER)
    assert recheck is not None and timeout <= recheck - time.time() <= timeout + 1
    get_redis().delete(down_since_key(), debounce_key(OVERSHOOTING))
    with control.installed(target):
        reconcile_safety(OVERSHOOTING)  # within the period: no probe, no timer started again
    assert get_redis().get(down_since_key()) is None

    get_redis().set(down_since_key(), repr(time.time() - timeout - 1))
    with control.installed(target):
        reconcile_safety(APISERVER)  # the re-check
    assert is_frozen()


def test_the_overshooting_job_does_not_probe_when_the_apiserver_check_has_a_period_of_its_own(
    redis_url: str,
) -> None:
    configure({"redis_url": redis_url, "namespace": NS, "machine_safety_apiserver_statuscheck_period": "2m"})
    control, target = FakeKube(), FakeKube()
    target.unavailable = True

    with control.installed(target):
        reconcile_safety(OVERSHOOTING)

    assert get_redis().get(down_since_key()) is None and due_of("safety", APISERVER) is None


def test_the_apiserver_job_unfreezes_and_gives_unknown_machines_their_health_timeout_back() -> None:
    control = FakeKube([unknown_machine()])
    with control.installed():
        reconcile_safety(APISERVER)  # both up: nothing to do
    assert not control.writes()
    set_frozen(True, get_redis())

    with control.installed():
        reconcile_safety(APISERVER)

    assert not is_frozen()
    assert [(a.verb, a.name, a.subresource) for a in control.writes(MACHINES)] == [("update", "m1", "status")]
    m1 = control.get_object(MACHINES, "m1", NS)
    assert m1 is not None and m1["status"]["currentStatus"]["phase"] == "Running"
    assert m1["status"]["lastOperation"]["description"] == RESET_DESCRIPTION


# --- overshooting ----------------------------------------------------------------------------------------


def overshooting(machines: int) -> FakeKube:
    """A deployment of 2 (maxSurge 1) whose set controls ``machines`` machines."""
    kube = FakeKube()
    deployment = kube.add(machine_deployment(2, surge=1))

    def owned_by(obj: Obj) -> list[Obj]:
        meta = obj["metadata"]
        return [{"apiVersion": API_VERSION, "kind": obj["kind"], "name": meta["name"], "uid": meta["uid"],
                 "controller": True}]  # fmt: skip

    ms = kube.add({"apiVersion": API_VERSION, "kind": "MachineSet",
                   "metadata": {"name": "web-a", "namespace": NS, "labels": {"name": "web"},
                                "ownerReferences": owned_by(deployment)},
                   "spec": {"replicas": 2, "selector": {"matchLabels": {"name": "web"}},
                            "template": deployment["spec"]["template"]}})  # fmt: skip
    for i in range(machines):
        kube.add(machine(f"web-a-{i}", labels={"name": "web"}, ownerReferences=owned_by(ms)))
    return kube


def test_the_overshooting_job_freezes_a_set_with_far_too_many_machines_and_its_deployment() -> None:
    kube = overshooting(2 + 1 + get_settings().safety_up)  # replicas + maxSurge + safetyUp

    with kube.installed():
        reconcile_safety(OVERSHOOTING)

    assert writes(kube)[:2] == [("patch", SETS, "web-a", None), ("update", SETS, "web-a", "status")]
    for resource, conditions in ((SETS, "machineSetCondition"), (DEPLOYMENTS, "conditions")):
        (frozen,) = kube.list_objects(resource, NS)
        assert frozen["metadata"]["labels"][FREEZE_LABEL_KEY] == "True"
        reasons = [c["reason"] for c in frozen["status"][conditions] if c["type"] == "Frozen"]
        assert reasons == ["OverShootingReplicaCount"]
    assert {e.body["reason"] for e in kube.writes("events")} == {"FrozeMachineSet", "FrozeMachineDeployment"}


def test_the_overshooting_job_leaves_a_set_just_below_the_threshold_alone() -> None:
    kube = overshooting(2 + 1 + get_settings().safety_up - 1)

    with kube.installed():
        reconcile_safety(OVERSHOOTING)

    assert not writes(kube)


# --- drain rules (mcm-tasks's own job on the safety queue) ------------------------------------------------


def drain_rule(name: str, behavior: str) -> Obj:
    meta = {"name": name, "namespace": NS}
    return {"apiVersion": OWN_API_VERSION, "kind": "MachineDrainRule", "metadata": meta,
            "spec": {"drain": {"behavior": behavior}}}  # fmt: skip


def rule_lists(kube: FakeKube) -> int:
    return sum(1 for a in kube.actions if a.verb == "list" and a.resource == "machinedrainrules")


@pytest.fixture()
def fresh_rules() -> Iterator[None]:
    """The drain keeps a namespace's rules for a few seconds per process: none of this test's may
    reach a later test's drain."""
    yield
    drainrules_io._cache.pop(NS, None)


@pytest.mark.usefixtures("fresh_rules")
def test_the_drain_rules_job_says_on_each_rule_whether_drains_use_it_and_warns_of_an_invalid_one() -> None:
    kube = FakeKube([drain_rule("skip-agents", "Skip"), drain_rule("typo", "Skp")])

    with kube.installed():
        reconcile_safety(DRAIN_RULES)

    rules = "machinedrainrules"
    assert [(a.verb, a.name, a.subresource) for a in kube.writes(rules)] == [
        ("update", "skip-agents", "status"),
        ("update", "typo", "status"),
    ]
    valid = {r["metadata"]["name"]: r["status"]["conditions"][0] for r in kube.list_objects(rules, NS)}
    assert valid["skip-agents"]["status"] == "True"
    assert valid["typo"]["status"] == "False" and valid["typo"]["reason"] == "InvalidDrainRule"
    (event,) = kube.writes("events")
    assert event.body["reason"] == "InvalidDrainRule" and event.body["involvedObject"]["name"] == "typo"

    kube.clear()
    with kube.installed():
        reconcile_safety(DRAIN_RULES)

    assert not writes(kube)  # judged the same: nothing written again, no second Event


@pytest.mark.usefixtures("fresh_rules")
def test_an_overshooting_run_judges_the_drain_rules_at_most_once_per_period() -> None:
    """Beat fires no drain-rules entry: the overshooting check judges the rules (a task per namespace
    and minute fewer). The informer's bursts of overshooting requests in a scale-up do not list the
    rules at every run: once per overshooting period."""
    kube = FakeKube([drain_rule("typo", "Skp")])

    with kube.installed():
        reconcile_safety(OVERSHOOTING)

    assert [(a.verb, a.name, a.subresource) for a in kube.writes("machinedrainrules")] == [
        ("update", "typo", "status")
    ]
    kube.clear()
    drainrules_io._cache.pop(NS, None)
    with kube.installed():
        reconcile_safety(OVERSHOOTING)  # within the period (and the debounce window: a requeue)
        get_redis().delete(debounce_key(OVERSHOOTING))
        reconcile_safety(OVERSHOOTING)  # the check runs again, the rules wait for the period
    assert rule_lists(kube) == 0
    get_redis().delete(rkey("safety", "drain-rules-judged"), debounce_key(OVERSHOOTING))  # a period on
    with kube.installed():
        reconcile_safety(OVERSHOOTING)
    assert rule_lists(kube) == 1
