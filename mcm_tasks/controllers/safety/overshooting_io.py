"""The overshooting job's I/O: read the sets and deployments and count the sets' machines, apply the
plan, tell people.

A freeze or unfreeze is two writes: the metadata (``freeze`` label, the unfreeze annotation removed)
by merge patch, then the ``Frozen`` condition through the status subresource, based on what the patch
returned and re-read on a Conflict (the MachineSet and MachineDeployment controllers write statuses
too, keeping conditions they do not own). The label goes first because it is what stops scale-ups.
A failure on one object does not stop the others; the first one is raised afterwards so the job is
retried with backoff. Sets and deployments that fail validation are not judged: their controllers do
not scale them (and say so on them), and their numbers (negative replicas, say) mean nothing; those
that do not even parse are reported on themselves by ``reads`` and left out.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from kubernetes.client import ApiClient

from mcm_tasks import kinds
from mcm_tasks.api import (
    ConditionStatus,
    MachineDeployment,
    MachineDeploymentCondition,
    MachineDeploymentConditionType,
    MachineSet,
    MachineSetCondition,
    MachineSetConditionType,
    dump,
    remove_condition,
    set_condition,
)
from mcm_tasks.api.constants import FREEZE_LABEL_KEY, FREEZE_LABEL_VALUE, UNFREEZE_ANNOTATION
from mcm_tasks.api.validation import validate_machine_deployment, validate_machine_set
from mcm_tasks.controllers.common.events import recorder
from mcm_tasks.controllers.common.scope import PassScope
from mcm_tasks.controllers.safety import reads_io
from mcm_tasks.controllers.safety.overshooting import Decision, FreezeChange, Plan, plan
from mcm_tasks.controllers.safety.scope import SafetyScope
from mcm_tasks.kube import ops
from mcm_tasks.kube.errors import describe, is_conflict, is_not_found
from mcm_tasks.kube.events import NORMAL, WARNING
from mcm_tasks.kube.resources import Resource

log = logging.getLogger(__name__)

Frozenable = TypeVar("Frozenable", MachineSet, MachineDeployment)


def check_overshooting(scope: SafetyScope) -> Plan:
    settings = scope.settings
    machine_sets = [s for s in reads_io.machine_sets(scope) if not validate_machine_set(s)]
    the_plan = plan(
        machine_sets,
        [d for d in reads_io.machine_deployments(scope) if not validate_machine_deployment(d)],
        reads_io.machines_per_owner(scope, [s.metadata.uid for s in machine_sets if s.metadata.uid]),
        settings.safety_up,
        settings.safety_down,
    )
    api = scope.api
    errors: list[Exception] = []
    for machine_set, decision in the_plan.sets:
        _apply(scope, api, kinds.MACHINE_SET.resource, machine_set, decision, errors)
    for deployment, decision in the_plan.deployments:
        _apply(scope, api, kinds.MACHINE_DEPLOYMENT.resource, deployment, decision, errors)
    if errors:
        raise errors[0]
    return the_plan


def _apply(
    scope: PassScope[Any],
    api: ApiClient,
    res: Resource,
    obj: Frozenable,
    decision: Decision,
    errors: list[Exception],
) -> None:
    try:
        written = _write(scope, api, res, obj, decision)
    except Exception as err:
        log.warning("%s %s: %s failed: %s", res.kind, obj.key, decision.change, describe(err))
        errors.append(err)
        return
    if written is None:
        return
    freeze = decision.change is FreezeChange.FREEZE
    log.warning("%s %s %s: %s", res.kind, obj.key, "frozen" if freeze else "unfrozen", decision.message)
    if freeze or decision.was_frozen:
        verb = "Froze" if freeze else "Unfroze"
        recorder(api).event(written, WARNING if freeze else NORMAL, f"{verb}{res.kind}", decision.message)


def metadata_patch(freeze: bool) -> dict[str, Any]:
    if freeze:
        return {"metadata": {"labels": {FREEZE_LABEL_KEY: FREEZE_LABEL_VALUE}}}
    return {"metadata": {"labels": {FREEZE_LABEL_KEY: None}, "annotations": {UNFREEZE_ANNOTATION: None}}}


def _write(
    scope: PassScope[Any], api: ApiClient, res: Resource, obj: Frozenable, decision: Decision
) -> Frozenable | None:
    """Both writes; the object as written, or None when it is gone."""
    model = type(obj)
    freeze = decision.change is FreezeChange.FREEZE
    try:
        patched = model.model_validate(
            ops.patch(api, res, obj.metadata.name or "", metadata_patch(freeze), obj.metadata.namespace)
        )
        return _write_status(api, res, patched, lambda o: _with_condition(scope, o, decision))
    except Exception as err:
        if is_not_found(err):
            return None
        raise


def _with_condition(scope: PassScope[Any], obj: Frozenable, decision: Decision) -> Any:
    """The object's status with the Frozen condition set or removed; None when already so."""
    now = scope.clock()
    conditions: list[Any]
    if isinstance(obj, MachineSet):
        if decision.change is FreezeChange.FREEZE:
            conditions = set_condition(
                obj.status.conditions,
                MachineSetCondition(
                    type=MachineSetConditionType.FROZEN,
                    status=ConditionStatus.TRUE,
                    reason=decision.reason,
                    message=decision.message,
                    last_transition_time=now,
                ),
            )
        else:
            conditions = remove_condition(obj.status.conditions, MachineSetConditionType.FROZEN)
    elif decision.change is FreezeChange.FREEZE:
        conditions = set_condition(
            obj.status.conditions,
            MachineDeploymentCondition(
                type=MachineDeploymentConditionType.FROZEN,
                status=ConditionStatus.TRUE,
                reason=decision.reason,
                message=decision.message,
                last_transition_time=now,
                last_update_time=now,
            ),
        )
    else:
        conditions = remove_condition(obj.status.conditions, MachineDeploymentConditionType.FROZEN)
    if [dump(c) for c in conditions] == [dump(c) for c in obj.status.conditions]:
        return None
    return obj.status.model_copy(update={"conditions": conditions})


def _write_status(
    api: ApiClient, res: Resource, obj: Frozenable, compute: Callable[[Frozenable], Any]
) -> Frozenable:
    """PUT the status ``compute`` gives (nothing when it gives None), re-reading on a Conflict."""
    model = type(obj)
    current = [obj]

    def attempt() -> Frozenable:
        o = current[0]
        status = compute(o)
        if status is None:
            return o
        try:
            return model.model_validate(ops.update_status(api, res, o.status_body(status)))
        except Exception as err:
            if is_conflict(err):
                current[0] = model.model_validate(
                    ops.get(api, res, o.metadata.name or "", o.metadata.namespace)
                )
            raise

    return ops.retry_on_conflict(attempt)
