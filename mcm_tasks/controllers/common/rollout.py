"""A MachineDeployment's rollout budgets (upstream deploymentutil's ``ResolveFenceposts``,
``MaxSurge``, ``MaxUnavailable``): the MachineDeployment controller plans with them and the
overshooting safety job allows for the surge."""

from __future__ import annotations

from mcm_tasks.api import MachineDeployment, MachineDeploymentStrategyType, OrchestrationType
from mcm_tasks.api.intstr import resolve_int_or_percent


def resolve_fenceposts(
    max_surge: int | str | None, max_unavailable: int | str | None, replicas: int
) -> tuple[int, int]:
    """(surge, unavailable) as machine counts: surge percentages round up, unavailability ones down;
    when both come to 0, one machine may be unavailable (a surge might not fit in a quota).
    ValueError on values validation refuses."""
    surge = resolve_int_or_percent(max_surge, replicas, True)
    unavailable = resolve_int_or_percent(max_unavailable, replicas, False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def is_rolling(deployment: MachineDeployment) -> bool:
    """A strategy with surge and availability budgets: RollingUpdate, and InPlaceUpdate (whose new
    set grows by maxSurge and by the machines it takes over, as upstream's NewMSNewReplicas)."""
    return deployment.spec.strategy.type in (
        MachineDeploymentStrategyType.ROLLING_UPDATE,
        MachineDeploymentStrategyType.IN_PLACE_UPDATE,
    )


def is_manual_in_place(deployment: MachineDeployment) -> bool:
    """An InPlaceUpdate whose Nodes an operator selects (``orchestrationType: Manual``)."""
    strategy = deployment.spec.strategy
    return (
        strategy.type == MachineDeploymentStrategyType.IN_PLACE_UPDATE
        and strategy.in_place_update is not None
        and strategy.in_place_update.orchestration_type == OrchestrationType.MANUAL
    )


def _strategy_params(deployment: MachineDeployment) -> tuple[int | str | None, int | str | None] | None:
    strategy = deployment.spec.strategy
    if strategy.type == MachineDeploymentStrategyType.ROLLING_UPDATE and strategy.rolling_update is not None:
        return strategy.rolling_update.max_surge, strategy.rolling_update.max_unavailable
    if (
        strategy.type == MachineDeploymentStrategyType.IN_PLACE_UPDATE
        and strategy.in_place_update is not None
    ):
        return strategy.in_place_update.max_surge, strategy.in_place_update.max_unavailable
    return None


def max_surge(deployment: MachineDeployment) -> int:
    """Extra machines a RollingUpdate (or InPlaceUpdate) may run above ``replicas``; 0 for Recreate."""
    params = _strategy_params(deployment)
    if params is None or not is_rolling(deployment):
        return 0
    return resolve_fenceposts(*params, deployment.spec.replicas)[0]


def max_unavailable(deployment: MachineDeployment) -> int:
    """Machines that may be unavailable during a rollout, at most ``replicas``; 0 for Recreate.
    Under a Manual in-place update the surge counts as 0 (nothing surges: the new set only takes
    the machines an operator had updated), so a maxUnavailable of 0 still lets one go, as
    upstream's ``MaxUnavailable``."""
    params = _strategy_params(deployment)
    replicas = deployment.spec.replicas
    if params is None or replicas == 0:
        return 0
    if is_manual_in_place(deployment):
        params = (0, params[1])
    return min(resolve_fenceposts(*params, replicas)[1], replicas)
