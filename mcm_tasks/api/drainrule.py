"""``MachineDrainRule`` (``mcm-tasks.io/v1alpha1``): mcm-tasks's own kind, Cluster API's MachineDrainRule
field by field, so that rules for how a machine's pods are drained live beside the machine objects
without changing MCM's CRDs.

A rule says how the pods it selects are drained (``spec.drain.behavior``: ``Drain``, ``Skip``,
``WaitCompleted``) and, for ``Drain``, in which order group (``spec.drain.order``, lower first,
default 0); it applies to the machines ``spec.machines[]`` selects (empty: all) and to the pods
``spec.pods[]`` selects in the target cluster (``selector`` and ``namespaceSelector``; empty: all).
The schema is kept loose where a person can get it wrong (the behavior is a string, the order an
integer of any size, selectors' operators strings): such a rule is stored, then answered with a
``Valid=False`` condition and a Warning Event, and ignored (``controllers.machine.drain.rules``).
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar, Final

from pydantic import Field

from mcm_tasks.api.base import AGE_COLUMN, K8sModel, PrinterColumn, ResourceInfo
from mcm_tasks.api.meta import Condition, K8sList, K8sObject, LabelSelector

OWN_GROUP: Final = "mcm-tasks.io"
OWN_VERSION: Final = "v1alpha1"
OWN_API_VERSION: Final = f"{OWN_GROUP}/{OWN_VERSION}"


class DrainBehavior(StrEnum):
    DRAIN = "Drain"
    SKIP = "Skip"
    WAIT_COMPLETED = "WaitCompleted"


class MachineDrainRuleDrainConfig(K8sModel):
    #: one of ``DrainBehavior``; anything else makes the rule invalid
    behavior: str = ""
    #: the order group of ``Drain`` pods (lower first); only with ``Drain``
    order: int | None = None


class MachineDrainRuleMachineSelector(K8sModel):
    #: Machine labels; absent or empty: every machine
    selector: LabelSelector | None = None


class MachineDrainRulePodSelector(K8sModel):
    #: Pod labels; absent or empty: every pod
    selector: LabelSelector | None = None
    #: labels of the pod's Namespace in the target cluster; absent or empty: every namespace
    namespace_selector: LabelSelector | None = None


class MachineDrainRuleSpec(K8sModel):
    drain: MachineDrainRuleDrainConfig = Field(default_factory=MachineDrainRuleDrainConfig)
    #: OR'ed; empty: the rule applies to every machine
    machines: list[MachineDrainRuleMachineSelector] = Field(default_factory=list)
    #: OR'ed; empty: the rule applies to every pod
    pods: list[MachineDrainRulePodSelector] = Field(default_factory=list)


class RuleCondition(Condition):
    observed_generation: int | None = None


class MachineDrainRuleStatus(K8sModel):
    conditions: list[RuleCondition] = Field(default_factory=list)


class MachineDrainRule(K8sObject):
    RESOURCE: ClassVar[ResourceInfo] = ResourceInfo(
        plural="machinedrainrules",
        singular="machinedrainrule",
        short_names=("mdr",),
        list_kind="MachineDrainRuleList",
        printer_columns=(
            PrinterColumn("Behavior", "string", ".spec.drain.behavior", "How the selected pods are drained."),
            PrinterColumn("Order", "integer", ".spec.drain.order", "Order group of the pods (lower first)."),
            PrinterColumn(
                "Valid",
                "string",
                '.status.conditions[?(@.type=="Valid")].status',
                "Whether the rule is used.",
            ),
            AGE_COLUMN,
        ),
        group=OWN_GROUP,
    )

    api_version: str = Field(OWN_API_VERSION, alias="apiVersion")
    kind: str = "MachineDrainRule"
    spec: MachineDrainRuleSpec = Field(default_factory=MachineDrainRuleSpec)
    status: MachineDrainRuleStatus = Field(default_factory=MachineDrainRuleStatus)


class MachineDrainRuleList(K8sList):
    api_version: str = Field(OWN_API_VERSION, alias="apiVersion")
    kind: str = "MachineDrainRuleList"
    items: list[MachineDrainRule] = Field(default_factory=list)
