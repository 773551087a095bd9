"""The resources the informers list and watch, and for each: its key, what is stored in the mirror,
what the informer keeps in memory, and the index values it is filed under.

Three forms of one object:
- *stored* (Redis, what workers read): the API object without ``metadata.managedFields``; Nodes also
  without ``status.images`` (large, never read); Pods as a projection of the fields the drain and
  the safety checks read, to keep 100k pods affordable; Secrets without their data (metadata and a
  digest of the data only: nothing secret is ever written to Redis, see ``_secret_stored``).
- *remembered* (the informer's memory): enough to compute index values and route the next event
  (an UPDATE needs the old object). Control-cluster kinds keep the stored form; target kinds keep a
  small subset, so memory does not grow with node status or pod specs.
- *indexed*: the values under which the object is filed (``mcm_tasks.cache.layout.INDEXES``).

Writers must patch, not PUT, objects read from the mirror: a projection lacks fields a PUT would drop.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from mcm_tasks import kinds
from mcm_tasks.api import Obj
from mcm_tasks.api.constants import NODE_LABEL_KEY, NODE_MACHINE_NAME_LABEL_KEY
from mcm_tasks.cache import layout
from mcm_tasks.kinds import Kind
from mcm_tasks.kube.resources import Resource
from mcm_tasks.settings import Settings

IndexFunc = Callable[[Obj], list[str]]

CONTROL = "control"
TARGET = "target"

#: index values longer than a Kubernetes qualified name (namespace/name, 63 + 1 + 253) are not
#: names of anything: such a value is not filed, so one object cannot put megabyte keys into Redis
MAX_INDEX_VALUE_LENGTH = 317
MAX_PROBLEM_LENGTH = 300


def meta(obj: Mapping[str, Any] | None) -> dict[str, Any]:
    return (obj or {}).get("metadata") or {}


def key_of(obj: Mapping[str, Any]) -> str:
    m = meta(obj)
    return layout.object_key(m.get("namespace"), m.get("name", ""))


def resource_version(obj: Mapping[str, Any] | None) -> str:
    return str(meta(obj).get("resourceVersion", "")) if obj else ""


def controller_ref(obj: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The ownerReference with ``controller: true`` (``metav1.GetControllerOf``)."""
    if not obj:
        return None
    for ref in meta(obj).get("ownerReferences") or ():
        if ref.get("controller"):
            return dict(ref)
    return None


def pick(obj: Mapping[str, Any], paths: Iterable[tuple[str, ...]]) -> Obj:
    """A copy holding only the given paths (those present), nested as in the original."""
    out: Obj = {}
    for path in paths:
        src: Any = obj
        for part in path:
            if not isinstance(src, Mapping) or part not in src:
                break
            src = src[part]
        else:
            dst = out
            for part in path[:-1]:
                dst = dst.setdefault(part, {})
            dst[path[-1]] = src
    return out


def _without_managed_fields(obj: Obj) -> Obj:
    m = obj.get("metadata")
    if m and "managedFields" in m:
        obj = {**obj, "metadata": {k: v for k, v in m.items() if k != "managedFields"}}
    return obj


def _node_stored(obj: Obj) -> Obj:
    obj = _without_managed_fields(obj)
    status = obj.get("status")
    if status and "images" in status:
        obj = {**obj, "status": {k: v for k, v in status.items() if k != "images"}}
    return obj


def heartbeat_only(old: Obj, new: Obj) -> bool:
    """Whether a remembered Node moved only by its kubelet's status report (nodeStatusReportFrequency,
    5 min): its resourceVersion and its conditions' lastHeartbeatTime, nothing else the informer
    remembers (what routing and the indexes read: metadata, taints, conditions, attached volumes)."""
    return _sans_heartbeat(old) == _sans_heartbeat(new)


def _sans_heartbeat(node: Obj) -> Obj:
    metadata = {k: v for k, v in meta(node).items() if k != "resourceVersion"}
    status = node.get("status")
    if not isinstance(status, Mapping) or not isinstance(status.get("conditions"), list):
        return {**node, "metadata": metadata}
    conditions = [
        {k: v for k, v in c.items() if k != "lastHeartbeatTime"} if isinstance(c, Mapping) else c
        for c in status["conditions"]
    ]
    return {**node, "metadata": metadata, "status": {**status, "conditions": conditions}}


_POD_FIELDS = (
    *(
        ("metadata", f)
        for f in (
            "name", "namespace", "uid", "resourceVersion", "labels", "annotations", "ownerReferences",
            "deletionTimestamp", "deletionGracePeriodSeconds", "creationTimestamp",
        )
    ),
    ("spec", "nodeName"),
    ("spec", "volumes"),
    ("spec", "priority"),
    ("spec", "terminationGracePeriodSeconds"),
    ("status", "phase"),
    ("status", "conditions"),
)  # fmt: skip


def _pod_stored(obj: Obj) -> Obj:
    return pick(obj, _POD_FIELDS)


def _values(*candidates: Any) -> list[str]:
    return [str(v) for v in candidates if v]


def _label(name: str) -> IndexFunc:
    return lambda obj: _values((meta(obj).get("labels") or {}).get(name))


def _controller_uid(obj: Obj) -> list[str]:
    ref = controller_ref(obj)
    return _values(ref.get("uid")) if ref else []


def _secret_refs(obj: Obj) -> list[str]:
    """Keys of the secrets a MachineClass references; a ref without namespace means the class's own."""
    own = meta(obj).get("namespace")
    out: list[str] = []
    for field_name in ("secretRef", "credentialsSecretRef"):
        ref = obj.get(field_name) or {}
        if ref.get("name"):
            key = layout.object_key(ref.get("namespace") or own, ref["name"])
            if key not in out:
                out.append(key)
    return out


def _spec(*path: str) -> IndexFunc:
    def get(obj: Obj) -> list[str]:
        value: Any = obj.get("spec") or {}
        for part in path:
            value = value.get(part) if isinstance(value, Mapping) else None
        return _values(value)

    return get


def _claim(obj: Obj) -> list[str]:
    ref = (obj.get("spec") or {}).get("claimRef") or {}
    return [layout.object_key(ref.get("namespace"), ref["name"])] if ref.get("name") else []


def _namespace(obj: Obj) -> list[str]:
    return _values(meta(obj).get("namespace"))


#: the key of the Secrets' data digests: random per informer process and never written anywhere, so
#: a digest in Redis cannot be used to guess a short secret value offline (a plain hash could be)
_DIGEST_KEY = secrets.token_bytes(32)

#: annotations that would copy a Secret's data into its metadata (``kubectl apply`` keeps the whole
#: applied object there, data included)
_SECRET_COPYING_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)


def secret_data_digest(secret: Mapping[str, Any]) -> str:
    """A keyed digest (HMAC-SHA256) of a Secret's ``data`` and ``stringData``: equal data, equal digest
    within one informer process, which is all change detection (routing) needs."""
    content = {"data": secret.get("data") or {}, "stringData": secret.get("stringData") or {}}
    encoded = json.dumps(content, sort_keys=True, separators=(",", ":")).encode()
    return "hmac-sha256:" + hmac.new(_DIGEST_KEY, encoded, hashlib.sha256).hexdigest()


def _secret_stored(obj: Obj) -> Obj:
    """A Secret as the mirror (and the informer's memory) keeps it: metadata, type and a digest of the
    data in an annotation, never the data. Workers fetch the data from the API server when a driver
    call needs it (``mcm_tasks.controllers.common.secretdata_io``)."""
    m = meta(_without_managed_fields(obj))
    annotations = {
        k: v for k, v in (m.get("annotations") or {}).items() if k not in _SECRET_COPYING_ANNOTATIONS
    }
    annotations[layout.DATA_DIGEST_ANNOTATION] = secret_data_digest(obj)
    slim = {k: v for k, v in obj.items() if k not in ("data", "stringData", "metadata")}
    slim["metadata"] = {**m, "annotations": annotations}
    return slim


_META_BASICS = (("metadata", "name"), ("metadata", "namespace"), ("metadata", "resourceVersion"))


@dataclass(frozen=True)
class WatchedResource:
    """How the informer lists, stores, remembers and indexes one kind. ``kind`` is its mirror key
    (``kinds.X.mirror``), the name the informer's events and the mirror use; ``api`` its
    ``kinds.X.resource``. The specs of the kinds are ``WATCHES[kinds.X]``."""

    kind: str
    api: Resource
    cluster: str
    indexes: Mapping[str, IndexFunc] = field(default_factory=dict)
    stored: Callable[[Obj], Obj] = _without_managed_fields
    #: paths kept in memory; None keeps the whole stored object
    remembered_paths: tuple[tuple[str, ...], ...] | None = None

    def remember(self, stored: Obj) -> Obj:
        return stored if self.remembered_paths is None else pick(stored, self.remembered_paths)

    def index_values(self, obj: Obj | None) -> dict[str, list[str]]:
        return self.indexed(obj)[0]

    def indexed(self, obj: Obj | None) -> tuple[dict[str, list[str]], list[str]]:
        """The index values, and what could not be indexed and why. Object content never makes this
        raise (client-go's indexer would fail the whole store update): an index function that fails
        on hostile content, or a value too long to be a Kubernetes name, files the object under
        nothing for that index, and the informer reports it (``informers.problems``)."""
        if obj is None:
            return {}, []
        values: dict[str, list[str]] = {}
        problems: list[str] = []
        for name, fn in self.indexes.items():
            try:
                found = fn(obj)
            except Exception as err:  # hostile content: any shape the schema lets through
                values[name] = []
                problems.append(f"index {name}: {type(err).__name__}: {err}"[:MAX_PROBLEM_LENGTH])
                continue
            kept = [v for v in found if len(v) <= MAX_INDEX_VALUE_LENGTH]
            if len(kept) != len(found):
                problems.append(f"index {name}: a value longer than {MAX_INDEX_VALUE_LENGTH} characters")
            values[name] = kept
        return values, problems

    def collection_path(self, namespace: str | None) -> str:
        return self.api.path(namespace if self.api.namespaced else None)


def _watch(
    kind: Kind,
    indexes: Mapping[str, IndexFunc] | None = None,
    *,
    stored: Callable[[Obj], Obj] = _without_managed_fields,
    remembered_paths: tuple[tuple[str, ...], ...] | None = None,
) -> tuple[Kind, WatchedResource]:
    """A kind and its watch spec: the cluster from ``kinds.CONTROL``/``kinds.TARGET``, one index
    function for each index the kind declares (and no other)."""
    indexes = dict(indexes or {})
    if tuple(indexes) != kind.indexes:
        raise ValueError(f"{kind.mirror}: index functions {tuple(indexes)} != declared {kind.indexes}")
    cluster = CONTROL if kind in kinds.CONTROL else TARGET
    return kind, WatchedResource(kind.mirror, kind.resource, cluster, indexes, stored, remembered_paths)


#: the watch spec of each mirrored kind (``informers.resources.WATCHES[kinds.MACHINE]``)
WATCHES: Final[Mapping[Kind, WatchedResource]] = dict(
    [
        _watch(
            kinds.MACHINE,
            {
                layout.BY_OWNER: _controller_uid,
                layout.BY_CLASS: _spec("class", "name"),
                layout.BY_NODE: _label(NODE_LABEL_KEY),
                layout.BY_DEPLOYMENT_NAME: _label("name"),
            },
        ),
        _watch(kinds.MACHINE_SET, {layout.BY_OWNER: _controller_uid}),
        _watch(kinds.MACHINE_DEPLOYMENT),
        _watch(kinds.MACHINE_CLASS, {layout.BY_SECRET: _secret_refs}),
        _watch(kinds.SECRET, stored=_secret_stored),
        _watch(
            kinds.NODE,
            {layout.BY_MACHINE_NAME: _label(NODE_MACHINE_NAME_LABEL_KEY)},
            stored=_node_stored,
            remembered_paths=(
                ("metadata",),
                ("spec", "taints"),
                ("status", "conditions"),
                ("status", "volumesAttached"),
            ),
        ),
        _watch(
            kinds.POD,
            {layout.BY_NODE: _spec("nodeName")},
            stored=_pod_stored,
            remembered_paths=(*_META_BASICS, ("metadata", "deletionTimestamp"), ("spec", "nodeName")),
        ),
        _watch(
            kinds.POD_DISRUPTION_BUDGET,
            {layout.BY_NAMESPACE: _namespace},
            remembered_paths=_META_BASICS,
        ),
        _watch(
            kinds.PERSISTENT_VOLUME,
            {layout.BY_CLAIM: _claim},
            remembered_paths=(*_META_BASICS, ("spec", "claimRef")),
        ),
        _watch(
            kinds.PERSISTENT_VOLUME_CLAIM,
            {layout.BY_VOLUME: _spec("volumeName")},
            remembered_paths=(*_META_BASICS, ("spec", "volumeName")),
        ),
        _watch(
            kinds.VOLUME_ATTACHMENT,
            {
                layout.BY_NODE: _spec("nodeName"),
                layout.BY_PERSISTENT_VOLUME: _spec("source", "persistentVolumeName"),
            },
            remembered_paths=(*_META_BASICS, ("spec", "nodeName"), ("spec", "source")),
        ),
    ]
)
if set(WATCHES) != set(kinds.ALL):
    raise ValueError("every mirrored kind (kinds.ALL) has one watch spec")

#: in listing order (``kinds.ALL``): what routing looks up (classes, sets) is known before what
#: refers to it
ALL: tuple[WatchedResource, ...] = tuple(WATCHES[k] for k in kinds.ALL)
#: mirror key → watch spec (the informer's events name kinds by mirror key)
BY_KIND: dict[str, WatchedResource] = {r.kind: r for r in ALL}


def watched_resources(settings: Settings) -> list[WatchedResource]:
    """Control kinds always; target kinds unless ``--target-kubeconfig=none``."""
    return [r for r in ALL if r.cluster == CONTROL or not settings.no_target]


def watch_namespace(resource: WatchedResource, settings: Settings) -> str | None:
    """Control kinds live in the control namespace; target kinds are watched across all namespaces."""
    return settings.namespace if resource.cluster == CONTROL else None
