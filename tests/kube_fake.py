"""A recording fake of the ``kube/ops`` edge, and in-memory listers: a whole reconcile pass runs
in-process, in milliseconds, and the test checks the writes it recorded (the fixture style of
sample-controller and upstream MCM's controller tests: listers in, recorded actions out).

``FakeKube`` is an ``ApiClient`` whose ``call_api`` answers from a dict of objects instead of a
socket, so everything above it (``kube.rest``'s encoding, ``kube.ops``, ``retry_on_conflict``, the
Event recorder) runs as in production. It keeps the API server's rules a controller depends on:
resourceVersion preconditions (409 Conflict), ``generateName``, uid and creationTimestamp on
create, the status subresource, finalizers holding a delete (deletionTimestamp), and merge, JSON
and strategic merge patches (the sandbox API server's own, ``mcm_sandbox.patch``). It answers the
discovery a drain reads and takes every Eviction (no PodDisruptionBudget is kept): the pod goes.
It does not select by label or field on lists, watch, or validate against the CRDs: those are the
sandbox API server's job (tests/sandbox/, tests/integration/).

Every request is recorded as an ``Action`` (client-go's ``testing.Action``: verb, resource,
namespace, name, subresource, body); ``writes()`` are the ones that change something.

``listers()`` are the controller's own ``Listers`` over a ``MemoryReader``: a snapshot of the
objects as an informer would have mirrored them, taken when asked for (the mirror lags the
writes, as in production). ``installed()`` makes the fake this process's control and target
cluster for the code below a scope that still reads the process's clients (and, given a
``mirror()``, what the process's listers read). ``change()`` is another writer's edit, unrecorded;
``unavailable`` an outage.

Used by tests only; the product never imports it (import-linter's contract forbids ``tests``).
"""

from __future__ import annotations

import builtins
import copy
import itertools
import json
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import orjson
from kubernetes.client import ApiClient, Configuration

from mcm_sandbox.patch import json_patch, merge_patch, strategic_merge_patch
from mcm_tasks.cache import Listers, new_listers
from mcm_tasks.cache.layout import object_key
from mcm_tasks.cache.reader import UNKEPT, CacheReader, Unkept
from mcm_tasks.kube import clients
from mcm_tasks.kube.ops import PatchType

Obj = dict[str, Any]
#: metadata a write cannot change
_SERVER_FIELDS = frozenset(
    {"uid", "creationTimestamp", "deletionTimestamp", "generation", "namespace", "name"}
)
#: the verbs that change something
WRITES = frozenset({"create", "update", "patch", "delete"})
#: the verb client-go's ``testing.Action`` names for each method (a GET without a name: ``list``)
_VERBS = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
_fakes = itertools.count(1)


@dataclass(frozen=True)
class Action:
    """One request: ``verb`` is get, list, create, update, patch or delete; ``resource`` the plural."""

    verb: str
    resource: str
    namespace: str | None
    name: str | None
    subresource: str | None = None
    body: Any = None

    def matches(self, verb: str, resource: str, subresource: str | None = None) -> bool:
        return (self.verb, self.resource, self.subresource) == (verb, resource, subresource)


class _Response:
    """What ``kube.rest`` reads of a urllib3 answer (``RESTResponse``): status, data, headers."""

    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self.reason = {200: "OK", 201: "Created", 404: "Not Found", 409: "Conflict",
                       503: "Service Unavailable"}.get(status, "")  # fmt: skip
        self.data = b"" if body is None else json.dumps(body).encode()
        self.headers = {"Content-Type": "application/json"}
        self.response = self

    def read(self) -> bytes:
        return self.data

    def release_conn(self) -> None:
        return None

    def getheaders(self) -> dict[str, str]:
        return self.headers

    def getheader(self, name: str, default: str | None = None) -> str | None:
        return self.getheaders().get(name, default)


class _Refused(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
                       "reason": reason, "message": message}  # fmt: skip


@dataclass(frozen=True)
class _Path:
    api_version: str
    resource: str
    namespace: str | None
    name: str | None
    subresource: str | None


def _parse_path(path: str) -> _Path:
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"]:
        api_version, rest = parts[1], parts[2:]
    else:
        api_version, rest = f"{parts[1]}/{parts[2]}", parts[3:]
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest:
        raise _Refused(404, "NotFound", f"the server could not find the requested resource ({path})")
    return _Path(
        api_version,
        rest[0],
        namespace,
        rest[1] if len(rest) > 1 else None,
        rest[2] if len(rest) > 2 else None,
    )


class FakeKube(ApiClient):
    """An API server in a dict, behind the official client; ``actions`` records every request."""

    def __init__(
        self,
        objects: Iterable[Mapping[str, Any]] = (),
        now: datetime | None = None,
        tick: timedelta | None = None,
    ) -> None:
        # a host of its own, so that the control and the target fake are told apart (probe clients)
        super().__init__(Configuration(host=f"http://fake-kube-{next(_fakes)}.invalid"))
        self.objects: dict[tuple[str, str | None, str], Obj] = {}
        self.actions: list[Action] = []
        self.now = now or datetime(2026, 1, 1, tzinfo=UTC)
        #: how far the clock moves on at each create (None: it stands still), so that objects created
        #: one after another are told apart by age, as on an API server where time passes
        self.tick = tick
        #: an outage: while set, every request is recorded and answered 503 ServiceUnavailable
        self.unavailable = False
        self._rv = itertools.count(1)
        self._ids = itertools.count(1)
        for obj in objects:
            self.add(obj)

    # --- the test's side --------------------------------------------------------------------------

    def add(self, obj: Mapping[str, Any]) -> Obj:
        """Put an object in as if it had been created earlier (no action recorded)."""
        stored = copy.deepcopy(dict(obj))
        meta = stored.setdefault("metadata", {})
        meta.setdefault("uid", f"uid-{next(self._ids)}")
        meta.setdefault("creationTimestamp", self.now.strftime("%Y-%m-%dT%H:%M:%SZ"))
        meta.setdefault("generation", 1)
        meta["resourceVersion"] = str(next(self._rv))
        self.objects[(_plural(stored), meta.get("namespace"), meta["name"])] = stored
        return copy.deepcopy(stored)

    def change(self, resource: str, name: str, namespace: str | None, change: Callable[[Obj], None]) -> Obj:
        """Change a stored object in place as another writer would (a user editing a spec, another
        controller writing a status), with no action recorded: ``change`` edits the object given; a
        new resourceVersion, and a new generation when the spec changed, as the API server does."""
        current = self.objects[(resource, namespace, name)]
        changed = copy.deepcopy(current)
        change(changed)
        meta = changed["metadata"]
        if changed.get("spec") != current.get("spec"):
            meta["generation"] = int(meta.get("generation") or 1) + 1
        meta["resourceVersion"] = str(next(self._rv))
        self.objects[(resource, namespace, name)] = changed
        return copy.deepcopy(changed)

    def get_object(self, resource: str, name: str, namespace: str | None = None) -> Obj | None:
        found = self.objects.get((resource, namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def list_objects(self, resource: str, namespace: str | None = None) -> list[Obj]:
        return [copy.deepcopy(o) for (r, ns, _), o in sorted(self.objects.items(), key=lambda kv: str(kv[0]))
                if r == resource and (namespace is None or ns == namespace)]  # fmt: skip

    def writes(self, *resources: str) -> list[Action]:
        """The recorded writes, of the given resources only when some are named (Events included:
        name ``"events"`` to see them, or leave it out of a list of resources to ignore them)."""
        return [a for a in self.actions if a.verb in WRITES and (not resources or a.resource in resources)]

    def clear(self) -> None:
        self.actions.clear()

    def mirror(self) -> MemoryReader:
        """A snapshot of the objects now, as the informers' mirror would hold them (``installed``)."""
        return MemoryReader(self.objects.values())

    def listers(self, namespace: str) -> Listers:
        """The controller's listers over a snapshot of the objects now (what the mirror holds)."""
        return new_listers(namespace, self.mirror())

    @contextmanager
    def installed(
        self, target: FakeKube | None = None, mirror: MemoryReader | None = None
    ) -> Iterator[FakeKube]:
        """This fake as the process's control cluster (and ``target``, itself by default, as the
        target), for code that reads the process's clients rather than its scope's. The API-server
        check's probes, which build their own client per cluster configuration (``probe_client``),
        reach the same fakes. ``mirror`` (``mirror()``, a snapshot) is what this thread's reader of the
        informers' mirror holds, synced, for code that reads the process's listers: without it they
        find the mirror unsynced, and read the fake instead."""
        from mcm_tasks.cache import reader
        from mcm_tasks.controllers.safety import apiserver_io
        from mcm_tasks.settings import get_settings

        ident = (os.getpid(), threading.get_ident(), get_settings().redis_url)
        reader_before = reader._readers.get(ident)
        if mirror is not None:
            reader._readers[ident] = mirror

        before = clients._current
        clusters = [self, target or self]
        probes = {c.configuration: (os.getpid(), c) for c in clusters}
        probes_before = {k: apiserver_io._probe_clients.get(k) for k in probes}
        clients._current = clients.Clusters(
            clients.Cluster("control", self), clients.Cluster("target", clusters[1])
        )
        apiserver_io._probe_clients.update(probes)
        try:
            yield self
        finally:
            clients._current = before
            if mirror is not None:
                if reader_before is None:
                    reader._readers.pop(ident, None)
                else:
                    reader._readers[ident] = reader_before
            for key, found in probes_before.items():
                if found is None:
                    apiserver_io._probe_clients.pop(key, None)
                else:
                    apiserver_io._probe_clients[key] = found

    # --- the client's side ------------------------------------------------------------------------

    def call_api(self, method: str, url: str, header_params: Any = None, body: Any = None,
                 post_params: Any = None, _request_timeout: Any = None) -> _Response:  # fmt: skip
        split = urlsplit(url)
        query = dict(parse_qsl(split.query))
        payload = None if body is None else orjson.loads(body)
        content_type = (header_params or {}).get("Content-Type")
        if split.path.rstrip("/") in _DISCOVERY:  # what a drain asks before it evicts
            self.actions.append(Action("get", "discovery", None, split.path.rstrip("/")))
            return _Response(200, _DISCOVERY[split.path.rstrip("/")])
        try:
            path = _parse_path(split.path)
            if self.unavailable:
                verb = _VERBS[method] if method != "GET" or path.name else "list"
                self.actions.append(Action(verb, path.resource, path.namespace, path.name, path.subresource))
                raise _Refused(
                    503, "ServiceUnavailable", "the server is currently unable to handle the request"
                )
            return _Response(*self._serve(method, path, payload, content_type, query))
        except _Refused as refused:
            return _Response(refused.status["code"], refused.status)

    def _serve(
        self, method: str, p: _Path, body: Any, content_type: str | None, query: dict[str, str]
    ) -> tuple[int, Any]:
        if method == "GET" and p.name is None:
            self.actions.append(Action("list", p.resource, p.namespace, None, None, query or None))
            items = self.list_objects(p.resource, p.namespace)
            return 200, {"kind": "List", "apiVersion": p.api_version, "items": items,
                         "metadata": {"resourceVersion": str(next(self._rv))}}  # fmt: skip
        verb = _VERBS[method]
        name = p.name if method != "POST" else (body.get("metadata") or {}).get("name")
        self.actions.append(Action(verb, p.resource, p.namespace, name, p.subresource, copy.deepcopy(body)))
        key = (p.resource, p.namespace, p.name or "")
        if method == "POST" and p.subresource == "eviction":
            return 201, self._evict(key, body)
        if method == "POST":
            return 201, self._create(p, body)
        current = self.objects.get(key)
        if current is None:
            raise _Refused(404, "NotFound", f'{p.resource} "{p.name}" not found')
        if method == "GET":
            return 200, copy.deepcopy(current)
        if method == "DELETE":
            return 200, self._delete(key, current, body or {})
        if method == "PUT":
            return 200, self._write(key, current, body, p.subresource)
        patched = _apply_patch(current, body, content_type or PatchType.MERGE.value)
        return 200, self._write(key, current, patched, p.subresource, precondition=_rv_of(body))

    def _create(self, p: _Path, body: Obj) -> Obj:
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{next(self._ids):05x}"
        if p.namespace:
            meta["namespace"] = p.namespace
        key = (p.resource, p.namespace, meta["name"])
        if key in self.objects:
            raise _Refused(409, "AlreadyExists", f'{p.resource} "{meta["name"]}" already exists')
        if self.tick is not None:
            self.now += self.tick
        meta["uid"] = f"uid-{next(self._ids)}"
        meta["creationTimestamp"] = self.now.strftime("%Y-%m-%dT%H:%M:%SZ")
        meta["generation"] = 1
        meta["resourceVersion"] = str(next(self._rv))
        self.objects[key] = obj
        return copy.deepcopy(obj)

    def _write(self, key: tuple[str, str | None, str], current: Obj, body: Obj, sub: str | None,
               precondition: str | None = None) -> Obj:  # fmt: skip
        wanted = precondition if precondition is not None else _rv_of(body)
        if wanted and wanted != current["metadata"]["resourceVersion"]:
            message = f'Operation cannot be fulfilled on {key[0]} "{key[2]}": the object has been modified'
            raise _Refused(409, "Conflict", f"{message}; please apply your changes to the latest version")
        new = copy.deepcopy(current)
        if sub == "status":
            new["status"] = copy.deepcopy(body.get("status"))
        else:
            for field, value in body.items():
                if field not in ("status", "metadata"):
                    new[field] = copy.deepcopy(value)
            kept = {k: v for k, v in current["metadata"].items() if k in _SERVER_FIELDS}
            new["metadata"] = {**copy.deepcopy(body.get("metadata") or {}), **kept}
            if new.get("spec") != current.get("spec"):
                new["metadata"]["generation"] = int(current["metadata"].get("generation") or 1) + 1
        new["metadata"]["resourceVersion"] = str(next(self._rv))
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            del self.objects[key]  # the last finalizer gone: the object goes
        else:
            self.objects[key] = new
        return copy.deepcopy(new)

    def _evict(self, key: tuple[str, str | None, str], eviction: Obj) -> Obj:
        """An Eviction of a pod: no PodDisruptionBudget is kept, so every eviction is allowed and the
        pod is deleted at once (as a kubelet that stops it instantly)."""
        current = self.objects.get(key)
        if current is None:
            raise _Refused(404, "NotFound", f'pods "{key[2]}" not found')
        self._delete(key, current, (eviction or {}).get("deleteOptions") or {})
        return {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}

    def _delete(self, key: tuple[str, str | None, str], current: Obj, options: Obj) -> Obj:
        meta = current["metadata"]
        pre = options.get("preconditions") or {}
        if (pre.get("uid") and pre["uid"] != meta["uid"]) or (
            pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]
        ):
            raise _Refused(409, "Conflict", f'Precondition failed for {key[0]} "{key[2]}"')
        if meta.get("finalizers"):
            if not meta.get("deletionTimestamp"):
                meta["deletionTimestamp"] = self.now.strftime("%Y-%m-%dT%H:%M:%SZ")
                meta["resourceVersion"] = str(next(self._rv))
            return copy.deepcopy(current)
        del self.objects[key]
        return {"kind": "Status", "apiVersion": "v1", "status": "Success", "details": {"name": key[2]}}


#: discovery, as much as a drain reads (``support_eviction``): policy/v1, the pods/eviction subresource
_DISCOVERY: dict[str, Obj] = {
    "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
        {"name": "policy", "versions": [{"groupVersion": "policy/v1", "version": "v1"}],
         "preferredVersion": {"groupVersion": "policy/v1", "version": "v1"}}]},
    "/api/v1": {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
        {"name": "pods", "kind": "Pod", "namespaced": True},
        {"name": "pods/eviction", "kind": "Eviction", "group": "policy", "version": "v1",
         "namespaced": True}]},
}  # fmt: skip


def _plural(obj: Mapping[str, Any]) -> str:
    from mcm_tasks.kinds import resource_for_kind

    return resource_for_kind(str(obj["kind"])).plural


def _rv_of(body: Any) -> str | None:
    if isinstance(body, Mapping):
        found = (body.get("metadata") or {}).get("resourceVersion")
        return str(found) if found else None
    return None


def _apply_patch(current: Obj, body: Any, content_type: str) -> Obj:
    if content_type == PatchType.JSON.value:
        return json_patch(copy.deepcopy(current), body)
    if content_type == PatchType.STRATEGIC.value:
        return strategic_merge_patch(current, body, str(current.get("kind") or ""))
    return merge_patch(copy.deepcopy(current), body)


class MemoryReader(CacheReader):
    """The mirror's reader over objects in memory: what ``Listers`` read, all kinds synced. The
    mirror's secondary indexes (by owner, node, class) are computed on each read with the informer's
    index functions (``informers.resources.WATCHES``)."""

    def __init__(self, objects: Iterable[Mapping[str, Any]]) -> None:
        self._synced_seen: set[str] = set()
        self._scopes = 0
        self._scope_listed = False
        self._read: dict[tuple[str, str], bytes | None] = {}
        self.stored: dict[str, dict[str, bytes]] = {}
        for obj in objects:
            meta = obj["metadata"]
            self.stored.setdefault(_plural(obj), {})[object_key(meta.get("namespace"), meta["name"])] = (
                orjson.dumps(obj)
            )

    def get_stored(self, kind: str, key: str) -> bytes | None:
        return self.stored.get(kind, {}).get(key)

    def get_many_stored(self, kind: str, keys: Iterable[str]) -> list[tuple[str, bytes]]:
        found = self.stored.get(kind, {})
        return [(k, found[k]) for k in keys if k in found]

    def get_many(self, kind: str, keys: Iterable[str]) -> builtins.list[Obj]:
        return [orjson.loads(raw) for _, raw in self.get_many_stored(kind, keys)]

    def list(self, kind: str) -> builtins.list[Obj]:
        return [orjson.loads(raw) for raw in self.stored.get(kind, {}).values()]

    def list_stored(self, kind: str) -> dict[str, bytes]:
        return dict(self.stored.get(kind, {}))

    def list_stored_if_synced(self, kind: str) -> dict[str, bytes] | None:
        return self.list_stored(kind)

    def versions_if_synced(self, kind: str) -> dict[bytes, bytes] | Unkept | None:
        """No versions kept: lists read the stored objects (the Redis reader's path is tested on Redis)."""
        return UNKEPT

    def keys(self, kind: str) -> builtins.list[str]:
        return sorted(self.stored.get(kind, {}))

    def count(self, kind: str) -> int:
        return len(self.stored.get(kind, {}))

    def synced(self, kind: str) -> bool:
        return True

    def prefetch(self, wanted: Iterable[tuple[str, str]], exists: Sequence[str] = ()) -> builtins.list[bool]:
        """Nothing to read ahead in memory: later gets read the snapshot, and the Redis keys of
        ``exists`` are left to their callers' own reads (an empty answer says so)."""
        return []

    def index_members(self, kind: str, index: str, value: str) -> builtins.list[str]:
        """The keys filed under an index value, by the informer's own index function for it."""
        from informers.resources import WATCHES

        (spec,) = [w for w in WATCHES.values() if w.kind == kind]
        index_of = spec.indexes[index]
        return [k for k, raw in self.stored.get(kind, {}).items() if value in index_of(orjson.loads(raw))]

    def by_index_stored(self, kind: str, index: str, value: str) -> builtins.list[tuple[str, bytes]]:
        found = self.stored.get(kind, {})
        return [(k, found[k]) for k in self.index_members(kind, index, value)]

    def by_index(self, kind: str, index: str, value: str) -> builtins.list[Obj]:
        return [orjson.loads(raw) for _, raw in self.by_index_stored(kind, index, value)]

    def index_sizes_if_synced(
        self, kind: str, index: str, values: Sequence[str]
    ) -> builtins.list[int] | None:
        return [len(self.index_members(kind, index, value)) for value in values]
