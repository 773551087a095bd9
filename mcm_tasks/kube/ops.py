"""Read and write API objects as dicts, for any resource (``kinds.X.resource``), and retry on conflict.

The boundary is the API's own JSON (camelCase dicts). Callers holding a pydantic model pass it as
is (``to_dict`` dumps it the way the API expects) and turn answers back with ``from_dict``, so these
helpers know nothing of any model's fields.

Optimistic concurrency works as on a real API server: an update carries the object's
``metadata.resourceVersion`` and fails with a Conflict when someone wrote in between; a delete can
carry uid / resourceVersion preconditions. ``retry_on_conflict`` re-runs a read-modify-write
function, like client-go's ``retry.RetryOnConflict`` (it lives in ``retry``, re-exported here where
the controllers call it).
"""

from __future__ import annotations

import json
from collections.abc import Generator, Mapping, Sequence
from enum import StrEnum
from typing import Any, TypeVar

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from pydantic import BaseModel

from mcm_tasks.kube import rest
from mcm_tasks.kube.errors import is_not_found
from mcm_tasks.kube.resources import MACHINE_API_VERSION, MACHINE_GROUP, MACHINE_VERSION, Resource
from mcm_tasks.kube.retry import Backoff, retry_on_conflict, retry_on_error
from mcm_tasks.settings import get_settings

__all__ = [
    "MACHINE_API_VERSION",
    "MACHINE_GROUP",
    "MACHINE_VERSION",
    "Backoff",
    "PatchType",
    "Resource",
    "create",
    "delete",
    "evict",
    "from_dict",
    "get",
    "list_",
    "patch",
    "retry_on_conflict",
    "retry_on_error",
    "to_dict",
    "update",
    "update_status",
    "watch",
]

Body = Mapping[str, Any] | BaseModel
M = TypeVar("M", bound=BaseModel)


class PatchType(StrEnum):
    """Content types of the three patch kinds. Custom resources do not take strategic merge."""

    MERGE = "application/merge-patch+json"
    STRATEGIC = "application/strategic-merge-patch+json"
    JSON = "application/json-patch+json"


class Propagation(StrEnum):
    BACKGROUND = "Background"
    FOREGROUND = "Foreground"
    ORPHAN = "Orphan"


# --- conversions ---------------------------------------------------------------------------------


def to_dict(obj: Body) -> dict[str, Any]:
    """The API form of an object: a pydantic model dumped by alias without unset fields, or a copy."""
    if isinstance(obj, BaseModel):
        return obj.model_dump(by_alias=True, exclude_none=True, mode="json")
    return dict(obj)


def from_dict(model: type[M], data: Mapping[str, Any]) -> M:
    return model.model_validate(data)


def metadata_of(obj: Body) -> dict[str, Any]:
    meta = to_dict(obj).get("metadata") or {}
    return dict(meta)


def _namespace(res: Resource, namespace: str | None, obj: Body | None = None) -> str | None:
    """Namespace of a request: given, else the object's, else the controller's (``--namespace``)."""
    if not res.namespaced:
        return None
    if namespace:
        return namespace
    if obj is not None and metadata_of(obj).get("namespace"):
        return str(metadata_of(obj)["namespace"])
    return get_settings().namespace


def _name(obj: Body) -> str:
    name = metadata_of(obj).get("name")
    if not name:
        raise ValueError("object has no metadata.name")
    return str(name)


def _with_type(res: Resource, obj: Body) -> dict[str, Any]:
    body = to_dict(obj)
    body.setdefault("apiVersion", res.api_version)
    body.setdefault("kind", res.kind)
    return body


# --- reads ---------------------------------------------------------------------------------------


def get(
    api: ApiClient, res: Resource, name: str, namespace: str | None = None, *, missing_ok: bool = False
) -> dict[str, Any] | None:
    """The object, or ``None`` when it does not exist and ``missing_ok``."""
    try:
        return rest.request(api, "GET", res.path(_namespace(res, namespace), name))  # type: ignore[no-any-return]
    except ApiException as err:
        if missing_ok and is_not_found(err):
            return None
        raise


def list_(
    api: ApiClient,
    res: Resource,
    namespace: str | None = None,
    *,
    all_namespaces: bool = False,
    label_selector: str | None = None,
    field_selector: str | None = None,
    page_size: int | None = 500,
) -> dict[str, Any]:
    """The whole list, following ``continue`` tokens; resourceVersion is the first page's."""
    path = res.path(None if all_namespaces else _namespace(res, namespace))
    query: dict[str, Any] = {
        "labelSelector": label_selector,
        "fieldSelector": field_selector,
        "limit": page_size,
    }
    result: dict[str, Any] = {}
    items: list[dict[str, Any]] = []
    while True:
        page = rest.request(api, "GET", path, query=query)
        if not result:
            result = page
        items.extend(page.get("items") or [])
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            break
        query["continue"] = token
    result["items"] = items
    result.setdefault("metadata", {}).pop("continue", None)
    return result


def watch(
    api: ApiClient,
    res: Resource,
    namespace: str | None = None,
    *,
    all_namespaces: bool = False,
    resource_version: str | None = None,
    label_selector: str | None = None,
    field_selector: str | None = None,
    timeout_seconds: int | None = None,
    bookmarks: bool = True,
    read_timeout: float | None = None,
) -> Generator[tuple[str, dict[str, Any]], None, None]:
    """(type, object) pairs of a watch, as API dicts, until the server ends it.

    One request, so one rate-limit token however long it runs. An ERROR event is raised as the
    ``ApiException`` it reports, so ``errors.is_gone`` tells the caller to re-list.
    """
    path = res.path(None if all_namespaces else _namespace(res, namespace))
    query = {
        "watch": "true",
        "resourceVersion": resource_version,
        "labelSelector": label_selector,
        "fieldSelector": field_selector,
        "timeoutSeconds": timeout_seconds,
        "allowWatchBookmarks": "true" if bookmarks else None,
    }
    timeout = (10.0, read_timeout) if read_timeout else None
    resp = rest.open_request(api, "GET", path, query=query, timeout=timeout)
    raw = resp.response
    drained = False
    try:
        pending = b""
        for chunk in raw.stream(amt=None, decode_content=True):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if line.strip():
                    yield _watch_event(line)
        drained = True
        if pending.strip():
            yield _watch_event(pending)
    finally:
        # a stream left half-read cannot go back to the pool: its connection is closed instead
        if drained:
            raw.release_conn()
        else:
            raw.close()


def _watch_event(line: bytes) -> tuple[str, dict[str, Any]]:
    event = json.loads(line)
    kind, obj = str(event.get("type")), dict(event.get("object") or {})
    if kind == "ERROR":
        err = ApiException(status=int(obj.get("code") or 500), reason=str(obj.get("reason") or ""))
        err.body = json.dumps(obj)
        raise err
    return kind, obj


# --- writes --------------------------------------------------------------------------------------


def create(api: ApiClient, res: Resource, obj: Body, namespace: str | None = None) -> dict[str, Any]:
    ns = _namespace(res, namespace, obj)
    return rest.request(api, "POST", res.path(ns), body=_with_type(res, obj))  # type: ignore[no-any-return]


def update(api: ApiClient, res: Resource, obj: Body, namespace: str | None = None) -> dict[str, Any]:
    """PUT the whole object; its resourceVersion makes the write conditional."""
    return _put(api, res, obj, namespace, None)


def update_status(api: ApiClient, res: Resource, obj: Body, namespace: str | None = None) -> dict[str, Any]:
    """PUT to the status subresource: only ``.status`` changes, the rest of the body is ignored, so
    the controllers send only the object's identity, resourceVersion and status
    (``K8sObject.status_body``)."""
    return _put(api, res, obj, namespace, "status")


def _put(api: ApiClient, res: Resource, obj: Body, namespace: str | None, sub: str | None) -> dict[str, Any]:
    path = res.path(_namespace(res, namespace, obj), _name(obj), sub)
    return rest.request(api, "PUT", path, body=_with_type(res, obj))  # type: ignore[no-any-return]


def patch(
    api: ApiClient,
    res: Resource,
    name: str,
    body: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    namespace: str | None = None,
    *,
    patch_type: PatchType = PatchType.MERGE,
    subresource: str | None = None,
) -> dict[str, Any]:
    """A merge, strategic-merge or JSON patch (a list of operations for JSON).

    A merge patch that includes ``metadata.resourceVersion`` is conditional, as an update is.
    """
    if (patch_type is PatchType.JSON) != isinstance(body, Sequence):
        raise TypeError("a JSON patch is a list of operations; merge patches are objects")
    path = res.path(_namespace(res, namespace), name, subresource)
    payload: Any = [dict(op) for op in body] if isinstance(body, Sequence) else dict(body)
    return rest.request(api, "PATCH", path, body=payload, content_type=patch_type.value)  # type: ignore[no-any-return]


def delete_options(
    *,
    uid: str | None = None,
    resource_version: str | None = None,
    propagation_policy: Propagation | str | None = None,
    grace_period_seconds: int | None = None,
) -> dict[str, Any]:
    opts: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
    preconditions = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v}
    if preconditions:
        opts["preconditions"] = preconditions
    if propagation_policy:
        opts["propagationPolicy"] = str(propagation_policy)
    if grace_period_seconds is not None:
        opts["gracePeriodSeconds"] = grace_period_seconds
    return opts


def delete(
    api: ApiClient,
    res: Resource,
    name: str,
    namespace: str | None = None,
    *,
    uid: str | None = None,
    resource_version: str | None = None,
    propagation_policy: Propagation | str | None = None,
    grace_period_seconds: int | None = None,
    missing_ok: bool = False,
) -> dict[str, Any] | None:
    """Delete with optional uid / resourceVersion preconditions (a mismatch is a Conflict).

    Returns what the server answers: the object while finalizers hold it, else a Status; ``None``
    when it was already gone and ``missing_ok``.
    """
    body = delete_options(
        uid=uid,
        resource_version=resource_version,
        propagation_policy=propagation_policy,
        grace_period_seconds=grace_period_seconds,
    )
    try:
        return rest.request(api, "DELETE", res.path(_namespace(res, namespace), name), body=body)  # type: ignore[no-any-return]
    except ApiException as err:
        if missing_ok and is_not_found(err):
            return None
        raise


def evict(
    api: ApiClient,
    name: str,
    namespace: str,
    *,
    grace_period_seconds: int | None = None,
    api_version: str = "policy/v1",
) -> dict[str, Any]:
    """POST an Eviction (policy/v1 unless the cluster prefers another) for a pod; a
    PodDisruptionBudget refusal is a 429."""
    body: dict[str, Any] = {
        "apiVersion": api_version,
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
    }
    if grace_period_seconds is not None:
        body["deleteOptions"] = delete_options(grace_period_seconds=grace_period_seconds)
    path = f"/api/v1/namespaces/{namespace}/pods/{name}/eviction"
    return rest.request(api, "POST", path, body=body)  # type: ignore[no-any-return]
