"""The remediation budgets' decisions (pure, ``controllers/common/remediation.py``): upstream's
``canMarkMachineFailed`` cases with a configurable budget, budget parsing, the unhealthy
short-circuit, zone outages, and the deployment's ``RemediationAllowed`` condition."""

from __future__ import annotations

import pytest

from mcm_tasks.api import Machine
from mcm_tasks.api.constants import MAX_REPLACEMENTS_ANNOTATION, MAX_UNHEALTHY_ANNOTATION
from mcm_tasks.controllers.common.remediation import (
    MAX_REPLACEMENTS_REACHED,
    TOO_MANY_UNHEALTHY,
    WITHIN_BUDGET,
    ZONE_UNHEALTHY,
    Budgets,
    ZoneHealth,
    can_mark_machine_failed,
    decide_remediation,
    deployment_budgets,
    deployment_condition,
    replacements_in_flight,
    resolve_budget,
    zone_health,
    zone_in_outage,
    zone_of,
    zones_in_outage,
)
from mcm_tasks.settings import SettingsError, load_settings


def peer(name: str, phase: str, *, preserved: bool = False, deleting: bool = False) -> Machine:
    current: dict[str, str] = {"phase": phase}
    if preserved:
        current["preserveExpiryTime"] = "2026-03-01T15:00:00Z"
    meta: dict[str, object] = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = "2026-03-01T15:00:00Z"
    return Machine.model_validate({"metadata": meta, "status": {"currentStatus": current}})


def fleet(**phases: int) -> list[Machine]:
    """``fleet(Running=7, Unknown=3)``: machines named after their phase and index."""
    return [peer(f"{phase.lower()}-{i}", phase) for phase, n in phases.items() for i in range(n)]


# --- upstream's canMarkMachineFailed, with the budget as a parameter ------------------------------------

#: upstream's rate-limit cases (machine_util_test.go): "self" is the HealthTimedOut machine (Unknown),
#: the peers are those of its deployment; then the same rows with a budget of 2 and 3
_UPSTREAM_CASES: list[tuple[str, list[Machine], int, bool]] = [
    ("2 HealthTimedOut machines: from same machinedeployment", [peer("p", "Unknown")], 1, True),
    ("1 HealthTimedOut, 1 Failed machine: same machinedeployment", [peer("p", "Failed")], 1, False),
    ("1 HealthTimedOut, 1 Terminating machine", [peer("p", "Terminating")], 1, False),
    ("1 HealthTimedOut, 1 NoPhase machine", [peer("p", "")], 1, False),
    ("1 HealthTimedOut, 1 Pending machine", [peer("p", "Pending")], 1, False),
    ("1 HealthTimedOut, 1 CrashLoopBackOff machine", [peer("p", "CrashLoopBackOff")], 1, False),
    ("preserved Failed machine does not count", [peer("p", "Failed", preserved=True)], 1, True),
    ("preserved Terminating counts its replacement", [peer("p", "Terminating", preserved=True)], 1, False),
    ("budget 2: 1 Failed", [peer("p", "Failed")], 2, True),
    ("budget 2: 1 Terminating counts twice", [peer("p", "Terminating")], 2, False),
    ("budget 2: 1 Failed, 1 Pending", [peer("p", "Failed"), peer("q", "Pending")], 2, False),
    ("budget 3: 2 Failed", [peer("p", "Failed"), peer("q", "Failed")], 3, True),
    ("budget 3: 3 Failed", [peer(f"p{i}", "Failed") for i in range(3)], 3, False),
    ("budget 0 never marks", [], 0, False),
]


@pytest.mark.parametrize(
    ("peers", "budget", "markable"),
    [pytest.param(peers, budget, markable, id=case) for case, peers, budget, markable in _UPSTREAM_CASES],
)
def test_can_mark_machine_failed(peers: list[Machine], budget: int, markable: bool) -> None:
    assert can_mark_machine_failed([peer("self", "Unknown"), *peers], "self", budget) is markable


def test_the_machine_itself_is_left_out_of_the_count() -> None:
    assert replacements_in_flight([peer("self", "Failed"), peer("p", "Pending")], exclude="self") == 1


# --- budgets -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "total", "round_up", "expected"),
    [
        ("", 10, True, None),
        ("  ", 10, True, None),
        ("1", 10, True, 1),
        ("0", 10, True, 0),
        ("30%", 10, True, 3),
        ("25%", 10, True, 3),
        ("25%", 10, False, 2),
        ("40%", 10, False, 4),
        ("100%", 7, True, 7),
        ("1%", 1, True, 1),
        ("1%", 1, False, 0),
        ("50%", 0, True, 0),
    ],
)
def test_resolve_budget(value: str, total: int, round_up: bool, expected: int | None) -> None:
    assert resolve_budget(value, total, round_up=round_up) == expected


@pytest.mark.parametrize("value", ["-1", "1.5", "12.5%", "abc", "%", "3 machines"])
def test_a_bad_budget_is_an_error(value: str) -> None:
    with pytest.raises(ValueError, match="neither a non-negative integer nor a percentage"):
        resolve_budget(value, 10, round_up=True)


@pytest.mark.parametrize(
    ("flags", "annotations", "replicas", "expected"),
    [
        ({}, {}, 10, Budgets(1, None)),  # MCM's behaviour: one replacement, no short-circuit
        ({"max_replacements": "30%"}, {}, 10, Budgets(3, None)),
        ({"max_replacements": "30%"}, {}, 4, Budgets(2, None)),  # rounded up
        ({"max_unhealthy": "40%"}, {}, 10, Budgets(1, 4)),
        ({"max_unhealthy": "45%"}, {}, 10, Budgets(1, 4)),  # rounded down
        ({"max_replacements": "2"}, {MAX_REPLACEMENTS_ANNOTATION: "5"}, 10, Budgets(5, None)),
        ({"max_unhealthy": "2"}, {MAX_UNHEALTHY_ANNOTATION: "50%"}, 10, Budgets(1, 5)),
        ({}, {MAX_UNHEALTHY_ANNOTATION: ""}, 10, Budgets(1, None)),  # annotation empty: off
    ],
)
def test_deployment_budgets(
    flags: dict[str, str], annotations: dict[str, str], replicas: int, expected: Budgets
) -> None:
    assert deployment_budgets(annotations, replicas, load_settings(flags)) == expected


def test_an_unreadable_annotation_is_reported_and_the_flag_applies() -> None:
    budgets = deployment_budgets(
        {MAX_REPLACEMENTS_ANNOTATION: "lots", MAX_UNHEALTHY_ANNOTATION: "3"},
        10,
        load_settings({"max_replacements": "2"}),
    )
    assert budgets.max_replacements == 2
    assert budgets.max_unhealthy == 3
    assert len(budgets.problems) == 1
    assert budgets.problems[0].startswith(f"{MAX_REPLACEMENTS_ANNOTATION}: 'lots' is neither")


@pytest.mark.parametrize("flag", ["max_replacements", "max_unhealthy", "zone_unhealthy_threshold"])
def test_a_bad_flag_stops_start_up(flag: str) -> None:
    with pytest.raises(SettingsError, match=f"--{flag.replace('_', '-')}"):
        load_settings({flag: "ten"})


# --- zones ---------------------------------------------------------------------------------------------


def node(zone: str | None) -> dict[str, object]:
    labels = {} if zone is None else {"topology.kubernetes.io/zone": zone}
    return {"metadata": {"name": "n", "labels": labels}}


@pytest.mark.parametrize(
    ("the_node", "class_zone", "expected"),
    [
        (node("eu-1a"), "eu-1b", "eu-1a"),  # the Node wins
        (node(None), "eu-1b", "eu-1b"),
        (None, "eu-1b", "eu-1b"),
        (None, "", ""),
        (node(""), "eu-1c", "eu-1c"),
    ],
)
def test_zone_of(the_node: dict[str, object] | None, class_zone: str, expected: str) -> None:
    assert zone_of(the_node, class_zone) == expected


@pytest.mark.parametrize(
    ("unhealthy", "total", "threshold", "outage"),
    [
        (2, 4, "50%", True),  # at least the threshold
        (1, 4, "50%", False),
        (3, 3, "50%", True),
        (2, 2, "50%", False),  # too small a zone to judge
        (2, 3, "50%", True),
        (1, 3, "50%", False),
        (3, 10, "3", True),  # a number of machines
        (2, 10, "3", False),
        (10, 10, "0", False),  # off
        (10, 10, "0%", False),
        (10, 10, "", False),
    ],
)
def test_zone_in_outage(unhealthy: int, total: int, threshold: str, outage: bool) -> None:
    assert zone_in_outage(ZoneHealth("z", unhealthy, total), threshold) is outage


def test_zone_health_spans_deployments_and_leaves_out_leaving_machines() -> None:
    machines = [
        (peer("a1", "Unknown"), "a"),
        (peer("a2", "Unknown"), "a"),
        (peer("a3", "Running"), "a"),
        (peer("a4", "Failed", deleting=True), "a"),  # leaving the zone either way
        (peer("b1", "Running"), "b"),
        (peer("x1", "Unknown"), ""),  # no zone: not judged
    ]
    health = zone_health(machines)
    assert health == {"a": ZoneHealth("a", 2, 3), "b": ZoneHealth("b", 0, 1)}
    assert zones_in_outage(health, "50%") == {"a": ZoneHealth("a", 2, 3)}


# --- the verdicts --------------------------------------------------------------------------------------

OUTAGE = {"a": ZoneHealth("a", 4, 4)}


@pytest.mark.parametrize(
    ("zone", "peers", "budgets", "outages", "reason", "figures"),
    [
        ("", fleet(Running=9, Unknown=1), Budgets(1, None), {}, "", ""),
        ("b", fleet(Running=8, Unknown=1, Failed=1), Budgets(1, None), {}, MAX_REPLACEMENTS_REACHED, "1/1"),
        ("b", fleet(Running=8, Unknown=1, Failed=1), Budgets(2, None), {}, "", ""),
        ("b", fleet(Running=5, Unknown=5), Budgets(3, 4), {}, TOO_MANY_UNHEALTHY, "5/10"),
        ("b", fleet(Running=6, Unknown=4), Budgets(3, 4), {}, "", ""),  # at the limit: allowed
        ("b", fleet(Running=3, Unknown=7), Budgets(1, 4), OUTAGE, TOO_MANY_UNHEALTHY, "7/10"),
        ("a", fleet(Running=3, Unknown=7), Budgets(1, 4), OUTAGE, ZONE_UNHEALTHY, "4/4"),  # zone first
        ("a", fleet(Running=9, Unknown=1), Budgets(1, None), OUTAGE, ZONE_UNHEALTHY, "4/4"),
        ("b", fleet(Running=9, Unknown=1), Budgets(1, None), OUTAGE, "", ""),  # other zones go on
    ],
)
def test_decide_remediation(
    zone: str,
    peers: list[Machine],
    budgets: Budgets,
    outages: dict[str, ZoneHealth],
    reason: str,
    figures: str,
) -> None:
    verdict = decide_remediation("unknown-0", zone, peers, budgets, outages)
    assert verdict.allowed is (reason == "")
    assert verdict.reason == reason
    assert verdict.figures == figures
    assert verdict.held == ("" if not reason else f"held: {reason} {figures}")


def test_the_held_text_flower_shows() -> None:
    verdict = decide_remediation("unknown-0", "", fleet(Running=3, Unknown=7), Budgets(1, 5), {})
    assert verdict.held == "held: TooManyUnhealthy 7/10"


@pytest.mark.parametrize(
    ("peers", "budgets", "zones", "status", "reason", "in_message"),
    [
        (fleet(Running=9, Unknown=1), Budgets(1, None), {}, "True", WITHIN_BUDGET, "1 of 10"),
        (fleet(Running=5, Unknown=5), Budgets(1, 4), {}, "False", TOO_MANY_UNHEALTHY, "5 of 10"),
        (fleet(Running=6, Unknown=4), Budgets(1, 4), {}, "True", WITHIN_BUDGET, "4 of 10"),
        (
            fleet(Running=2, Unknown=2),
            Budgets(1, None),
            {"unknown-0": "a"},
            "False",
            ZONE_UNHEALTHY,
            "a (4 of 4",
        ),
        # the outage is elsewhere: none of this deployment's unhealthy machines is in it
        (fleet(Running=2, Unknown=2), Budgets(1, None), {"unknown-0": "b"}, "True", WITHIN_BUDGET, "2 of 4"),
    ],
)
def test_deployment_condition(
    peers: list[Machine], budgets: Budgets, zones: dict[str, str], status: str, reason: str, in_message: str
) -> None:
    verdict = deployment_condition(peers, budgets, zones, OUTAGE)
    assert (verdict.status, verdict.reason) == (status, reason)
    assert in_message in verdict.message


def test_the_blocked_gauge_per_deployment() -> None:
    from mcm_tasks.api import MachineDeployment
    from mcm_tasks.controllers.common.remediation_metrics import remediation_blocked

    def deployment(name: str, conditions: list[dict[str, str]]) -> MachineDeployment:
        return MachineDeployment.model_validate(
            {"metadata": {"name": name, "namespace": "ns"}, "status": {"conditions": conditions}}
        )

    family = remediation_blocked(
        [
            deployment(
                "held", [{"type": "RemediationAllowed", "status": "False", "reason": TOO_MANY_UNHEALTHY}]
            ),
            deployment(
                "resumed", [{"type": "RemediationAllowed", "status": "True", "reason": WITHIN_BUDGET}]
            ),
            deployment("never", []),
        ]
    )
    values = {s.labels["name"]: (s.value, s.labels["reason"]) for s in family.samples}
    assert values == {"held": (1.0, TOO_MANY_UNHEALTHY), "resumed": (0.0, ""), "never": (0.0, "")}
