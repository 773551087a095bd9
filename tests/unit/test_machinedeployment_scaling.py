"""The arithmetic of a deployment's MachineSets: budgets and rounding, the new set's size, the old
sets' scale-down, proportional scaling and scaling-event detection."""

from __future__ import annotations

import pytest

from mcm_tasks.api import MachineDeployment
from mcm_tasks.controllers.common.rollout import max_surge, max_unavailable, resolve_fenceposts
from mcm_tasks.controllers.machinedeployment.scaling import (
    available,
    cleanup_unhealthy,
    find_active_or_latest,
    is_saturated,
    is_scaling_event,
    max_scaled_down,
    new_set_replicas,
    occupancy,
    plan_scale,
    scale_down_old,
)
from tests.unit.machinedeployment_support import deployment, machine_set


@pytest.mark.parametrize(
    ("surge", "unavailable", "replicas", "expected"),
    [
        (1, 0, 10, (1, 0)),
        ("25%", "25%", 10, (3, 2)),  # 2.5 up, 2.5 down
        ("10%", "10%", 5, (1, 0)),  # 0.5 up → 1, 0.5 down → 0
        ("0%", "0%", 10, (0, 1)),  # both zero → one may be unavailable
        (0, 0, 3, (0, 1)),
        ("1%", "1%", 2, (1, 0)),
        ("0%", "49%", 2, (0, 0 + 1)),  # 0.98 down → 0, and surge 0 → unavailable 1
        (2, 1, 10, (2, 1)),
        ("100%", "100%", 7, (7, 7)),
    ],
)
def test_resolve_fenceposts(
    surge: int | str, unavailable: int | str, replicas: int, expected: tuple[int, int]
) -> None:
    assert resolve_fenceposts(surge, unavailable, replicas) == expected


@pytest.mark.parametrize("bad", [None, "5", "12.5%", "abc%"])
def test_resolve_fenceposts_refuses_what_validation_refuses(bad: object) -> None:
    with pytest.raises(ValueError):
        resolve_fenceposts(bad, 1, 10)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "surge", "unavailable"),
    [
        ({"replicas": 10, "surge": 2, "unavailable": 1}, 2, 1),
        ({"replicas": 3, "surge": 0, "unavailable": 5}, 0, 3),  # capped at replicas
        ({"replicas": 0, "surge": 2, "unavailable": 1}, 2, 0),  # nothing can be unavailable of nothing
        ({"replicas": 10, "strategy": "Recreate"}, 0, 0),
        (
            {"replicas": 10, "strategy": "InPlaceUpdate", "surge": 1, "unavailable": 2},
            1,
            2,
        ),  # inPlaceUpdate budgets
    ],
)
def test_max_surge_and_unavailable_per_strategy(
    kwargs: dict[str, object], surge: int, unavailable: int
) -> None:
    d = deployment(**kwargs)  # type: ignore[arg-type]
    assert (max_surge(d), max_unavailable(d)) == (surge, unavailable)


def test_occupancy_and_available_cover_lagging_statuses() -> None:
    scaled_up_not_created = machine_set("a", spec=4, replicas=2, available=2)
    scaled_down_not_deleted = machine_set("b", spec=2, replicas=5, available=5)
    assert (occupancy(scaled_up_not_created), available(scaled_up_not_created)) == (4, 2)
    assert (occupancy(scaled_down_not_deleted), available(scaled_down_not_deleted)) == (5, 2)


@pytest.mark.parametrize(
    ("replicas", "surge", "sets", "new", "expected"),
    [
        # fresh rollout: 10 old, surge 2 → new gets 2
        (10, 2, [("old", 10, 10)], ("new", 0, 0), 2),
        # at the surge limit: no growth
        (10, 2, [("old", 10, 10)], ("new", 2, 2), 2),
        # old shrunk by 3 → room for 3 more
        (10, 2, [("old", 7, 7)], ("new", 2, 2), 5),
        # never beyond replicas
        (10, 5, [("old", 1, 1)], ("new", 8, 8), 10),
        # old set scaled down but its machines still there (status lags): no room yet
        (10, 2, [("old", 7, 10)], ("new", 2, 2), 2),
        # new set scaled up, machines not created yet: it still counts at its spec
        (10, 2, [("old", 10, 10)], ("new", 2, 0), 2),
        # no old sets at all: straight to replicas
        (10, 2, [], ("new", 0, 0), 10),
    ],
)
def test_new_set_replicas(
    replicas: int,
    surge: int,
    sets: list[tuple[str, int, int]],
    new: tuple[str, int, int],
    expected: int,
) -> None:
    d = deployment(replicas, surge=surge, unavailable=1)
    olds = [machine_set(n, spec=s, replicas=r) for n, s, r in sets]
    new_set = machine_set(new[0], spec=new[1], replicas=new[2])
    assert new_set_replicas(d, [*olds, new_set], new_set) == expected


def test_new_set_replicas_for_recreate_is_replicas() -> None:
    d = deployment(6, strategy="Recreate")
    new_set = machine_set("new", spec=0)
    assert new_set_replicas(d, [machine_set("old", spec=6), new_set], new_set) == 6


@pytest.mark.parametrize(
    ("replicas", "unavailable", "sets", "new", "expected"),
    [
        # 10 replicas, maxUnavailable 1: old 10 + new 2 (not available) → 12 - 9 - 2 = 1
        (10, 1, [("old", 10, 10)], ("new", 2, 0), 1),
        # new machines available → 12 - 9 - 0 = 3
        (10, 1, [("old", 10, 10)], ("new", 2, 2), 3),
        # maxUnavailable 0, new not available → nothing may go
        (10, 0, [("old", 10, 10)], ("new", 1, 0), 1 - 1),
    ],
)
def test_max_scaled_down(
    replicas: int,
    unavailable: int,
    sets: list[tuple[str, int, int]],
    new: tuple[str, int, int],
    expected: int,
) -> None:
    d = deployment(replicas, surge=2, unavailable=unavailable)
    olds = [machine_set(n, spec=s, available=a) for n, s, a in sets]
    new_set = machine_set(new[0], spec=new[1], replicas=new[1], available=new[2])
    assert max_scaled_down(d, [*olds, new_set], new_set) == expected


@pytest.mark.parametrize(
    ("sets", "budget", "expected"),
    [
        # oldest set first, by its unavailable machines
        ([("a", 5, 3, 0), ("b", 5, 4, 1)], 10, {"a": 3, "b": 4}),
        ([("a", 5, 3, 0), ("b", 5, 4, 1)], 1, {"a": 4}),
        # healthy sets are not touched
        ([("a", 5, 5, 0)], 10, {}),
        # a set reporting more available than its spec (stale) has nothing unhealthy
        ([("a", 3, 5, 0)], 10, {}),
    ],
)
def test_cleanup_unhealthy_first(
    sets: list[tuple[str, int, int, int]], budget: int, expected: dict[str, int]
) -> None:
    olds = [machine_set(n, spec=s, replicas=max(s, a), available=a, age=age) for n, s, a, age in sets]
    assert cleanup_unhealthy(olds, budget) == expected


@pytest.mark.parametrize(
    ("replicas", "unavailable", "olds", "new", "expected"),
    [
        # 10 available old + 2 available new, min 9 → 3 may go, oldest first
        (10, 1, [("a", 4, 4, 0), ("b", 6, 6, 1)], ("new", 2, 2), {"a": 1}),
        (10, 1, [("a", 2, 2, 0), ("b", 8, 8, 1)], ("new", 2, 2), {"a": 0, "b": 7}),
        # at the minimum: nothing
        (10, 1, [("a", 9, 9, 0)], ("new", 1, 0), {}),
        # an old set already scaled down, status not yet: counts only its spec
        (10, 1, [("a", 9, 9, 0)], ("new", 1, 1), {"a": 8}),
    ],
)
def test_scale_down_old_by_available_surplus(
    replicas: int,
    unavailable: int,
    olds: list[tuple[str, int, int, int]],
    new: tuple[str, int, int],
    expected: dict[str, int],
) -> None:
    d = deployment(replicas, surge=2, unavailable=unavailable)
    old_sets = [machine_set(n, spec=s, replicas=a, available=a, age=age) for n, s, a, age in olds]
    new_set = machine_set(new[0], spec=new[1], available=new[2], age=10)
    assert scale_down_old(d, [*old_sets, new_set], old_sets) == expected


def test_scale_down_old_trusts_spec_over_stale_available() -> None:
    """A second pass before the old set's status caught up does not scale it down again."""
    d = deployment(10, surge=2, unavailable=1)
    old = machine_set("old", spec=9, replicas=10, available=10)  # scaled 10 → 9 by the previous pass
    new = machine_set("new", spec=2, replicas=2, available=0, age=10)
    assert scale_down_old(d, [old, new], [old]) == {}


# --- scaling events and proportional scaling ------------------------------------------------------------


@pytest.mark.parametrize(
    ("replicas", "olds", "new", "expected"),
    [
        (5, [], ("new", 5, 5), False),
        (6, [], ("new", 5, 5), True),
        (5, [("old", 3, 5)], ("new", 2, 5), False),
        (7, [("old", 3, 5)], ("new", 2, 5), True),
        # sets without the annotation do not count
        (7, [("old", 3, None)], None, False),
        # nothing active, replicas > 0 and a new set to take them: scale from zero
        (3, [("old", 0, 0)], ("new", 0, 0), True),
        # nothing active, but the new set was sized for these replicas: a rollout's moment (an
        # in-place update's last machine in flight to the new set), left to the strategy
        (1, [("old", 0, 1)], ("new", 0, 1), False),
        # nothing active and no new set: the strategy creates one
        (3, [("old", 0, 0)], None, False),
        (0, [], ("new", 0, 0), False),
    ],
)
def test_is_scaling_event(
    replicas: int,
    olds: list[tuple[str, int, int | None]],
    new: tuple[str, int, int] | None,
    expected: bool,
) -> None:
    d = deployment(replicas)
    old_sets = [machine_set(n, spec=s, desired=desired) for n, s, desired in olds]
    new_set = None if new is None else machine_set(new[0], spec=new[1], desired=new[2], age=5)
    assert is_scaling_event(d, new_set, old_sets) is expected


def test_find_active_or_latest() -> None:
    old1, old2 = machine_set("o1", 0, age=0), machine_set("o2", 0, age=1)
    new = machine_set("n", 0, age=2)
    assert find_active_or_latest(new, [old1, old2]) is new
    assert find_active_or_latest(None, [old1, old2]) is old2
    only = machine_set("o1", 3)
    assert find_active_or_latest(new, [only, old2]) is only
    assert find_active_or_latest(machine_set("n", 2), [only]) is None
    assert find_active_or_latest(None, []) is None


def test_is_saturated_needs_spec_annotation_and_availability() -> None:
    d = deployment(5)
    assert is_saturated(d, machine_set("n", 5, available=5, desired=5))
    assert not is_saturated(d, machine_set("n", 5, available=4, desired=5))
    assert not is_saturated(d, machine_set("n", 5, available=5, desired=4))
    assert not is_saturated(d, None)


@pytest.mark.parametrize(
    ("replicas", "surge", "olds", "new", "expected"),
    [
        # a single active set takes everything
        (8, 1, [("old", 0, None, 0)], ("new", 5, 6, 1), {"new": 8}),
        # several active, scale down 10 → 5 (max 11 → 6): proportional by size, older first among equals
        (5, 1, [("old", 6, 11, 0)], ("new", 5, 11, 1), {"old": 3, "new": 3}),
        # equal sizes: the older first
        (4, 1, [("a", 3, 11, 0), ("b", 4, 11, 1)], ("new", 4, 11, 2), {"b": 2, "new": 2, "a": 1}),
        # what rounding leaves over goes to the largest (the oldest among equals)
        (4, 1, [("a", 2, 6, 0), ("b", 2, 6, 1)], ("new", 2, 6, 2), {"a": 1, "b": 2, "new": 2}),
        # scaling up: the increase goes to the new set only (up to replicas)
        (12, 1, [("old", 6, 11, 0)], ("new", 5, 11, 1), {"old": 6, "new": 7}),
        (20, 1, [("old", 6, 11, 0)], ("new", 5, 11, 1), {"old": 6, "new": 15}),
        # scaling to zero empties every set
        (0, 1, [("old", 6, 11, 0)], ("new", 5, 11, 1), {"old": 0, "new": 0}),
    ],
)
def test_plan_scale_proportional(
    replicas: int,
    surge: int,
    olds: list[tuple[str, int, int | None, int]],
    new: tuple[str, int, int, int],
    expected: dict[str, int],
) -> None:
    d = deployment(replicas, surge=surge, unavailable=0, status={"replicas": 11})
    old_sets = [machine_set(n, spec=s, maximum=m, age=age) for n, s, m, age in olds]
    new_set = machine_set(new[0], spec=new[1], maximum=new[2], age=new[3], available=0)
    sizes = plan_scale(d, new_set, old_sets)
    assert sizes == expected
    assert list(sizes) == list(expected)  # write order: largest first
    assert sum(sizes.values()) <= (replicas + surge if replicas else 0)


def test_plan_scale_saturated_new_set_empties_old_ones() -> None:
    d = deployment(5)
    new = machine_set("new", 5, available=5, desired=5, age=1)
    assert plan_scale(d, new, [machine_set("old", 2), machine_set("gone", 0)]) == {"old": 0}


def test_plan_scale_recreate_without_single_set_does_nothing() -> None:
    d = deployment(5, strategy="Recreate")
    assert plan_scale(d, machine_set("new", 2, age=1), [machine_set("old", 3)]) == {}


# --- upstream's #MaxUnavailable and #NewISNewReplicas tables (deployment_util_test.go) --------------------


def _strategy(
    kind: str, surge: int | None = None, unavailable: int | None = None, orchestration: str = ""
) -> dict[str, object]:
    params: dict[str, object] = {}
    if surge is not None:
        params["maxSurge"] = surge
    if unavailable is not None:
        params["maxUnavailable"] = unavailable
    if kind == "RollingUpdate" and params:
        return {"type": kind, "rollingUpdate": params}
    if kind == "InPlaceUpdate":
        return {"type": kind, "inPlaceUpdate": {**params, "orchestrationType": orchestration or "Auto"}}
    return {"type": kind}


# upstream's rows leave maxUnavailable out where it plays no part; validation requires it, so ours set 0


def _upstream_deployment(strategy: dict[str, object], replicas: int) -> MachineDeployment:
    return MachineDeployment.model_validate(
        {"metadata": {"name": "d"}, "spec": {"replicas": replicas, "strategy": strategy}}
    )


@pytest.mark.parametrize(
    ("strategy", "replicas", "expected"),
    [
        pytest.param(_strategy(""), 2, 0, id="strategy is neither RollingUpdate nor InPlaceUpdate"),
        pytest.param(_strategy("RollingUpdate"), 0, 0, id="strategy is RollingUpdate and replicas is zeros"),
        pytest.param(_strategy("RollingUpdate", 1, 1), 5, 1,
                     id="strategy is RollingUpdate with maxUnavailable=1, replicas=5"),
        pytest.param(_strategy("RollingUpdate", 2, 10), 5, 5,
                     id="strategy is RollingUpdate with maxUnavailable=10, replicas=5"),
        pytest.param(_strategy("InPlaceUpdate", 1, 2, "Manual"), 5, 2,
                     id="strategy is InPlaceUpdate with ManualUpdate=true, maxUnavailable=2, replicas=5"),
        pytest.param(_strategy("InPlaceUpdate", 1, 10, "Auto"), 3, 3,
                     id="strategy is InPlaceUpdate with ManualUpdate=false, maxUnavailable=10, replicas=3"),
        pytest.param(_strategy("InPlaceUpdate", None, None, "Manual"), 0, 0,
                     id="strategy is InPlaceUpdate with ManualUpdate=true, replicas=0"),
        pytest.param(_strategy("InPlaceUpdate", 1, 0, "Manual"), 5, 1,
                     id="ours: Manual counts no surge, so maxUnavailable 0 still lets one go"),
        pytest.param(_strategy("InPlaceUpdate", 1, 0, "Auto"), 5, 0, id="ours: Auto keeps its surge"),
    ],
)  # fmt: skip
def test_max_unavailable_upstream_cases(strategy: dict[str, object], replicas: int, expected: int) -> None:
    assert max_unavailable(_upstream_deployment(strategy, replicas)) == expected


@pytest.mark.parametrize(
    ("strategy", "replicas", "old", "new", "expected"),
    [
        pytest.param(_strategy("RollingUpdate", 2, 0), 5, 4, 2, 3,
                     id="RollingUpdate, scale up within max surge"),
        pytest.param(_strategy("RollingUpdate", 2, 0), 5, 4, 3, 3, id="RollingUpdate, max surge reached"),
        pytest.param(_strategy("Recreate"), 5, 4, 2, 5, id="Recreate strategy"),
        pytest.param(_strategy("InPlaceUpdate", orchestration="Manual"), 5, 4, 2, 0,
                     id="InPlaceUpdate with ManualUpdate=true"),
        pytest.param(_strategy("InPlaceUpdate", 2, 0, "Auto"), 5, 4, 2, 3,
                     id="InPlaceUpdate, scale up within max surge"),
        pytest.param(_strategy("InPlaceUpdate", 1, 0, "Auto"), 5, 4, 2, 2,
                     id="InPlaceUpdate with ManualUpdate=false, max surge already reached"),
        pytest.param(_strategy("InPlaceUpdate", 3, 0, "Manual"), 5, 5, 0, 0,
                     id="ours: a new Manual set is created empty whatever its maxSurge"),
    ],
)  # fmt: skip
def test_new_set_replicas_upstream_cases(
    strategy: dict[str, object], replicas: int, old: int, new: int, expected: int
) -> None:
    d = _upstream_deployment(strategy, replicas)
    new_set = machine_set("new", spec=new, replicas=new)
    assert new_set_replicas(d, [new_set, machine_set("old", spec=old, replicas=old)], new_set) == expected
