"""MachineSet: keeps ``replicas`` machines of one template alive, like a ReplicaSet does for pods."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import ConfigDict, Field

from mcm_tasks.api.base import (
    AGE_COLUMN,
    PRESERVE_UNKNOWN_FIELDS,
    Int32,
    Int64,
    K8sModel,
    OpenEnum,
    PrinterColumn,
    ResourceInfo,
)
from mcm_tasks.api.enums import MachineSetConditionType
from mcm_tasks.api.machine import ClassSpec, LastOperation, MachineSummary, MachineTemplateSpec
from mcm_tasks.api.meta import Condition, K8sList, K8sObject, LabelSelector


class MachineSetSpec(K8sModel):
    replicas: Int32 = 0
    selector: LabelSelector | None = None
    #: legacy; read only for metrics
    machine_class: ClassSpec = Field(default_factory=ClassSpec)
    template: MachineTemplateSpec = Field(default_factory=MachineTemplateSpec)
    min_ready_seconds: Int32 = 0
    auto_preserve_failed_machine_max: Int32 | None = None


class MachineSetCondition(Condition):
    type: Annotated[MachineSetConditionType | str, OpenEnum(MachineSetConditionType)]


class MachineSetStatus(K8sModel):
    model_config = ConfigDict(json_schema_extra={PRESERVE_UNKNOWN_FIELDS: True})

    replicas: Int32 = 0
    fully_labeled_replicas: Int32 = 0
    ready_replicas: Int32 = 0
    available_replicas: Int32 = 0
    preserved_failed_replicas: Int32 = 0
    auto_preserve_failed_machine_count: Int32 | None = None
    observed_generation: Int64 = 0
    #: upstream's JSON key for the conditions is ``machineSetCondition``
    conditions: list[MachineSetCondition] = Field(default_factory=list, alias="machineSetCondition")
    last_operation: LastOperation = Field(default_factory=LastOperation)
    failed_machines: list[MachineSummary] = Field(default_factory=list)


class MachineSet(K8sObject):
    RESOURCE: ClassVar[ResourceInfo] = ResourceInfo(
        plural="machinesets",
        singular="machineset",
        short_names=("mcs",),
        list_kind="MachineSetList",
        scale=True,
        printer_columns=(
            PrinterColumn("Desired", "integer", ".spec.replicas", "Number of desired replicas."),
            PrinterColumn("Current", "integer", ".status.replicas", "Number of actual replicas."),
            PrinterColumn("Ready", "integer", ".status.readyReplicas", "Number of ready replicas."),
            AGE_COLUMN,
        ),
    )

    kind: str = "MachineSet"
    spec: MachineSetSpec = Field(default_factory=MachineSetSpec)
    status: MachineSetStatus = Field(default_factory=MachineSetStatus)


class MachineSetList(K8sList):
    kind: str = "MachineSetList"
    items: list[MachineSet] = Field(default_factory=list)
