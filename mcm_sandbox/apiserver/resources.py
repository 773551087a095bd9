"""The resource registry: which group/version/resource the server serves and how.

Built-in types are declared here once; CustomResourceDefinitions add and remove entries at run
time, so discovery, routing, tables and validation all read the same description.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mcm_sandbox.apiserver.errors import cause

ALL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
SUB_VERBS = ["get", "patch", "update"]

# Field selectors every resource supports, and the extra ones a few built-ins add.
COMMON_FIELDS = ("metadata.name", "metadata.namespace")
EXTRA_FIELDS: dict[str, tuple[str, ...]] = {
    "pods": ("spec.nodeName", "status.phase", "spec.restartPolicy", "spec.schedulerName", "status.podIP"),
    "events": (
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ),
    "secrets": ("type",),
    "nodes": ("spec.unschedulable",),
    "namespaces": ("status.phase",),
}


@dataclass
class ScaleSpec:
    """Where a resource keeps its replica counts (CRD ``subresources.scale``)."""

    spec_replicas: str = ".spec.replicas"
    status_replicas: str = ".status.replicas"
    label_selector: str | None = None


@dataclass
class PrinterColumn:
    name: str
    type: str
    json_path: str
    format: str = ""
    description: str = ""
    priority: int = 0


@dataclass
class ResourceType:
    group: str
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    short_names: list[str] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)
    status: bool = False
    scale: ScaleSpec | None = None
    eviction: bool = False
    has_generation: bool = False
    returns_deleted_object: bool = False
    schema: dict[str, Any] | None = None
    columns: list[PrinterColumn] | None = None
    crd: bool = False
    # Several group/versions may share one storage (core/v1 and events.k8s.io/v1 events do).
    storage: str = ""
    # The verbs the resource answers (None: all of ALL_VERBS); review kinds only take ``create``.
    verbs: list[str] | None = None
    # Other subresources a built-in serves: name -> (group, version, kind, verbs).
    extra_subresources: dict[str, tuple[str, str, str, list[str]]] = field(default_factory=dict)
    # Served as a view of another version's storage (see ``views``): converted in and out.
    view: str = ""

    def __post_init__(self) -> None:
        if not self.storage:
            self.storage = f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version(self) -> str:
        return self.api_version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def served_verbs(self) -> list[str]:
        return self.verbs if self.verbs is not None else ALL_VERBS

    def field_selectors(self) -> tuple[str, ...]:
        return COMMON_FIELDS + (EXTRA_FIELDS.get(self.plural, ()) if not self.group else ())


class Registry:
    """Lookup by (group, version, plural) for routing and by kind/short name for discovery."""

    def __init__(self) -> None:
        self._by_path: dict[tuple[str, str, str], ResourceType] = {}
        self._crd_owned: dict[str, list[tuple[str, str, str]]] = {}
        from mcm_sandbox.apiserver.builtins import builtin_types

        for rt in builtin_types():
            self.add(rt)

    def add(self, rt: ResourceType) -> None:
        self._by_path[(rt.group, rt.version, rt.plural)] = rt

    def drop_eviction(self) -> None:
        """Serve no eviction subresource, as a cluster without the policy API's Eviction: discovery
        does not list ``pods/eviction`` and a POST to it is a 404."""
        for rt in self._by_path.values():
            rt.eviction = False

    def get(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._by_path.get((group, version, plural))

    def all(self) -> list[ResourceType]:
        return list(self._by_path.values())

    def groups(self) -> dict[str, list[str]]:
        """group → versions, preferred first (the storage version of a CRD, else the first declared)."""
        out: dict[str, list[str]] = {}
        for rt in self._by_path.values():
            versions = out.setdefault(rt.group, [])
            if rt.version not in versions:
                versions.append(rt.version)
        return out

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return [rt for rt in self._by_path.values() if rt.group == group and rt.version == version]

    def kind_served(self, api_version: str, kind: str) -> bool:
        group = api_version.rpartition("/")[0]
        return any(rt.group == group and rt.kind == kind for rt in self._by_path.values())

    def by_storage(self, storage: str) -> list[ResourceType]:
        return [rt for rt in self._by_path.values() if rt.storage == storage]

    def namespaced_storages(self) -> dict[str, ResourceType]:
        out: dict[str, ResourceType] = {}
        for rt in self._by_path.values():
            if rt.namespaced:
                out.setdefault(rt.storage, rt)
        return out

    # --- CustomResourceDefinitions -------------------------------------------------------------

    def serve_crd(self, crd: dict[str, Any]) -> None:
        """(Re)register the versions a CRD serves; called on every CRD write."""
        name = crd["metadata"]["name"]
        self.unserve_crd(name)
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        group = spec.get("group", "")
        plural = names.get("plural", "")
        storage = f"{plural}.{group}"
        keys: list[tuple[str, str, str]] = []
        for ver in spec.get("versions") or []:
            if not ver.get("served", True):
                continue
            subs = ver.get("subresources") or {}
            scale = subs.get("scale")
            rt = ResourceType(
                group=group,
                version=ver["name"],
                plural=plural,
                singular=names.get("singular") or names.get("kind", "").lower(),
                kind=names.get("kind", ""),
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                short_names=list(names.get("shortNames") or []),
                categories=list(names.get("categories") or []),
                status="status" in subs,
                scale=ScaleSpec(
                    scale.get("specReplicasPath", ".spec.replicas"),
                    scale.get("statusReplicasPath", ".status.replicas"),
                    scale.get("labelSelectorPath"),
                )
                if scale is not None
                else None,
                has_generation=True,
                returns_deleted_object=True,
                schema=(ver.get("schema") or {}).get("openAPIV3Schema"),
                columns=[
                    PrinterColumn(
                        c.get("name", ""),
                        c.get("type", "string"),
                        c.get("jsonPath", ""),
                        c.get("format", ""),
                        c.get("description", ""),
                        int(c.get("priority", 0)),
                    )
                    for c in ver.get("additionalPrinterColumns") or []
                ],
                crd=True,
                storage=storage,
            )
            self.add(rt)
            keys.append((group, rt.version, plural))
        self._crd_owned[name] = keys

    def unserve_crd(self, name: str) -> None:
        for key in self._crd_owned.pop(name, []):
            self._by_path.pop(key, None)


def crd_causes(crd: dict[str, Any]) -> list[dict[str, str]]:
    """The checks the apiextensions validation makes that a controller could trip over."""
    causes: list[dict[str, str]] = []
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group = spec.get("group") or ""
    plural = names.get("plural") or ""
    if not group:
        causes.append(cause("spec.group", "Required value", "FieldValueRequired"))
    if not plural:
        causes.append(cause("spec.names.plural", "Required value", "FieldValueRequired"))
    if not names.get("kind"):
        causes.append(cause("spec.names.kind", "Required value", "FieldValueRequired"))
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        causes.append(
            cause(
                "spec.scope", 'Unsupported value: must be "Cluster" or "Namespaced"', "FieldValueNotSupported"
            )
        )
    name = (crd.get("metadata") or {}).get("name", "")
    if plural and group and name != f"{plural}.{group}":
        causes.append(cause("metadata.name", f'must be spec.names.plural+"."+spec.group: "{plural}.{group}"'))
    versions = spec.get("versions") or []
    if not versions:
        causes.append(
            cause(
                "spec.versions",
                "must have exactly one version marked as storage version",
                "FieldValueRequired",
            )
        )
    elif sum(1 for v in versions if v.get("storage")) != 1:
        causes.append(cause("spec.versions", "must have exactly one version marked as storage version"))
    return causes
