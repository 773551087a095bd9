"""One generic way in and out of the wire format, for every kind and list kind of the API group."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcm_tasks.api.drainrule import MachineDrainRule
from mcm_tasks.api.machine import Machine, MachineList
from mcm_tasks.api.machineclass import MachineClass, MachineClassList
from mcm_tasks.api.machinedeployment import MachineDeployment, MachineDeploymentList
from mcm_tasks.api.machineset import MachineSet, MachineSetList
from mcm_tasks.api.meta import K8sList, K8sObject

#: the four kinds, in the order controllers depend on each other (class → machine → set → deployment)
OBJECT_KINDS: tuple[type[K8sObject], ...] = (MachineClass, Machine, MachineSet, MachineDeployment)
LIST_KINDS: tuple[type[K8sList], ...] = (MachineClassList, MachineList, MachineSetList, MachineDeploymentList)
#: mcm-tasks's own kinds (``mcm-tasks.io``): CRDs of their own, beside MCM's unchanged ones
OWN_KINDS: tuple[type[K8sObject], ...] = (MachineDrainRule,)

_BY_KIND: dict[str, type[K8sObject] | type[K8sList]] = {
    **{cls.model_fields["kind"].default: cls for cls in OBJECT_KINDS},
    **{cls.model_fields["kind"].default: cls for cls in LIST_KINDS},
}
_BY_PLURAL: dict[str, type[K8sObject]] = {cls.RESOURCE.plural: cls for cls in OBJECT_KINDS}


def model_for(kind: str) -> type[K8sObject] | type[K8sList]:
    """The model of a kind (``Machine``) or list kind (``MachineList``); KeyError names the kind."""
    try:
        return _BY_KIND[kind]
    except KeyError:
        raise KeyError(f"no model for kind {kind!r} (known: {', '.join(sorted(_BY_KIND))})") from None


def model_for_plural(plural: str) -> type[K8sObject]:
    """The model behind a REST resource name (``machines``)."""
    try:
        return _BY_PLURAL[plural]
    except KeyError:
        raise KeyError(f"no model for resource {plural!r} (known: {', '.join(sorted(_BY_PLURAL))})") from None


def parse(data: Mapping[str, Any]) -> K8sObject | K8sList:
    """The model of any object or list of the group, chosen by its ``kind``."""
    return model_for(str(data.get("kind", ""))).model_validate(data)
