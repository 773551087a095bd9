"""Overshooting: thresholds and freeze decisions of ``mcm_tasks.controllers.safety.overshooting``."""

from __future__ import annotations

from typing import Any

import pytest

from mcm_tasks.api import Machine, MachineDeployment, MachineSet
from mcm_tasks.api.constants import FREEZE_LABEL_KEY, UNFREEZE_ANNOTATION
from mcm_tasks.controllers.safety.overshooting import (
    OVERSHOOTING_REASON,
    UNDERSHOOTING_REASON,
    UNFREEZE_ANNOTATION_REASON,
    Decision,
    FreezeChange,
    Thresholds,
    decide_deployment,
    decide_set,
    machines_per_owner,
    owning_deployment,
    plan,
    thresholds,
)

UP, DOWN = 2, 1
F = FreezeChange
OVER, UNDER, MANUAL = OVERSHOOTING_REASON, UNDERSHOOTING_REASON, UNFREEZE_ANNOTATION_REASON
FROZEN_CONDITION = {"type": "Frozen", "status": "True", "reason": OVERSHOOTING_REASON}


def deployment(
    replicas: int = 3,
    strategy: dict[str, Any] | None = None,
    *,
    uid: str = "d-uid",
    label: bool = False,
    condition: bool = False,
    unfreeze: bool = False,
) -> MachineDeployment:
    meta: dict[str, Any] = {"name": "d", "namespace": "ns", "uid": uid, "labels": {}, "annotations": {}}
    if label:
        meta["labels"][FREEZE_LABEL_KEY] = "True"
    if unfreeze:
        meta["annotations"][UNFREEZE_ANNOTATION] = "True"
    spec = {
        "replicas": replicas,
        "strategy": strategy
        or {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
    }
    status = {"conditions": [FROZEN_CONDITION] if condition else []}
    return MachineDeployment.model_validate({"metadata": meta, "spec": spec, "status": status})


def machine_set(
    replicas: int = 3,
    *,
    name: str = "s",
    owner: str | None = "d-uid",
    label: bool = False,
    condition: bool = False,
    unfreeze: bool = False,
) -> MachineSet:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "ns",
        "uid": f"{name}-uid",
        "labels": {},
        "annotations": {},
    }
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineDeployment", "name": "d",
             "uid": owner, "controller": True}
        ]  # fmt: skip
    if label:
        meta["labels"][FREEZE_LABEL_KEY] = "True"
    if unfreeze:
        meta["annotations"][UNFREEZE_ANNOTATION] = "True"
    status = {"machineSetCondition": [FROZEN_CONDITION] if condition else []}
    return MachineSet.model_validate({"metadata": meta, "spec": {"replicas": replicas}, "status": status})


@pytest.mark.parametrize(
    ("ms", "d", "expected"),
    [
        pytest.param(machine_set(3, owner=None), None, Thresholds(8, 7), id="standalone-2x-replicas"),
        pytest.param(machine_set(0, owner=None), None, Thresholds(2, 1), id="standalone-zero"),
        pytest.param(machine_set(1), deployment(3), Thresholds(6, 5), id="deployment-int-surge"),
        pytest.param(
            machine_set(1),
            deployment(
                10, {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}}
            ),
            Thresholds(15, 14),
            id="percent-surge-rounds-up",
        ),
        pytest.param(
            machine_set(1),
            deployment(
                4, {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "50%", "maxUnavailable": 0}}
            ),
            Thresholds(8, 7),
            id="percent-surge-exact",
        ),
        pytest.param(
            machine_set(1), deployment(3, {"type": "Recreate"}), Thresholds(5, 4), id="recreate-no-surge"
        ),
        pytest.param(
            machine_set(1),
            deployment(
                3, {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "1.5%", "maxUnavailable": 0}}
            ),
            Thresholds(5, 4),
            id="invalid-surge-counts-zero",
        ),
    ],
)
def test_thresholds(ms: MachineSet, d: MachineDeployment | None, expected: Thresholds) -> None:
    assert thresholds(ms, d, UP, DOWN) == expected


def test_safety_settings_shift_the_thresholds() -> None:
    assert thresholds(machine_set(2, owner=None), None, 5, 3) == Thresholds(9, 6)


# deployment(3) with maxSurge 1: higher 6, lower 5
def frozen_set(**kw: Any) -> MachineSet:
    return machine_set(label=True, condition=True, **kw)


@pytest.mark.parametrize(
    ("ms", "count", "change", "reason"),
    [
        pytest.param(machine_set(), 5, F.NONE, "", id="below-higher"),
        pytest.param(machine_set(), 6, F.FREEZE, OVER, id="at-higher-freezes"),
        pytest.param(machine_set(), 40, F.FREEZE, OVER, id="far-above-freezes"),
        pytest.param(frozen_set(), 7, F.NONE, "", id="frozen-stays"),
        pytest.param(frozen_set(), 5, F.UNFREEZE, UNDER, id="at-lower"),
        pytest.param(frozen_set(), 0, F.UNFREEZE, UNDER, id="empty"),
        pytest.param(machine_set(label=True), 6, F.FREEZE, OVER, id="label-only-completed"),
        pytest.param(machine_set(condition=True), 6, F.FREEZE, OVER, id="condition-only-completed"),
        pytest.param(machine_set(label=True), 3, F.UNFREEZE, UNDER, id="label-only-unfrozen"),
        pytest.param(
            frozen_set(unfreeze=True), 9, F.UNFREEZE, MANUAL,
            id="annotation-unfreezes-even-above",
        ),
        pytest.param(machine_set(unfreeze=True), 1, F.UNFREEZE, MANUAL, id="annotation-removed"),
    ],
)  # fmt: skip
def test_set_decisions(ms: MachineSet, count: int, change: FreezeChange, reason: str) -> None:
    decision = decide_set(ms, count, deployment(3), UP, DOWN)
    assert (decision.change, decision.reason) == (change, reason)


def test_hysteresis_between_lower_and_higher_with_a_wider_safety_down() -> None:
    frozen = machine_set(label=True, condition=True)
    # safetyDown 3: higher 6, lower 3; a frozen set with 4 or 5 machines stays frozen, a free one stays free
    assert decide_set(frozen, 4, deployment(3), UP, 3).change is F.NONE
    assert decide_set(machine_set(), 5, deployment(3), UP, 3).change is F.NONE
    assert decide_set(frozen, 3, deployment(3), UP, 3).change is F.UNFREEZE


def test_freeze_message_names_the_count_and_the_limit() -> None:
    decision = decide_set(machine_set(), 7, deployment(3), UP, DOWN)
    assert decision.message == (
        "The number of machines backing MachineSet: s is 7 >= 6 which is the Max-ScaleUp-Limit"
    )
    assert not decision.was_frozen


def test_standalone_set_uses_its_own_replicas() -> None:
    standalone = machine_set(2, owner=None)
    assert decide_set(standalone, 5, None, UP, DOWN).change is F.NONE
    assert decide_set(standalone, 6, None, UP, DOWN).change is F.FREEZE


def test_deployment_annotation_unfreezes_its_sets() -> None:
    d = deployment(3, unfreeze=True, label=True, condition=True)
    decision = decide_set(machine_set(label=True, condition=True), 9, d, UP, DOWN)
    assert (decision.change, decision.reason, decision.was_frozen) == (
        F.UNFREEZE,
        UNFREEZE_ANNOTATION_REASON,
        True,
    )


FREEZE = Decision(F.FREEZE, OVERSHOOTING_REASON, "too many")
UNFREEZE = Decision(F.UNFREEZE, UNDERSHOOTING_REASON, "fine", True)
NONE = Decision()


@pytest.mark.parametrize(
    ("d", "sets", "change"),
    [
        pytest.param(deployment(), [(machine_set(), FREEZE)], F.FREEZE, id="set-freezes-deployment"),
        pytest.param(deployment(), [(machine_set(), NONE)], F.NONE, id="nothing"),
        pytest.param(deployment(), [], F.NONE, id="no-sets"),
        pytest.param(
            deployment(label=True, condition=True), [(machine_set(label=True, condition=True), UNFREEZE)],
            F.UNFREEZE, id="last-frozen-set-unfrozen",
        ),
        pytest.param(
            deployment(label=True, condition=True),
            [(machine_set(name="a", label=True, condition=True), UNFREEZE),
             (machine_set(name="b", label=True, condition=True), NONE)],
            F.NONE, id="another-set-still-frozen",
        ),
        pytest.param(
            deployment(label=True, condition=True), [(machine_set(label=True, condition=True), NONE)],
            F.NONE, id="frozen-with-frozen-set",
        ),
        pytest.param(deployment(label=True), [(machine_set(label=True), NONE)], F.FREEZE,
                     id="repair-label-only"),
        pytest.param(deployment(condition=True), [(machine_set(), NONE)], F.UNFREEZE, id="stale-condition"),
        pytest.param(
            deployment(unfreeze=True, label=True, condition=True), [(machine_set(), FREEZE)],
            F.UNFREEZE, id="annotation-wins",
        ),
    ],
)  # fmt: skip
def test_deployment_decisions(
    d: MachineDeployment, sets: list[tuple[MachineSet, Decision]], change: F
) -> None:
    assert decide_deployment(d, sets).change is change


def owned_machines(owner_uid: str, n: int) -> list[Machine]:
    ref = {"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet", "name": "x", "uid": owner_uid,
           "controller": True}  # fmt: skip
    return [
        Machine.model_validate({"metadata": {"name": f"{owner_uid}-{i}", "ownerReferences": [ref]}})
        for i in range(n)
    ]


def test_machines_per_owner_counts_controllers_only() -> None:
    free = Machine.model_validate({"metadata": {"name": "free"}})
    assert machines_per_owner([*owned_machines("a", 2), *owned_machines("b", 1), free]) == {"a": 2, "b": 1}


def test_owning_deployment_by_controller_uid() -> None:
    d = deployment()
    assert owning_deployment(machine_set(), {"d-uid": d}) is d
    assert owning_deployment(machine_set(owner="other"), {"d-uid": d}) is None
    assert owning_deployment(machine_set(owner=None), {"d-uid": d}) is None


def test_plan_acts_on_every_overshooting_set_in_one_pass() -> None:
    """Deliberate difference from upstream (one set per pass): all runaway sets freeze at once."""
    d = deployment(1, uid="d-uid")  # higher 1 + 1 + 2 = 4
    a, b, c = machine_set(1, name="a"), machine_set(1, name="b"), machine_set(1, name="c", owner=None)
    machines = [*owned_machines("a-uid", 4), *owned_machines("b-uid", 5), *owned_machines("c-uid", 4)]
    result = plan([a, b, c], [d], machines_per_owner(machines), UP, DOWN)
    assert [(s.metadata.name, dec.change) for s, dec in result.sets] == [
        ("a", F.FREEZE),
        ("b", F.FREEZE),
        ("c", F.FREEZE),
    ]
    assert [(x.metadata.name, dec.change) for x, dec in result.deployments] == [("d", F.FREEZE)]


def test_plan_unfreezes_a_deployment_once_its_sets_are_back_down() -> None:
    d = deployment(1, label=True, condition=True)
    a = machine_set(1, name="a", label=True, condition=True)
    result = plan([a], [d], {"a-uid": 3}, UP, DOWN)
    assert [dec.change for _, dec in result.sets] == [F.UNFREEZE]
    assert [dec.change for _, dec in result.deployments] == [F.UNFREEZE]


def test_plan_leaves_quiet_objects_out() -> None:
    result = plan([machine_set(1)], [deployment(1)], {"s-uid": 2}, UP, DOWN)
    assert result.sets == [] and result.deployments == []
