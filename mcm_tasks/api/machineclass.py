"""MachineClass: the provider-specific recipe (``providerSpec``) and the secrets a machine is made with.

Its fields sit at the top level; there is no ``spec`` and no ``status``.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import ConfigDict, Field, WithJsonSchema

from mcm_tasks.api.base import PRESERVE_UNKNOWN_FIELDS, K8sModel, Quantity, ResourceInfo
from mcm_tasks.api.meta import K8sList, K8sObject


class SecretReference(K8sModel):
    name: str = ""
    namespace: str = ""


class NodeTemplate(K8sModel):
    """What a node of this class will offer, so that the autoscaler can scale a group from zero."""

    model_config = ConfigDict(
        json_schema_extra={
            PRESERVE_UNKNOWN_FIELDS: True,
            "required": ["capacity", "instanceType", "region", "zone"],
        }
    )

    capacity: dict[str, Quantity] = Field(default_factory=dict)
    virtual_capacity: dict[str, Quantity] = Field(default_factory=dict)
    instance_type: str = ""
    region: str = ""
    zone: str = ""
    architecture: str | None = None


#: a ``runtime.RawExtension``: the provider's own document, every field of it kept
ProviderSpec = Annotated[dict[str, Any], WithJsonSchema({"type": "object", PRESERVE_UNKNOWN_FIELDS: True})]


class MachineClass(K8sObject):
    RESOURCE: ClassVar[ResourceInfo] = ResourceInfo(
        plural="machineclasses",
        singular="machineclass",
        short_names=("mcc",),
        list_kind="MachineClassList",
        status=False,
    )

    kind: str = "MachineClass"
    provider_spec: ProviderSpec
    #: selects the Driver (``AWS``, ``local``, …)
    provider: str = ""
    secret_ref: SecretReference | None = None
    #: merged over ``secretRef``'s data; wins on conflicting keys
    credentials_secret_ref: SecretReference | None = None
    node_template: NodeTemplate | None = None


class MachineClassList(K8sList):
    kind: str = "MachineClassList"
    items: list[MachineClass] = Field(default_factory=list)
