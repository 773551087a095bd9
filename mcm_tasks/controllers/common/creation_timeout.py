"""The adaptive creation timeout (MCM #1155, the design of PR #1156) as pure decisions: per
MachineDeployment, machines that fail to join within the creation timeout raise its effective value
in bounded steps up to ``--machine-creation-timeout-max`` (default twice the declared timeout), and
machines that join well within it lower it back towards the declared one. The value lives in
upstream's annotation ``node.machine.sapcloud.io/effective-creation-timeout`` on the deployment, which
the deployment copies to its new MachineSet and the set to each machine it creates (upstream's
propagation), so every machine is judged by the value in force when it was created.

A step is a quarter of the declared timeout. Each decision starts from the timeout the observed
machine was created with, not from the deployment's current value: ten machines of one generation
timing out together raise it by one step, not ten. It is lowered only by a join that took at most
the lowered value less a step (hysteresis), so a provider whose joins sit just under the raised
value does not swing back and forth between two values.
"""

from __future__ import annotations

from typing import Final

#: a step, as a share of the declared creation timeout
STEP_SHARE: Final = 0.25
#: Event reasons on the MachineDeployment
RAISED: Final = "CreationTimeoutRaised"
LOWERED: Final = "CreationTimeoutLowered"


def ceiling(declared: float, configured_max: float) -> float:
    """``--machine-creation-timeout-max``, or twice the declared timeout when it is 0; never below the
    declared timeout."""
    return max(declared, configured_max if configured_max > 0 else 2 * declared)


def step(declared: float) -> float:
    return declared * STEP_SHARE


def after_join_timeout(
    machine_timeout: float, current: float, declared: float, maximum: float
) -> float | None:
    """A machine created with ``machine_timeout`` failed to join in time: the deployment's new
    effective timeout, or None when it stays (already at the ceiling, or already raised past what
    this machine's generation would raise it to)."""
    raised = min(maximum, machine_timeout + step(declared))
    return raised if raised > current else None


def after_join(join_seconds: float, machine_timeout: float, current: float, declared: float) -> float | None:
    """A machine created with ``machine_timeout`` joined after ``join_seconds``: the deployment's new
    effective timeout, or None when it stays. Lowered one step, never below the declared value, and
    only when the join would also have fit in the lowered value with a step to spare."""
    if machine_timeout <= declared:
        return None
    lowered = max(declared, machine_timeout - step(declared))
    if join_seconds + step(declared) > lowered or lowered >= current:
        return None
    return lowered
