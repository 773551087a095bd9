"""The common ground of every API model: wire conventions, lossless dumping, and the scalar types
Kubernetes uses (timestamps, int-or-string, int32, open enums).

Lossless means: ``dump(parse(x)) == x`` for any object the API server can hold. Three rules get us there:
unknown keys are kept (``extra="allow"``), absent fields stay absent (a field that was never set and still
holds its zero value is not written), and values keep their wire spelling (durations stay strings,
open enums keep unknown values).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    PlainSerializer,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    WithJsonSchema,
    model_serializer,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

#: marks a model (via ``json_schema_extra``) whose unknown fields the API server must keep
PRESERVE_UNKNOWN_FIELDS = "x-kubernetes-preserve-unknown-fields"


def _is_zero(value: Any) -> bool:
    return isinstance(value, dict | list | str | int | float) and not value


class K8sModel(BaseModel):
    """Base of every API model: camelCase on the wire, unknown keys kept, untouched zero values omitted.

    Omitting only *untouched* zero values keeps explicit ``replicas: 0`` or ``labels: {}`` from the input,
    while defaults that the code never filled (an empty ``status``) do not appear out of nowhere, and a
    default container that the code filled in place (``meta.labels["x"] = "y"``) is still written.
    """

    model_config = ConfigDict(
        populate_by_name=True, extra="allow", alias_generator=to_camel, validate_assignment=True
    )

    @model_serializer(mode="wrap")
    def _omit_untouched_zero_values(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        names, aliases = _field_keys(type(self))
        untouched = names - self.model_fields_set
        if untouched:
            wire = aliases if info.by_alias else None
            for name in untouched:
                key = wire[name] if wire is not None else name
                value = data.get(key, _ABSENT)
                if value is not _ABSENT and _is_zero(value):
                    del data[key]
        return data


_ABSENT = object()
_FIELD_KEYS: dict[type[BaseModel], tuple[frozenset[str], dict[str, str]]] = {}


def _field_keys(cls: type[BaseModel]) -> tuple[frozenset[str], dict[str, str]]:
    """The field names and each one's wire name, computed once per class: dumping is on the hot path
    (every status write dumps the status, a model per nested struct), and the fields never set
    are then one set difference instead of a test per field."""
    keys = _FIELD_KEYS.get(cls)
    if keys is None:
        fields = cls.model_fields
        keys = _FIELD_KEYS[cls] = (frozenset(fields), {n: f.alias or n for n, f in fields.items()})
    return keys


# --- scalar types ---


def _parse_time(value: Any) -> Any:
    """RFC 3339 (``fromisoformat`` reads the ``Z`` since Python 3.11); a naive time is UTC. Called for
    every timestamp of every object parsed (a Machine has a dozen), so it does nothing more."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


def format_time(value: datetime) -> str:
    """RFC 3339 in UTC with a ``Z``, as Kubernetes writes ``metav1.Time`` (microseconds only when set:
    ``isoformat``'s own rule; a third of ``strftime``'s cost, and every timestamp of a dump pays it)."""
    return value.astimezone(UTC).replace(tzinfo=None).isoformat() + "Z"


#: a ``metav1.Time``: an aware datetime in Python, RFC 3339 UTC on the wire
Time = Annotated[
    datetime,
    BeforeValidator(_parse_time),
    PlainSerializer(format_time, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]

#: ``intstr.IntOrString``: ``3`` or ``"25%"``, kept as written
IntOrString = Annotated[
    int | str,
    WithJsonSchema({"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}),
]

#: a ``resource.Quantity`` (``4``, ``"16Gi"``, ``"500m"``), kept as written
Quantity = Annotated[
    int | float | str,
    WithJsonSchema({"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}),
]

Int32 = Annotated[int, WithJsonSchema({"type": "integer", "format": "int32"})]
Int64 = Annotated[int, WithJsonSchema({"type": "integer", "format": "int64"})]

#: a Go ``metav1.Duration`` as written (``"10m"``, ``"1h30m0s"``); an unparsable value is reported by
#: validation rather than refused at read time, so that the cache can still mirror the object
Duration = str


@dataclass(frozen=True)
class OpenEnum:
    """Annotated marker: known values become the enum member, unknown strings are kept as they are.

    The API server accepts any string in these fields (the CRDs, like upstream's, say ``type: string``);
    refusing an unknown value on read would make the object unreadable to every controller.
    """

    enum: type[StrEnum]

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        known = {member.value: member for member in self.enum}
        return core_schema.no_info_after_validator_function(
            lambda v: known.get(v, v), core_schema.str_schema()
        )

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {"type": "string"}


# --- top-level objects ---


@dataclass(frozen=True)
class PrinterColumn:
    name: str
    type: str
    json_path: str
    description: str = ""
    priority: int = 0


@dataclass(frozen=True)
class ResourceInfo:
    """What the CRD (and the REST paths) say about a kind, declared next to its model."""

    plural: str
    singular: str
    short_names: tuple[str, ...]
    list_kind: str
    status: bool = True
    scale: bool = False
    printer_columns: tuple[PrinterColumn, ...] = ()
    #: the API group, when not MCM's (``machine.sapcloud.io``): mcm-tasks's own kinds
    group: str = ""


AGE_COLUMN = PrinterColumn("Age", "date", ".metadata.creationTimestamp", "Time since the object was created.")


def dump(obj: BaseModel) -> dict[str, Any]:
    """The wire form of any API model: camelCase keys, JSON values, no nulls, nothing invented."""
    return obj.model_dump(mode="json", by_alias=True, exclude_none=True)
