"""The Driver contract between the machine controller and a cloud provider (upstream `driver.Driver`).

Requests and responses are pydantic models so that a driver never sees a raw dict and the
controller never parses strings. Machines and classes travel as the API models of
``mcm_tasks.api``; the secret travels as decoded ``bytes`` values (what MCM's driver gets after
merging ``secretRef`` and ``credentialsSecretRef`` data), and is never logged or put in a task
argument.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from mcm_tasks.api import Machine, MachineClass


class _Msg(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=False)


class Secret(_Msg):
    """Merged secret data; repr hides the values so it can't leak through logs."""

    data: dict[str, bytes] = Field(default_factory=dict, repr=False)

    def get_str(self, key: str, default: str = "") -> str:
        raw = self.data.get(key)
        return raw.decode() if raw is not None else default

    def __repr__(self) -> str:
        return f"Secret(keys={sorted(self.data)})"

    __str__ = __repr__


class NodeAddress(_Msg):
    type: str
    address: str


class CreateMachineRequest(_Msg):
    machine: Machine
    machine_class: MachineClass
    secret: Secret


class CreateMachineResponse(_Msg):
    provider_id: str
    node_name: str = ""
    last_known_state: str = ""
    addresses: list[NodeAddress] = Field(default_factory=list)


class InitializeMachineRequest(CreateMachineRequest):
    pass


class InitializeMachineResponse(_Msg):
    provider_id: str = ""
    node_name: str = ""
    addresses: list[NodeAddress] = Field(default_factory=list)


class DeleteMachineRequest(CreateMachineRequest):
    pass


class DeleteMachineResponse(_Msg):
    last_known_state: str = ""


class GetMachineStatusRequest(CreateMachineRequest):
    pass


class GetMachineStatusResponse(_Msg):
    provider_id: str = ""
    node_name: str = ""
    addresses: list[NodeAddress] = Field(default_factory=list)


class ListMachinesRequest(_Msg):
    machine_class: MachineClass
    secret: Secret


class ListMachinesResponse(_Msg):
    #: providerID -> machine name
    machine_list: dict[str, str] = Field(default_factory=dict)


class GetVolumeIDsRequest(_Msg):
    #: PersistentVolume ``spec`` dicts, as the API server returns them (camelCase keys)
    pv_specs: list[dict[str, Any]] = Field(default_factory=list)


class GetVolumeIDsResponse(_Msg):
    volume_ids: list[str] = Field(default_factory=list)


@runtime_checkable
class Driver(Protocol):
    """What every provider implements. Failures raise ``providers.errors.MachineError``."""

    def create_machine(self, req: CreateMachineRequest) -> CreateMachineResponse: ...

    def initialize_machine(self, req: InitializeMachineRequest) -> InitializeMachineResponse: ...

    def delete_machine(self, req: DeleteMachineRequest) -> DeleteMachineResponse: ...

    def get_machine_status(self, req: GetMachineStatusRequest) -> GetMachineStatusResponse: ...

    def list_machines(self, req: ListMachinesRequest) -> ListMachinesResponse: ...

    def get_volume_ids(self, req: GetVolumeIDsRequest) -> GetVolumeIDsResponse: ...
