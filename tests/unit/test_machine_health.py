"""The health check's decisions (pure): the health matrix, transitions, timeouts, meltdown protection."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mcm_tasks.api import Machine, NodeCondition
from mcm_tasks.controllers.machine.health import (
    can_mark_failed,
    conditions_changed,
    creation_timeout,
    decide_health,
    has_critical_components_taint,
    health_timeout,
    is_healthy,
    node_condition_types,
    replacements_in_flight,
)
from mcm_tasks.settings import Settings, load_settings

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
WATCHED = ["KernelDeadlock", "ReadonlyFilesystem", "DiskPressure", "NetworkUnavailable"]


@pytest.fixture()
def settings() -> Settings:
    return load_settings(
        {"machine_creation_timeout": "20m", "machine_health_timeout": "10m", "health_recheck_period": "1m"}
    )


def conds(**statuses: str) -> list[NodeCondition]:
    return [NodeCondition(type=t, status=s) for t, s in statuses.items()]


@pytest.mark.parametrize(
    ("conditions", "healthy"),
    [
        ([], False),
        (conds(Ready="True"), True),
        (conds(Ready="False"), False),
        (conds(Ready="Unknown"), False),
        (conds(Ready="True", DiskPressure="False"), True),
        (conds(Ready="True", DiskPressure="True"), False),
        (conds(Ready="True", ReadonlyFilesystem="Unknown"), False),
        (conds(Ready="True", MemoryPressure="True"), True),  # not a watched condition
        (conds(DiskPressure="False"), True),  # MCM: a missing Ready is not a False Ready
    ],
)
def test_health_matrix(conditions: list[NodeCondition], healthy: bool) -> None:
    assert is_healthy(conditions, WATCHED) is healthy


def test_machine_node_conditions_override_the_flag(settings: Settings) -> None:
    m = machine(nodeConditions="MemoryPressure, PIDPressure")
    assert node_condition_types(m, settings) == ["MemoryPressure", "PIDPressure"]
    assert node_condition_types(machine(), settings) == WATCHED


def test_timeouts_precedence(settings: Settings) -> None:
    assert creation_timeout(machine(), settings) == 1200
    assert creation_timeout(machine(creationTimeout="5m"), settings) == 300
    annotated = machine(creationTimeout="5m")
    annotated.metadata.annotations["node.machine.sapcloud.io/effective-creation-timeout"] = "7m"
    assert creation_timeout(annotated, settings) == 420
    annotated.metadata.annotations["node.machine.sapcloud.io/effective-creation-timeout"] = "bogus"
    assert creation_timeout(annotated, settings) == 300
    assert health_timeout(machine(), settings) == 600
    assert health_timeout(machine(healthTimeout="2m"), settings) == 120


def test_conditions_changed_compares_types_and_statuses() -> None:
    a = [NodeCondition(type="Ready", status="True", message="kubelet ok", last_heartbeat_time=NOW)]
    b = [NodeCondition(type="Ready", status="True", message="kubelet fine")]
    assert not conditions_changed(a, b)
    assert conditions_changed(a, conds(Ready="False"))
    assert conditions_changed(a, [*a, *conds(DiskPressure="False")])


@pytest.mark.parametrize(
    ("old_reason", "new_reason", "changed"),
    [
        pytest.param("CandidateForUpdate", "SelectedForUpdate", True,
                     id="nodeConditionsHaveChanged: InPlaceUpdate with another reason"),
        pytest.param("ReadyForUpdate", "UpdateSuccessful", True, id="ours: the result arrives"),
        pytest.param("UpdateSuccessful", "UpdateSuccessful", False, id="ours: same reason"),
    ],
)  # fmt: skip
def test_conditions_changed_counts_the_in_place_reason(
    old_reason: str, new_reason: str, changed: bool
) -> None:
    def inplace(reason: str) -> list[NodeCondition]:
        return [NodeCondition(type="InPlaceUpdate", status="True", reason=reason)]

    assert conditions_changed(inplace(old_reason), inplace(new_reason)) is changed
    ready = [NodeCondition(type="Ready", status="True", reason="KubeletReady")]
    assert not conditions_changed(ready, [NodeCondition(type="Ready", status="True", reason="Other")])


def test_critical_components_taint() -> None:
    taint = {"key": "node.gardener.cloud/critical-components-not-ready", "effect": "NoSchedule"}
    assert has_critical_components_taint({"spec": {"taints": [taint]}})
    assert not has_critical_components_taint({"spec": {"taints": [{**taint, "effect": "NoExecute"}]}})
    assert not has_critical_components_taint({"spec": {}})


# --- decide_health ---------------------------------------------------------------------------------------


def machine(
    phase: str = "Running",
    op_type: str = "HealthCheck",
    op_state: str = "Successful",
    conditions: list[NodeCondition] | None = None,
    age: timedelta = timedelta(minutes=5),
    since: timedelta = timedelta(minutes=1),
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> Machine:
    return Machine.model_validate(
        {
            "metadata": {
                "name": "m1",
                "namespace": "default",
                "creationTimestamp": (NOW - age).isoformat(),
                "labels": {"node": "m1", **(labels or {})},
            },
            "spec": {"class": {"kind": "MachineClass", "name": "c1"}, **spec},
            "status": {
                "conditions": [c.model_dump(by_alias=True, exclude_none=True) for c in conditions or []],
                "lastOperation": {"description": "x", "state": op_state, "type": op_type},
                "currentStatus": {"phase": phase, "lastUpdateTime": (NOW - since).isoformat()},
            },
        }
    )


def node(taints: list[dict[str, str]] | None = None, **statuses: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "m1"},
        "spec": {"taints": taints or []},
        "status": {"conditions": [{"type": t, "status": s} for t, s in statuses.items()]},
    }


CRITICAL = [{"key": "node.gardener.cloud/critical-components-not-ready", "effect": "NoSchedule"}]


@pytest.mark.parametrize(
    ("m", "n", "phase", "op", "joined"),
    [
        # first join after a create
        (
            machine("Pending", "Create", "Processing"),
            node(Ready="True"),
            "Running",
            ("Create", "Successful"),
            True,
        ),
        # critical components not ready yet: stays Pending (conditions copied though)
        (machine("Pending", "Create", "Processing"), node(CRITICAL, Ready="True"), "Pending", None, False),
        # a Running machine turns Unknown when unhealthy
        (
            machine("Running", conditions=conds(Ready="True")),
            node(Ready="False"),
            "Unknown",
            ("HealthCheck", "Processing"),
            False,
        ),
        (
            machine("Running", conditions=conds(Ready="True")),
            node(Ready="True", DiskPressure="True"),
            "Unknown",
            ("HealthCheck", "Processing"),
            False,
        ),
        # and comes back
        (
            machine("Unknown", conditions=conds(Ready="False")),
            node(Ready="True"),
            "Running",
            ("HealthCheck", "Successful"),
            False,
        ),
        # the critical-components taint only holds Pending machines
        (
            machine("Unknown", conditions=conds(Ready="False")),
            node(CRITICAL, Ready="True"),
            "Running",
            ("HealthCheck", "Successful"),
            False,
        ),
        # node gone while Running
        (
            machine("Running", conditions=conds(Ready="True")),
            None,
            "Unknown",
            ("HealthCheck", "Processing"),
            False,
        ),
    ],
)
def test_transitions(
    m: Machine,
    n: dict[str, Any] | None,
    phase: str,
    op: tuple[str, str] | None,
    joined: bool,
    settings: Settings,
) -> None:
    decision = decide_health(m, n, NOW, settings)
    assert decision.status is not None
    assert decision.status.current_status.phase == phase
    if op is not None:
        assert (decision.status.last_operation.type, decision.status.last_operation.state) == op
        assert decision.status.current_status.last_update_time == NOW
    assert decision.joined is joined
    if n is not None:
        assert not conditions_changed(
            decision.status.conditions, [NodeCondition.model_validate(c) for c in n["status"]["conditions"]]
        )


def test_join_description(settings: Settings) -> None:
    first = decide_health(machine("Pending", "Create", "Processing"), node(Ready="True"), NOW, settings)
    assert first.status is not None
    assert first.status.last_operation.description == "Machine m1 successfully joined the cluster"
    again = decide_health(
        machine("Unknown", conditions=conds(Ready="False")), node(Ready="True"), NOW, settings
    )
    assert again.status is not None
    assert again.status.last_operation.description == "Machine m1 successfully re-joined the cluster"


def test_nothing_to_do_for_a_healthy_running_machine(settings: Settings) -> None:
    decision = decide_health(
        machine("Running", conditions=conds(Ready="True")), node(Ready="True"), NOW, settings
    )
    assert decision.status is None and decision.recheck_after is None


def test_node_missing_without_conditions_is_left_alone(settings: Settings) -> None:
    assert decide_health(machine("Running"), None, NOW, settings).status is None


@pytest.mark.parametrize(
    ("m", "n", "failed", "by_health", "recheck"),
    [
        # Pending within / past the creation timeout (from creationTimestamp), node never came
        (machine("Pending", "Create", "Processing", age=timedelta(minutes=19)), None, False, False, 60.0),
        (machine("Pending", "Create", "Processing", age=timedelta(minutes=21)), None, True, False, None),
        # creationTimeout on the machine
        (
            machine("Pending", "Create", "Processing", age=timedelta(minutes=3), creationTimeout="2m"),
            None,
            True,
            False,
            None,
        ),
        # Unknown within / past the health timeout (from currentStatus.lastUpdateTime)
        (
            machine("Unknown", conditions=conds(Ready="False"), since=timedelta(minutes=9)),
            node(Ready="False"),
            False,
            False,
            60.0,
        ),
        (
            machine("Unknown", conditions=conds(Ready="False"), since=timedelta(minutes=11)),
            node(Ready="False"),
            True,
            True,
            None,
        ),
        (
            machine(
                "Unknown", conditions=conds(Ready="False"), since=timedelta(minutes=3), healthTimeout="2m"
            ),
            node(Ready="False"),
            True,
            True,
            None,
        ),
        # disableHealthTimeout keeps it Unknown
        (
            machine(
                "Unknown",
                conditions=conds(Ready="False"),
                since=timedelta(hours=5),
                disableHealthTimeout=True,
            ),
            node(Ready="False"),
            False,
            False,
            60.0,
        ),
    ],
)
def test_timeouts(
    m: Machine,
    n: dict[str, Any] | None,
    failed: bool,
    by_health: bool,
    recheck: float | None,
    settings: Settings,
) -> None:
    decision = decide_health(m, n, NOW, settings)
    assert (decision.status is not None) is failed
    assert decision.failed_by_health_timeout is by_health
    assert decision.recheck_after == recheck
    if decision.status is not None:
        assert decision.status.current_status.phase == "Failed"
        assert decision.status.last_operation.state == "Failed"


def test_creation_timeout_description(settings: Settings) -> None:
    m = machine("Pending", "Create", "Processing", age=timedelta(minutes=21))
    decision = decide_health(m, None, NOW, settings)
    assert decision.status is not None
    assert (
        decision.status.last_operation.description
        == "Machine m1 failed to join the cluster in 20m0s minutes."
    )
    assert decision.status.last_operation.type == "Create"


# --- meltdown protection ---------------------------------------------------------------------------------


def peer(name: str, phase: str) -> Machine:
    return Machine.model_validate({"metadata": {"name": name}, "status": {"currentStatus": {"phase": phase}}})


@pytest.mark.parametrize(
    ("phases", "count", "markable"),
    [
        ([], 0, True),
        (["Running", "Unknown", "Unknown"], 0, True),
        (["Failed"], 1, False),
        (["Pending"], 1, False),
        (["CrashLoopBackOff"], 1, False),
        ([""], 1, False),
        (["Terminating"], 2, False),
        (["Running", "Terminating", "Pending"], 3, False),
    ],
)
def test_replacements_in_flight(phases: list[str], count: int, markable: bool) -> None:
    peers = [peer("self", "Unknown")] + [peer(f"p{i}", p) for i, p in enumerate(phases)]
    assert replacements_in_flight(peers, exclude="self") == count
    assert can_mark_failed(peers, "self") is markable


def preserved_peer(name: str, phase: str) -> Machine:
    current = {"phase": phase, "preserveExpiryTime": "2026-03-01T15:00:00Z"}
    return Machine.model_validate({"metadata": {"name": name}, "status": {"currentStatus": current}})


#: upstream's ``canMarkMachineFailed`` cases (machine_util_test.go, "#checkMachineTimeout"-style table
#: with one replacement per MachineDeployment): the HealthTimedOut machine is "self", Unknown; the
#: peers listed are those of its deployment (machines of another deployment are not listed at all)
_UPSTREAM_RATE_LIMIT_CASES: list[tuple[str, list[Machine], bool]] = [
    ("2 HealthTimedOut machines: from different machinedeployments", [], True),
    ("1 HealthTimedOut, 1 Failed machine: from different machinedeployments", [], True),
    ("2 HealthTimedOut machines: from same machinedeployment", [peer("p", "Unknown")], True),
    ("1 HealthTimedOut , 1 Failed machine: from same machinedeployment", [peer("p", "Failed")], False),
    ("1 HealthTimedOut , 1 Terminating machine", [peer("p", "Terminating")], False),
    ("1 HealthTimedOut , 1 NoPhase machine", [peer("p", "")], False),
    ("1 HealthTimedOut , 1 Pending machine", [peer("p", "Pending")], False),
    ("1 HealthTimedOut , 1 CrashLoopBackOff machine", [peer("p", "CrashLoopBackOff")], False),
    # upstream's code: "Preserved Failed machines are not replaced immediately, they need not be
    # considered towards inProgress" (issue 26: one auto-preservation held back every replacement)
    ("canMarkMachineFailed: preserved Failed machine", [preserved_peer("p", "Failed")], True),
    (
        "canMarkMachineFailed: preserved Failed and a Failed one",
        [preserved_peer("p", "Failed"), peer("q", "Failed")],
        False,
    ),
    (
        "canMarkMachineFailed: preserved Terminating still counts its replacement",
        [preserved_peer("p", "Terminating")],
        False,
    ),
]


@pytest.mark.parametrize(
    ("peers", "markable"),
    [pytest.param(peers, markable, id=case) for case, peers, markable in _UPSTREAM_RATE_LIMIT_CASES],
)
def test_can_mark_machine_failed_upstream_cases(peers: list[Machine], markable: bool) -> None:
    assert can_mark_failed([peer("self", "Unknown"), *peers], "self") is markable


def test_a_preserved_machine_counts_only_its_replacement() -> None:
    assert replacements_in_flight([preserved_peer("a", "Failed"), preserved_peer("b", "Pending")]) == 0
    assert replacements_in_flight([preserved_peer("a", "Terminating")]) == 1


def test_the_machine_itself_does_not_count() -> None:
    assert can_mark_failed([peer("self", "Failed")], "self")
    assert not can_mark_failed([peer("self", "Unknown"), peer("p", "Failed")], "self", max_replacements=1)
    assert can_mark_failed([peer("self", "Unknown"), peer("p", "Failed")], "self", max_replacements=2)
