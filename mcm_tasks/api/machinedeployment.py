"""MachineDeployment: rolls machines from one template to the next through MachineSets."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import ConfigDict, Field

from mcm_tasks.api.base import (
    AGE_COLUMN,
    PRESERVE_UNKNOWN_FIELDS,
    Int32,
    Int64,
    IntOrString,
    K8sModel,
    OpenEnum,
    PrinterColumn,
    ResourceInfo,
    Time,
)
from mcm_tasks.api.enums import (
    MachineDeploymentConditionType,
    MachineDeploymentStrategyType,
    OrchestrationType,
)
from mcm_tasks.api.machine import MachineSummary, MachineTemplateSpec
from mcm_tasks.api.meta import Condition, K8sList, K8sObject, LabelSelector


class RollingUpdateMachineDeployment(K8sModel):
    """Absolute numbers or percentages of ``replicas``; maxSurge rounds up, maxUnavailable down."""

    max_surge: IntOrString | None = None
    max_unavailable: IntOrString | None = None


class InPlaceUpdateMachineDeployment(K8sModel):
    max_surge: IntOrString | None = None
    max_unavailable: IntOrString | None = None
    orchestration_type: Annotated[OrchestrationType | str, OpenEnum(OrchestrationType)] = ""


class MachineDeploymentStrategy(K8sModel):
    type: Annotated[MachineDeploymentStrategyType | str, OpenEnum(MachineDeploymentStrategyType)] = ""
    rolling_update: RollingUpdateMachineDeployment | None = None
    in_place_update: InPlaceUpdateMachineDeployment | None = None


class RollbackConfig(K8sModel):
    #: 0 means the previous revision
    revision: Int64 = 0


class MachineDeploymentSpec(K8sModel):
    model_config = ConfigDict(json_schema_extra={"required": ["template"]})

    replicas: Int32 = 0
    selector: LabelSelector | None = None
    template: MachineTemplateSpec = Field(default_factory=MachineTemplateSpec)
    strategy: MachineDeploymentStrategy = Field(default_factory=MachineDeploymentStrategy)
    min_ready_seconds: Int32 = 0
    #: None = old MachineSets are never cleaned up
    revision_history_limit: Int32 | None = None
    paused: bool = False
    rollback_to: RollbackConfig | None = None
    progress_deadline_seconds: Int32 | None = None
    auto_preserve_failed_machine_max: Int32 | None = None


class MachineDeploymentCondition(Condition):
    type: Annotated[MachineDeploymentConditionType | str, OpenEnum(MachineDeploymentConditionType)]
    last_update_time: Time | None = None


class MachineDeploymentStatus(K8sModel):
    model_config = ConfigDict(json_schema_extra={PRESERVE_UNKNOWN_FIELDS: True})

    observed_generation: Int64 = 0
    replicas: Int32 = 0
    updated_replicas: Int32 = 0
    ready_replicas: Int32 = 0
    available_replicas: Int32 = 0
    unavailable_replicas: Int32 = 0
    preserved_failed_replicas: Int32 = 0
    conditions: list[MachineDeploymentCondition] = Field(default_factory=list)
    collision_count: Int32 | None = None
    failed_machines: list[MachineSummary] = Field(default_factory=list)


class MachineDeployment(K8sObject):
    RESOURCE: ClassVar[ResourceInfo] = ResourceInfo(
        plural="machinedeployments",
        singular="machinedeployment",
        short_names=("mcd",),
        list_kind="MachineDeploymentList",
        scale=True,
        printer_columns=(
            PrinterColumn("Ready", "integer", ".status.readyReplicas", "Number of ready machines."),
            PrinterColumn("Desired", "integer", ".spec.replicas", "Number of desired machines."),
            PrinterColumn(
                "Up-to-date", "integer", ".status.updatedReplicas", "Machines that have the desired template."
            ),
            PrinterColumn(
                "Available", "integer", ".status.availableReplicas", "Number of available machines."
            ),
            AGE_COLUMN,
        ),
    )

    kind: str = "MachineDeployment"
    spec: MachineDeploymentSpec = Field(default_factory=MachineDeploymentSpec)
    status: MachineDeploymentStatus = Field(default_factory=MachineDeploymentStatus)


class MachineDeploymentList(K8sList):
    kind: str = "MachineDeploymentList"
    items: list[MachineDeployment] = Field(default_factory=list)
