"""Kubernetes' shared pieces (ObjectMeta, owner references, label selectors, conditions), the base of
top-level objects and lists, and the small pure helpers every controller needs on them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, ClassVar, Self, TypeVar

from pydantic import ConfigDict, Field

from mcm_tasks.api.base import PRESERVE_UNKNOWN_FIELDS, K8sModel, ResourceInfo, Time, dump
from mcm_tasks.api.constants import API_VERSION
from mcm_tasks.api.enums import ConditionStatus


class OwnerReference(K8sModel):
    api_version: str = Field(alias="apiVersion")
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(K8sModel):
    """``metav1.ObjectMeta``; fields we do not model (managedFields, selfLink, …) are kept as extras."""

    # embedded copies (templates) keep whatever they carry; the top-level one is handled by the server
    model_config = ConfigDict(json_schema_extra={PRESERVE_UNKNOWN_FIELDS: True})

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    finalizers: list[str] = Field(default_factory=list)
    owner_references: list[OwnerReference] = Field(default_factory=list)
    creation_timestamp: Time | None = None
    deletion_timestamp: Time | None = None
    deletion_grace_period_seconds: int | None = None

    @property
    def is_deleting(self) -> bool:
        return self.deletion_timestamp is not None

    def has_finalizer(self, finalizer: str) -> bool:
        return finalizer in self.finalizers

    def add_finalizer(self, finalizer: str) -> bool:
        """Adds it once; says whether anything changed (so the caller knows whether to write)."""
        if finalizer in self.finalizers:
            return False
        self.finalizers = [*self.finalizers, finalizer]
        return True

    def remove_finalizer(self, finalizer: str) -> bool:
        if finalizer not in self.finalizers:
            return False
        self.finalizers = [f for f in self.finalizers if f != finalizer]
        return True

    def controller_ref(self) -> OwnerReference | None:
        """The owner reference with ``controller: true`` (at most one by Kubernetes' rules)."""
        for ref in self.owner_references:  # a loop, not next(genexpr): it runs per machine per pass
            if ref.controller:
                return ref
        return None


class ListMeta(K8sModel):
    resource_version: str | None = None
    continue_: str | None = Field(None, alias="continue")
    remaining_item_count: int | None = None


class LabelSelectorRequirement(K8sModel):
    key: str
    operator: str
    values: list[str] = Field(default_factory=list)

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "In":
            return self.key in labels and labels[self.key] in self.values
        if self.operator == "NotIn":
            return self.key not in labels or labels[self.key] not in self.values
        if self.operator == "Exists":
            return self.key in labels
        if self.operator == "DoesNotExist":
            return self.key not in labels
        raise ValueError(f"unknown label selector operator {self.operator!r}")


class LabelSelector(K8sModel):
    match_labels: dict[str, str] = Field(default_factory=dict)
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list)

    @property
    def is_empty(self) -> bool:
        return not self.match_labels and not self.match_expressions

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Kubernetes semantics: an empty selector selects everything (a missing one selects nothing,
        which is the caller's ``None`` check)."""
        if not self.match_labels.items() <= labels.items():  # one C-level subset test per object
            return False
        return all(req.matches(labels) for req in self.match_expressions)


# --- conditions ---


class Condition(K8sModel):
    """The fields every condition kind shares; each kind adds its own timestamps."""

    type: str
    status: str
    last_transition_time: Time | None = None
    reason: str = ""
    message: str = ""


C = TypeVar("C", bound=Condition)

#: an object as the API server sends it, JSON-decoded: the kinds without a model (Nodes, Pods,
#: Secrets' metadata) and the raw form of those with one, as the mirror stores them
Obj = dict[str, Any]
#: the same, read only: what a decision over an API object takes (an ``Obj`` is one)
ObjView = Mapping[str, Any]


def get_condition(conditions: Sequence[C], type_: str) -> C | None:
    return next((c for c in conditions if c.type == type_), None)


def set_condition(conditions: Sequence[C], new: C) -> list[C]:
    """The conditions with ``new`` in place of its type, as MCM sets them: an unchanged status and
    reason leaves the list alone (no spurious writes), an unchanged status keeps its transition time."""
    current = get_condition(conditions, new.type)
    if current is not None and current.status == new.status and current.reason == new.reason:
        return list(conditions)
    if current is not None and current.status == new.status:
        new = new.model_copy(update={"last_transition_time": current.last_transition_time})
    return [c for c in conditions if c.type != new.type] + [new]


def remove_condition(conditions: Sequence[C], type_: str) -> list[C]:
    return [c for c in conditions if c.type != type_]


def condition_is_true(conditions: Sequence[Condition], type_: str) -> bool:
    found = get_condition(conditions, type_)
    return found is not None and found.status == ConditionStatus.TRUE


# --- top-level objects and lists ---


class K8sObject(K8sModel):
    """A top-level object of ``machine.sapcloud.io/v1alpha1``; subclasses set ``kind`` and ``RESOURCE``."""

    RESOURCE: ClassVar[ResourceInfo]

    api_version: str = Field(API_VERSION, alias="apiVersion")
    kind: str
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)

    @classmethod
    def from_api(cls, data: Mapping[str, Any]) -> Self:
        return cls.model_validate(data)

    def to_api(self) -> dict[str, Any]:
        return dump(self)

    def status_body(self, status: K8sModel | None = None) -> dict[str, Any]:
        """The body of a write to the status subresource: who the object is, the version read (the
        write is conditional on it), and ``status`` (by default the object's own).

        On such a write the API server keeps everything but ``status`` from the stored object (the
        CRD status strategy copies the old object and sets the new status), so the rest is not
        sent: dumping a whole machine (metadata with its managedFields, spec) cost about four
        times dumping its status, on every status write, and the server parsed it for nothing.
        """
        meta = self.metadata
        identity = {"name": meta.name, "namespace": meta.namespace, "uid": meta.uid,
                    "resourceVersion": meta.resource_version}  # fmt: skip
        if status is None:
            status = getattr(self, "status", None)
        body: dict[str, Any] = {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "metadata": {k: v for k, v in identity.items() if v is not None},
        }
        if status is not None:
            body["status"] = dump(status)
        return body

    @property
    def key(self) -> str:
        """``namespace/name``, the work-queue and cache key."""
        return f"{self.metadata.namespace or ''}/{self.metadata.name or ''}"


class K8sList(K8sModel):
    """A ``…List``; subclasses declare ``items``."""

    api_version: str = Field(API_VERSION, alias="apiVersion")
    kind: str
    metadata: ListMeta = Field(default_factory=ListMeta)

    @classmethod
    def from_api(cls, data: Mapping[str, Any]) -> Self:
        return cls.model_validate(data)

    def to_api(self) -> dict[str, Any]:
        return dump(self)


def new_controller_ref(owner: K8sObject) -> OwnerReference:
    """The reference a controller puts on what it creates (blocks the owner's foreground deletion)."""
    return OwnerReference(
        api_version=owner.api_version,
        kind=owner.kind,
        name=owner.metadata.name or "",
        uid=owner.metadata.uid or "",
        controller=True,
        block_owner_deletion=True,
    )


def now_utc() -> datetime:
    """Timestamps for status fields, second precision like ``metav1.Now()`` serialises them."""
    return datetime.now(UTC).replace(microsecond=0)


def precise_now_utc() -> datetime:
    """The time to the microsecond, for what measures a span rather than stamps a status field (a
    drain's progress and its Pod-eviction deadlines, a bootstrap token's expiry)."""
    return datetime.now(UTC)


def beyond_status(obj: Mapping[str, Any] | None) -> tuple[Any, ...]:
    """An object (as the API server sends it) less its ``status`` and its resourceVersion, which every
    write advances: two versions with equal projections differ only in their status. What the watch
    declarations of controllers that compute their object's status afresh on each pass compare."""
    if not obj:
        return ()
    meta = obj.get("metadata") or {}
    kept = {k: v for k, v in meta.items() if k not in ("resourceVersion", "managedFields")}
    return (kept, {k: v for k, v in obj.items() if k not in ("metadata", "status")})
