"""Propagation of the MachineSet's template to machines it already has, in place (no rollout):
the node template and the machine configuration (timeouts, node conditions…) to active machines, the
class kind to all of them. The machine controller then carries the node template on to the Node.

``propagation_patch`` decides, as a JSON merge patch of the machine's spec (None when the machine is
up to date); ``sync_io.propagate`` writes. Empty and missing values compare equal, as Kubernetes' semantic
equality has them, so a template that spells "no labels" as ``{}`` does not rewrite every machine.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from mcm_tasks.api import Machine, MachineSet, MachineSpec, dump
from mcm_tasks.cache.models import SPEC_SCOPED
from mcm_tasks.controllers.common.template import CONFIGURATION_FIELDS, merge_diff, pruned
from mcm_tasks.controllers.machineset.replicas import is_active

log = logging.getLogger(__name__)

#: name of ``carried_of`` in the parsed-object cache: a function of the machine's spec alone, so
#: a new version of the machine with the same generation (its status written, a label) keeps it
#: (``cache.models.SPEC_SCOPED``)
CARRIED = SPEC_SCOPED + "machineset.carried"
#: prefix of the name of a machine's ``propagation_patch`` for one ``Desired`` in the parsed-object cache
PATCH = "machineset.patch:"


def _node_template(spec: MachineSpec) -> dict[str, Any] | None:
    return None if spec.node_template is None else dump(spec.node_template)


@dataclass(frozen=True)
class Desired:
    """What the set's template says its machines should carry, computed once per reconcile."""

    node_template: dict[str, Any] | None
    node_template_pruned: Any
    #: (attribute, wire name, value, pruned value) per configuration field
    configuration: tuple[tuple[str, str, Any, Any], ...]
    class_kind: str

    @property
    def identity(self) -> str:
        """Equal for equal templates (what a machine's cached ``propagation_patch`` is keyed by)."""
        return repr((self.node_template, tuple(c[2] for c in self.configuration), self.class_kind))


def desired_of(machine_set: MachineSet) -> Desired:
    template = machine_set.spec.template.spec
    node_template = _node_template(template)
    configuration = tuple(
        (attribute, wire, getattr(template, attribute), pruned(getattr(template, attribute)))
        for attribute, wire in CONFIGURATION_FIELDS
    )
    return Desired(node_template, pruned(node_template or {}), configuration, template.class_.kind)


@dataclass(frozen=True)
class Carried:
    """What a machine carries now, in the form ``propagation_patch`` compares (costly to compute: it
    dumps the node template), so a machine shared through the parsed-object cache computes it once."""

    node_template: dict[str, Any] | None
    node_template_pruned: Any
    #: pruned value per configuration field, in ``CONFIGURATION_FIELDS`` order
    configuration: tuple[Any, ...]


def carried_of(machine: Machine) -> Carried:
    current = _node_template(machine.spec)
    configuration = tuple(pruned(getattr(machine.spec, attribute)) for attribute, _ in CONFIGURATION_FIELDS)
    return Carried(current, pruned(current or {}), configuration)


def propagation_patch(
    machine: Machine, desired: Desired, carried: Carried | None = None
) -> dict[str, Any] | None:
    """What to change on one claimed machine so that it carries the set's node template, machine
    configuration and class kind; None when nothing needs to change. ``carried``: the machine's
    ``carried_of``, when the caller has it already.

    Upstream: ``syncMachinesNodeTemplates``, ``syncMachinesConfig``, ``syncMachinesClassKind``.
    """
    spec: dict[str, Any] = {}
    if is_active(machine):
        now = carried if carried is not None else carried_of(machine)
        if now.node_template_pruned != desired.node_template_pruned:
            want, current = desired.node_template, now.node_template
            spec["nodeTemplate"] = merge_diff(current, want) if current and want else want
        for (_, wire, value, value_pruned), current_pruned in zip(
            desired.configuration, now.configuration, strict=True
        ):
            if current_pruned != value_pruned:
                spec[wire] = value
    if desired.class_kind != machine.spec.class_.kind:
        spec["class"] = {"kind": desired.class_kind or None}
    return {"spec": spec} if spec else None
