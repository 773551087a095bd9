"""The adaptive creation timeout's edges (``common/creation_timeout`` decides): after a machine's join
or its join timeout, read its MachineDeployment (from the mirror), and write the deployment's
``node.machine.sapcloud.io/effective-creation-timeout`` with an Event on every change. The write is
guarded by the deployment's resourceVersion: of two machines deciding at once, one writes and the
other's next observation decides again on the new value. Best effort: a failed write is logged, the
machine's own pass goes on."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from mcm_tasks import kinds
from mcm_tasks.api import Machine
from mcm_tasks.api.constants import EFFECTIVE_CREATION_TIMEOUT_ANNOTATION, MACHINE_DEPLOYMENT_NAME_LABEL_KEY
from mcm_tasks.controllers.common import context_io
from mcm_tasks.controllers.common import creation_timeout as adaptive
from mcm_tasks.controllers.common.events import recorder
from mcm_tasks.controllers.common.scope import PassScope
from mcm_tasks.controllers.machine.health import creation_timeout, declared_creation_timeout
from mcm_tasks.durations import format_duration, parse_duration
from mcm_tasks.kube import ops
from mcm_tasks.kube.events import NORMAL

log = logging.getLogger(__name__)

#: (machine's timeout, deployment's current value, declared, ceiling) → the new value or None
Decide = Callable[[float, float, float, float], float | None]


def _adapt(scope: PassScope[Any], machine: Machine, decide: Decide, reason: str, why: str) -> None:
    name = machine.metadata.labels.get(MACHINE_DEPLOYMENT_NAME_LABEL_KEY, "")
    if not name:
        return
    settings = scope.settings
    namespace = machine.metadata.namespace or settings.namespace
    deployment = context_io.get_machine_deployment(scope.api, name, namespace)
    if deployment is None:
        return
    declared = declared_creation_timeout(machine, settings)
    maximum = adaptive.ceiling(declared, settings.machine_creation_timeout_max)
    raw = deployment.metadata.annotations.get(EFFECTIVE_CREATION_TIMEOUT_ANNOTATION)
    try:
        current = parse_duration(raw) if raw else declared
    except ValueError:
        current = declared
    mine = creation_timeout(machine, settings)
    new = decide(mine, current, declared, maximum)
    if new is None:
        return
    value = format_duration(new)
    patch = {
        "metadata": {
            "resourceVersion": deployment.metadata.resource_version,
            "annotations": {EFFECTIVE_CREATION_TIMEOUT_ANNOTATION: value},
        }
    }
    try:
        written = ops.patch(scope.api, kinds.MACHINE_DEPLOYMENT.resource, name, patch, namespace)
    except Exception as err:  # a Conflict: another machine's observation wrote first
        log.info("MachineDeployment %s/%s: effective creation timeout not written: %s", namespace, name, err)
        return
    message = (
        f"effective creation timeout {format_duration(current)} → {value} "
        f"(declared {format_duration(declared)}, max {format_duration(maximum)}): {why}"
    )
    log.info("MachineDeployment %s/%s: %s", namespace, name, message)
    recorder(scope.api).event(written, NORMAL, reason, message)


def on_join_timeout(scope: PassScope[Any], machine: Machine) -> None:
    """The machine failed to join within its creation timeout: raise its deployment's, a step."""
    timeout = format_duration(creation_timeout(machine, scope.settings))
    _adapt(
        scope,
        machine,
        lambda mine, current, _declared, maximum: adaptive.after_join_timeout(
            mine, current, _declared, maximum
        ),
        adaptive.RAISED,
        f"machine {machine.metadata.name} did not join within {timeout}",
    )


def on_join(scope: PassScope[Any], machine: Machine, seconds: float) -> None:
    """The machine joined after ``seconds``: lower its deployment's timeout a step if that was fast."""
    _adapt(
        scope,
        machine,
        lambda mine, current, declared, _maximum: adaptive.after_join(seconds, mine, current, declared),
        adaptive.LOWERED,
        f"machine {machine.metadata.name} joined in {format_duration(round(seconds, 1))}",
    )
