"""The propagation's writes: one patch per machine whose carried template differs from its set's
(``sync.py`` decides the patch).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from kubernetes.client import ApiClient

from mcm_tasks import kinds
from mcm_tasks.api import Machine, MachineSet
from mcm_tasks.cache.models import get_parsed_cache
from mcm_tasks.controllers.machineset.sync import CARRIED, PATCH, carried_of, desired_of, propagation_patch
from mcm_tasks.kube import ops
from mcm_tasks.kube.errors import describe, is_not_found

log = logging.getLogger(__name__)


def propagate(api: ApiClient, machine_set: MachineSet, machines: Sequence[Machine]) -> list[Machine]:
    """Write the propagation patches; the machines as they are now (patched ones as written).

    A machine that vanished meanwhile is dropped from the list; any other error propagates, as MCM
    fails the reconcile when a machine cannot be brought up to date.
    """
    out: list[Machine] = []
    desired = desired_of(machine_set)
    cache = get_parsed_cache()
    name = PATCH + desired.identity

    def decide(machine: Machine) -> dict[str, Any] | None:
        return propagation_patch(machine, desired, cache.derived(machine, CARRIED, carried_of))

    for machine in machines:
        # a function of the machine and the template: an unchanged machine shared through the
        # parsed-object cache is decided once per template, not on every pass
        body = cache.derived(machine, name, decide)
        if body is None:
            out.append(machine)
            continue
        try:
            written = ops.patch(
                api, kinds.MACHINE.resource, machine.metadata.name or "", body, machine.metadata.namespace
            )
        except Exception as err:
            if is_not_found(err):
                continue
            raise RuntimeError(
                f"could not propagate the template of MachineSet {machine_set.key} to machine "
                f"{machine.key}: {describe(err)}"
            ) from err
        log.info("machine %s: template of MachineSet %s propagated (%s)",
                 machine.key, machine_set.key, ", ".join(sorted(body["spec"])))  # fmt: skip
        out.append(Machine.model_validate(written))
    return out
