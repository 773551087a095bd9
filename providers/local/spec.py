"""The local provider's providerSpec and what a VM inherits from its MachineClass.

Everything here is pure: the driver decodes and validates before it touches Redis, so a bad
MachineClass fails the same way whether or not the cloud is reachable. Validation collects every
problem into one InvalidArgument message, because an operator fixing a class wants the whole list,
not one error per reconcile.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

from providers.driver import Secret
from providers.errors import Code, MachineError

PROVIDER_NAME = "local"
DEFAULT_ZONE = "local-a"
DEFAULT_REGION = "local"
DEFAULT_INSTANCE_TYPE = "local.small"
DEFAULT_ARCH = "amd64"
#: what a VM reports when its class has no nodeTemplate capacity
DEFAULT_CAPACITY = {"cpu": "2", "memory": "4Gi", "pods": "110"}
#: the local CSI driver whose volumes GetVolumeIDs reports
CSI_DRIVER = "local.csi.mcm-tasks.io"


def _code_by_name_or_number(value: Any) -> Any:
    """Accept ``"ResourceExhausted"`` or ``8``; anything else is left for pydantic to reject."""
    if isinstance(value, str):
        try:
            return Code[value]
        except KeyError:
            raise ValueError(f"unknown machine error code {value!r}") from None
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return Code(value)
        except ValueError:
            raise ValueError(f"unknown machine error code {value}") from None
    return value


class FailCreates(BaseModel):
    """Make the next ``count`` creates of this class fail with ``code`` (cloud fault injection)."""

    model_config = ConfigDict(strict=True, extra="forbid")

    count: int = Field(ge=0)
    code: Annotated[Code, BeforeValidator(_code_by_name_or_number)] = Code.ResourceExhausted

    @field_validator("code")
    @classmethod
    def _not_ok(cls, code: Code) -> Code:
        if code is Code.OK:
            raise ValueError("OK is not a failure code")
        return code


class FailInitializes(FailCreates):
    """The class's VMs need InitializeMachine, and its next ``count`` calls fail with ``code``. Such a
    VM is uninitialized from launch until an InitializeMachine succeeds: GetMachineStatus reports it
    Uninitialized and its kubelet does not register the Node. Whether a VM needs it is decided at
    launch (removing the field later does not initialize a VM that still waits)."""

    code: Annotated[Code, BeforeValidator(_code_by_name_or_number)] = Code.Uninitialized


class LocalProviderSpec(BaseModel):
    """``MachineClass.providerSpec`` for ``provider: local`` (camelCase on the wire)."""

    model_config = ConfigDict(strict=True, extra="forbid", populate_by_name=True)

    api_version: str = Field("", alias="apiVersion")
    kind: str = ""
    zone: str = ""
    region: str = ""
    machine_type: str = Field("", alias="machineType")
    architecture: str = ""
    #: CreateMachine answers this long after it is called, as a cloud's create call takes seconds
    #: (a worker slot is held meanwhile: what a test needs to catch a creation mid-flight)
    create_delay_seconds: float = Field(0.0, alias="createDelaySeconds", ge=0, le=60)
    #: the VM becomes running (and its kubelet registers the Node) this long after creation
    boot_delay_seconds: float = Field(0.0, alias="bootDelaySeconds", ge=0)
    #: a deleted VM stays "terminating" this long before it disappears
    delete_delay_seconds: float = Field(0.0, alias="deleteDelaySeconds", ge=0)
    #: the VM runs but its Node never registers
    never_join: bool = Field(False, alias="neverJoin")
    fail_creates: FailCreates | None = Field(None, alias="failCreates")
    fail_initializes: FailInitializes | None = Field(None, alias="failInitializes")
    #: every VM of the class gets this Node name instead of its machine's (stale-node scenarios)
    node_name: str = Field("", alias="nodeName")
    #: extra labels the simulated kubelet puts on the Node
    labels: dict[str, str] = Field(default_factory=dict)


class Placement(BaseModel):
    """Where and what a VM is, resolved from providerSpec first, then the class nodeTemplate."""

    zone: str
    region: str
    instance_type: str
    architecture: str
    capacity: dict[str, str]


def decode_provider_spec(raw: Any) -> dict[str, Any]:
    """The providerSpec as a dict; bytes/str are JSON (a RawExtension). Undecodable → Internal."""
    if raw is None:
        return {}
    if isinstance(raw, BaseModel):
        raw = raw.model_dump(by_alias=True)
    if isinstance(raw, bytes | bytearray | str):
        try:
            raw = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as err:
            raise MachineError(Code.Internal, f"cannot decode providerSpec: {err}") from None
    if not isinstance(raw, dict):
        kind = type(raw).__name__
        raise MachineError(Code.Internal, f"cannot decode providerSpec: expected an object, got {kind}")
    return raw


def _format_errors(err: ValidationError) -> list[str]:
    out = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        out.append(f"providerSpec.{loc}: {msg}" if loc else f"providerSpec: {msg}")
    return out


def spec_problems(raw: dict[str, Any]) -> tuple[LocalProviderSpec | None, list[str]]:
    try:
        return LocalProviderSpec.model_validate(raw), []
    except ValidationError as err:
        return None, _format_errors(err)


def secret_problems(secret: Secret) -> list[str]:
    return [] if secret.data.get("userData") else ["secret: userData is required"]


def provider_problems(machine_class: Any) -> list[str]:
    provider = getattr(machine_class, "provider", PROVIDER_NAME) or ""
    if provider != PROVIDER_NAME:
        return [f"machineClass.provider: must be {PROVIDER_NAME!r}, got {provider!r}"]
    return []


def parse_class(machine_class: Any, secret: Secret | None = None) -> LocalProviderSpec:
    """Decode and validate a class (and the secret when given), raising one InvalidArgument that
    lists every problem."""
    raw = decode_provider_spec(getattr(machine_class, "provider_spec", None))
    spec, problems = spec_problems(raw)
    problems = provider_problems(machine_class) + problems
    if secret is not None:
        problems += secret_problems(secret)
    if problems or spec is None:
        raise MachineError(Code.InvalidArgument, "; ".join(problems))
    return spec


def class_key(machine_class: Any) -> str:
    """``<namespace>/<name>`` of a class: the cloud indexes VMs (and fault budgets) by it."""
    meta = getattr(machine_class, "metadata", None)
    name = getattr(meta, "name", "") or ""
    namespace = getattr(meta, "namespace", "") or ""
    return f"{namespace}/{name}" if namespace else name


def _quantity(value: Any) -> str:
    return str(value)


def placement(machine_class: Any, spec: LocalProviderSpec) -> Placement:
    template = getattr(machine_class, "node_template", None)

    def from_template(attr: str) -> str:
        return str(getattr(template, attr, "") or "") if template is not None else ""

    raw_capacity = getattr(template, "capacity", None) if template is not None else None
    capacity = dict(DEFAULT_CAPACITY)
    if raw_capacity:
        items = raw_capacity.items() if isinstance(raw_capacity, dict) else dict(raw_capacity).items()
        capacity.update({str(k): _quantity(v) for k, v in items})
    return Placement(
        zone=spec.zone or from_template("zone") or DEFAULT_ZONE,
        region=spec.region or from_template("region") or DEFAULT_REGION,
        instance_type=spec.machine_type or from_template("instance_type") or DEFAULT_INSTANCE_TYPE,
        architecture=spec.architecture or from_template("architecture") or DEFAULT_ARCH,
        capacity=capacity,
    )


def provider_id_for(zone: str, vm_id: str) -> str:
    return f"local:///{zone}/{vm_id}"


def vm_id_from_provider_id(provider_id: str) -> str | None:
    """The VM id of a ``local:///<zone>/<id>`` providerID; None for anything else."""
    if not provider_id.startswith("local:///"):
        return None
    vm_id = provider_id.rsplit("/", 1)[-1]
    return vm_id or None


def volume_ids(pv_specs: list[dict[str, Any]]) -> list[str]:
    """Volume handles of the local CSI driver's PVs; other volumes are not this cloud's."""
    out = []
    for pv in pv_specs:
        csi = pv.get("csi") or {}
        if csi.get("driver") == CSI_DRIVER and csi.get("volumeHandle"):
            out.append(str(csi["volumeHandle"]))
    return out
