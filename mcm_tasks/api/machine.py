"""Machine: one VM backing one Node; and the pieces MachineSets and MachineDeployments reuse
(templates, node templates, the per-machine configuration, failed-machine summaries)."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import ConfigDict, Field

from mcm_tasks.api.base import (
    AGE_COLUMN,
    PRESERVE_UNKNOWN_FIELDS,
    Duration,
    Int32,
    K8sModel,
    OpenEnum,
    PrinterColumn,
    ResourceInfo,
    Time,
)
from mcm_tasks.api.enums import MachineOperationType, MachinePhase, MachineState, TaintEffect
from mcm_tasks.api.meta import Condition, K8sList, K8sObject, ObjectMeta
from mcm_tasks.durations import parse_duration


class ClassSpec(K8sModel):
    """Which MachineClass a machine is made from (kind and name are required by validation)."""

    api_group: str = ""
    kind: str = ""
    name: str = ""


class Taint(K8sModel):
    key: str
    value: str = ""
    effect: Annotated[TaintEffect | str, OpenEnum(TaintEffect)]
    time_added: Time | None = None


class NodeSpec(K8sModel):
    """The part of ``corev1.NodeSpec`` MCM syncs (taints); the rest is carried along untouched."""

    model_config = ConfigDict(json_schema_extra={PRESERVE_UNKNOWN_FIELDS: True})

    pod_cidr: str | None = Field(None, alias="podCIDR")
    pod_cidrs: list[str] = Field(default_factory=list, alias="podCIDRs")
    provider_id: str | None = Field(None, alias="providerID")
    unschedulable: bool | None = None
    taints: list[Taint] = Field(default_factory=list)


class NodeTemplateSpec(K8sModel):
    """Labels, annotations and taints the machine controller keeps on the machine's Node."""

    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: NodeSpec = Field(default_factory=NodeSpec)


def _seconds(value: Duration | None) -> float | None:
    return None if value is None else parse_duration(value)


class MachineConfiguration(K8sModel):
    """Per-machine overrides of the machine controller's flags, inlined into ``MachineSpec``.

    Durations stay Go strings on the wire; the ``*_seconds`` properties read them (ValueError if bad).
    """

    drain_timeout: Duration | None = None
    health_timeout: Duration | None = None
    creation_timeout: Duration | None = None
    inplace_update_timeout: Duration | None = Field(None, alias="inPlaceUpdateTimeout")
    machine_preserve_timeout: Duration | None = None
    disable_health_timeout: bool | None = None
    max_evict_retries: Int32 | None = None
    #: comma-separated node condition types
    node_conditions: str | None = None

    DURATION_FIELDS: ClassVar[tuple[str, ...]] = (
        "drain_timeout",
        "health_timeout",
        "creation_timeout",
        "inplace_update_timeout",
        "machine_preserve_timeout",
    )

    @property
    def drain_timeout_seconds(self) -> float | None:
        return _seconds(self.drain_timeout)

    @property
    def health_timeout_seconds(self) -> float | None:
        return _seconds(self.health_timeout)

    @property
    def creation_timeout_seconds(self) -> float | None:
        return _seconds(self.creation_timeout)

    @property
    def inplace_update_timeout_seconds(self) -> float | None:
        return _seconds(self.inplace_update_timeout)

    @property
    def machine_preserve_timeout_seconds(self) -> float | None:
        return _seconds(self.machine_preserve_timeout)

    def configuration(self) -> MachineConfiguration:
        """Only the configuration fields (what a MachineSet syncs onto its machines)."""
        names = MachineConfiguration.model_fields
        return MachineConfiguration.model_validate(
            {n: getattr(self, n) for n in names if n in self.model_fields_set}
        )


class MachineSpec(MachineConfiguration):
    class_: ClassSpec = Field(default_factory=ClassSpec, alias="class")
    provider_id: str = Field("", alias="providerID")
    node_template: NodeTemplateSpec | None = None


class NodeAddress(K8sModel):
    type: str
    address: str


class NodeCondition(Condition):
    """A Node condition as copied into ``Machine.status.conditions``."""

    last_heartbeat_time: Time | None = None


class LastOperation(K8sModel):
    description: str = ""
    error_code: str = ""
    last_update_time: Time | None = None
    state: Annotated[MachineState | str, OpenEnum(MachineState)] = ""
    type: Annotated[MachineOperationType | str, OpenEnum(MachineOperationType)] = ""


class CurrentStatus(K8sModel):
    phase: Annotated[MachinePhase | str, OpenEnum(MachinePhase)] = ""
    timeout_active: bool = False
    last_update_time: Time | None = None
    preserve_expiry_time: Time | None = None


class MachineStatus(K8sModel):
    model_config = ConfigDict(json_schema_extra={PRESERVE_UNKNOWN_FIELDS: True})

    #: only in no-target mode, where there is no Node to carry them
    addresses: list[NodeAddress] = Field(default_factory=list)
    conditions: list[NodeCondition] = Field(default_factory=list)
    last_operation: LastOperation = Field(default_factory=LastOperation)
    current_status: CurrentStatus = Field(default_factory=CurrentStatus)
    #: opaque to MCM; drivers keep their own state here
    last_known_state: str = ""


class Machine(K8sObject):
    RESOURCE: ClassVar[ResourceInfo] = ResourceInfo(
        plural="machines",
        singular="machine",
        short_names=("mc",),
        list_kind="MachineList",
        printer_columns=(
            PrinterColumn(
                "Status", "string", ".status.currentStatus.phase", "Current status of the machine."
            ),
            AGE_COLUMN,
            PrinterColumn("Node", "string", ".metadata.labels.node", "Node backing the machine object."),
            PrinterColumn(
                "ProviderID", "string", ".spec.providerID", "Provider ID of the VM backing the machine.", 1
            ),
        ),
    )

    kind: str = "Machine"
    spec: MachineSpec = Field(default_factory=MachineSpec)
    status: MachineStatus = Field(default_factory=MachineStatus)


class MachineList(K8sList):
    kind: str = "MachineList"
    items: list[Machine] = Field(default_factory=list)


class MachineTemplateSpec(K8sModel):
    """What a MachineSet stamps its machines from."""

    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: MachineSpec = Field(default_factory=MachineSpec)


class MachineSummary(K8sModel):
    """A failed machine as MachineSets and MachineDeployments list it in ``status.failedMachines``."""

    name: str = ""
    provider_id: str = Field("", alias="providerID")
    last_operation: LastOperation = Field(default_factory=LastOperation)
    owner_ref: str = ""
