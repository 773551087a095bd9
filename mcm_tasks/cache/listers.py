"""Typed listers over the mirror, named like client-go's: what tasks use to read the cluster state.

MCM kinds come back as ``mcm_tasks.api`` models; Kubernetes kinds (nodes, pods, volumes) as plain API
dicts, pods as the projection the informer stores (see ``informers.resources``). Every lister also has
a ``raw`` twin returning dicts, for hot paths that do not need a model, and a ``shared`` twin returning
models reused from the process's parsed-object cache (read-only: see ``mcm_tasks.cache.models``).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

import orjson

from mcm_tasks import kinds
from mcm_tasks.api import Machine, MachineClass, MachineDeployment, MachineSet
from mcm_tasks.cache import layout
from mcm_tasks.cache.models import ParsedCache, Unreadable, get_parsed_cache, parser
from mcm_tasks.cache.reader import UNKEPT, CacheReader, Obj, get_reader

T = TypeVar("T")


@dataclass
class Lister(Generic[T]):
    """One kind. ``namespace`` is the default for ``get`` on namespaced kinds (the control namespace)."""

    kind: str
    parse: Callable[[Obj], T]
    namespace: str | None = None
    reader: CacheReader = field(default_factory=get_reader)
    #: set on the ``shared`` view: results come from (and go into) this cache
    parsed: ParsedCache | None = None

    @property
    def table(self) -> str:
        """The parsed-object cache's table of this kind in this mirror: the objects hash's key, which
        names the installation's (or in seed mode the namespace's) prefix. A worker of a seed serves
        every namespace's mirror from one process cache; keyed by the kind alone, one namespace's
        whole list dropped every other namespace's parsed objects as gone (each of the fifty sets
        parsed its machines afresh on every pass), and a list by version running beside it in
        another pool thread could lose a machine it had just parsed (``every_versioned``)."""
        return layout.objects_key(self.kind)

    def key(self, name: str, namespace: str | None = None) -> str:
        return layout.object_key(namespace if namespace is not None else self.namespace, name)

    def get(self, name: str, namespace: str | None = None) -> T | None:
        return self.get_by_key(self.key(name, namespace))

    def get_by_key(self, key: str) -> T | None:
        if self.parsed is not None:
            stored = self.reader.get_stored(self.kind, key)
            if stored is None:
                self.parsed.forget(self.table, self.parse, key)
                return None
            return self.parsed.one(self.table, self.parse, key, stored)  # type: ignore[no-any-return]
        found = self.reader.get(self.kind, key)
        return None if found is None else self.parse(found)

    def get_many(self, keys: Iterable[str]) -> builtins.list[T]:
        """The readable objects that exist among ``keys``, in the order asked (one round trip)."""
        if self.parsed is not None:
            return self.parsed.some(self.table, self.parse, self.reader.get_many_stored(self.kind, keys))
        return self._readable(self.reader.get_many(self.kind, keys))

    def list(self) -> builtins.list[T]:
        if self.parsed is not None:
            return self.parsed.every(self.table, self.parse, self.reader.list_stored(self.kind))
        return self._readable(self.reader.list(self.kind))

    def _readable(self, objs: Iterable[Obj]) -> builtins.list[T]:
        """The objects that parse: an unreadable one is left out of every list (as client-go's
        reflector drops what it cannot decode), so it cannot fail the reconcile of its neighbours.
        A ``get`` of it raises ``Unreadable``, which its own reconcile answers."""
        out = []
        for obj in objs:
            try:
                out.append(self.parse(obj))
            except Unreadable:
                continue
        return out

    def list_if_synced(self) -> builtins.list[T] | None:
        """``list``, or None when the kind is not synced, read together (see ``list_stored_if_synced``).
        Through the parsed-object cache, a kind whose versions the mirror keeps is listed by version:
        only the objects changed since this process parsed them are read (``every_versioned``)."""
        if self.parsed is not None:
            versions = self.reader.versions_if_synced(self.kind)
            if versions is None:
                return None
            if versions is not UNKEPT:
                listed = self.parsed.every_versioned(
                    self.table,
                    self.parse,
                    versions,
                    lambda keys: self.reader.get_many_stored(self.kind, keys),
                )
                if listed is not None:
                    return listed
        stored = self.reader.list_stored_if_synced(self.kind)
        if stored is None:
            return None
        if self.parsed is not None:
            return self.parsed.every(self.table, self.parse, stored)
        return self._readable(orjson.loads(raw) for raw in stored.values())

    def by_index(self, index: str, value: str) -> builtins.list[T]:
        if self.parsed is not None:
            stored = self.reader.by_index_stored(self.kind, index, value)
            return self.parsed.some(self.table, self.parse, stored)
        return self._readable(self.reader.by_index(self.kind, index, value))

    def keys(self) -> builtins.list[str]:
        return self.reader.keys(self.kind)

    def keys_by_index(self, index: str, value: str) -> builtins.list[str]:
        """The keys of the objects under an index value (the objects are not read)."""
        return self.reader.index_members(self.kind, index, value)

    def synced(self) -> bool:
        return self.reader.synced(self.kind)

    @property
    def raw(self) -> Any:
        """The same lister (same helpers) returning the stored dicts instead of models."""
        return replace(self, parse=_identity, parsed=None)  # type: ignore[arg-type]

    @property
    def shared(self) -> Any:
        """The same lister returning objects shared through the process's parsed-object cache: an
        unchanged object is not decoded or parsed again. The caller must not change them."""
        return replace(self, parsed=get_parsed_cache())

    @property
    def raw_shared(self) -> Any:
        """``raw`` through the parsed-object cache: stored dicts decoded once per version and shared
        (read-only, as ``shared``'s models)."""
        return replace(self, parse=_identity, parsed=get_parsed_cache())  # type: ignore[arg-type]


def _identity(obj: Obj) -> Obj:
    return obj


class MachineLister(Lister[T]):
    def owned_by(self, owner_uid: str) -> builtins.list[T]:
        """Machines whose controller ownerReference has this uid (a MachineSet's machines)."""
        return self.by_index(layout.BY_OWNER, owner_uid)

    def keys_owned_by(self, owner_uid: str) -> builtins.list[str]:
        """The keys of ``owned_by``'s machines, without reading them."""
        return self.keys_by_index(layout.BY_OWNER, owner_uid)

    def of_class(self, class_name: str) -> builtins.list[T]:
        return self.by_index(layout.BY_CLASS, class_name)

    def on_node(self, node_name: str) -> builtins.list[T]:
        """Machines whose ``node`` label names this node (MCM's ``getMachineFromNode``)."""
        return self.by_index(layout.BY_NODE, node_name)

    def with_deployment_name(self, name: str) -> builtins.list[T]:
        """Machines whose ``name`` label is this (the meltdown-protection count)."""
        return self.by_index(layout.BY_DEPLOYMENT_NAME, name)


class MachineSetLister(Lister[T]):
    def owned_by(self, owner_uid: str) -> builtins.list[T]:
        return self.by_index(layout.BY_OWNER, owner_uid)


class MachineClassLister(Lister[T]):
    def referencing_secret(self, secret_key: str) -> builtins.list[T]:
        """Classes whose ``secretRef`` or ``credentialsSecretRef`` is this secret (``namespace/name``)."""
        return self.by_index(layout.BY_SECRET, secret_key)


class SecretLister(Lister[Obj]):
    """Secrets as the mirror keeps them: metadata and a digest of the data, never the data itself
    (``informers.resources._secret_stored``); the data is read from the API server when needed."""

    def data_digest(self, name: str, namespace: str | None = None) -> str | None:
        """The digest of a secret's data, or None when the secret is absent."""
        secret = self.get(name, namespace)
        if secret is None:
            return None
        annotations = (secret.get("metadata") or {}).get("annotations") or {}
        return str(annotations.get(layout.DATA_DIGEST_ANNOTATION, ""))


class NodeLister(Lister[Obj]):
    def for_machine(self, machine_name: str) -> builtins.list[Obj]:
        """Nodes labelled ``node.gardener.cloud/machine-name=<machine>``."""
        return self.by_index(layout.BY_MACHINE_NAME, machine_name)


class PodLister(Lister[Obj]):
    def on_node(self, node_name: str) -> builtins.list[Obj]:
        return self.by_index(layout.BY_NODE, node_name)


class PodDisruptionBudgetLister(Lister[Obj]):
    def in_namespace(self, namespace: str) -> builtins.list[Obj]:
        return self.by_index(layout.BY_NAMESPACE, namespace)


class PersistentVolumeClaimLister(Lister[Obj]):
    def for_volume(self, volume_name: str) -> builtins.list[Obj]:
        return self.by_index(layout.BY_VOLUME, volume_name)


class VolumeAttachmentLister(Lister[Obj]):
    def on_node(self, node_name: str) -> builtins.list[Obj]:
        return self.by_index(layout.BY_NODE, node_name)

    def for_volume(self, pv_name: str) -> builtins.list[Obj]:
        return self.by_index(layout.BY_PERSISTENT_VOLUME, pv_name)


@dataclass
class Listers:
    machines: MachineLister[Machine]
    machine_sets: MachineSetLister[MachineSet]
    machine_deployments: Lister[MachineDeployment]
    machine_classes: MachineClassLister[MachineClass]
    secrets: SecretLister
    nodes: NodeLister
    pods: PodLister
    pod_disruption_budgets: PodDisruptionBudgetLister
    persistent_volumes: Lister[Obj]
    persistent_volume_claims: PersistentVolumeClaimLister
    volume_attachments: VolumeAttachmentLister


def _model(cls: Any) -> Callable[[Obj], Any]:
    return parser(cls)


def new_listers(namespace: str, reader: CacheReader | None = None) -> Listers:
    """Listers for a control namespace (the namespace of MCM objects and their secrets)."""
    r = reader or get_reader()
    return Listers(
        machines=MachineLister(kinds.MACHINE.mirror, _model(Machine), namespace, r),
        machine_sets=MachineSetLister(kinds.MACHINE_SET.mirror, _model(MachineSet), namespace, r),
        machine_deployments=Lister(kinds.MACHINE_DEPLOYMENT.mirror, _model(MachineDeployment), namespace, r),
        machine_classes=MachineClassLister(kinds.MACHINE_CLASS.mirror, _model(MachineClass), namespace, r),
        secrets=SecretLister(kinds.SECRET.mirror, _identity, namespace, r),
        nodes=NodeLister(kinds.NODE.mirror, _identity, None, r),
        pods=PodLister(kinds.POD.mirror, _identity, None, r),
        pod_disruption_budgets=PodDisruptionBudgetLister(
            kinds.POD_DISRUPTION_BUDGET.mirror, _identity, None, r
        ),
        persistent_volumes=Lister(kinds.PERSISTENT_VOLUME.mirror, _identity, None, r),
        persistent_volume_claims=PersistentVolumeClaimLister(
            kinds.PERSISTENT_VOLUME_CLAIM.mirror, _identity, None, r
        ),
        volume_attachments=VolumeAttachmentLister(kinds.VOLUME_ATTACHMENT.mirror, _identity, None, r),
    )


#: the listers ``get_listers`` built, by (namespace, reader): a pass asks for them several times
#: (five times in a Running machine's recheck), and eleven listers built afresh each time were a
#: tenth of that pass's CPU. An entry serves only the very reader it was built over (the thread's,
#: or the one a test installed); bounded, for a seed's namespaces times pool threads
_built: dict[tuple[str, int], tuple[CacheReader, Listers]] = {}
_BUILT_LIMIT = 1024


def get_listers() -> Listers:
    """Listers for the settings' control namespace, over the thread's reader (``get_reader``).
    Shared by the calls of a thread: read through them, never change them."""
    from mcm_tasks.settings import get_settings

    namespace, reader = get_settings().namespace, get_reader()
    hit = _built.get((namespace, id(reader)))
    if hit is not None and hit[0] is reader:
        return hit[1]
    listers = new_listers(namespace, reader)
    if len(_built) >= _BUILT_LIMIT:
        _built.clear()
    _built[(namespace, id(reader))] = (reader, listers)
    return listers
