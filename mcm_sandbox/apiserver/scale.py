"""The ``/scale`` subresource: an autoscaling/v1 Scale read from and written to a resource's replica
paths (a CRD's ``subresources.scale``, or ``spec.replicas``/``status.replicas`` for built-ins)."""

from __future__ import annotations

from typing import Any

from mcm_sandbox.apiserver import errors, objects
from mcm_sandbox.apiserver.handlers import Api
from mcm_sandbox.apiserver.resources import ResourceType
from mcm_sandbox.apiserver.store import Entry


def _selector_string(selector: dict[str, Any]) -> str:
    from mcm_sandbox import selectors

    try:
        return str(selectors.label_selector_from_api(selector))
    except selectors.SelectorError:
        return ""


def scale_of(rt: ResourceType, entry: Entry) -> dict[str, Any]:
    if rt.scale is None:
        raise errors.not_found_path()
    meta = entry.meta
    status: dict[str, Any] = {"replicas": objects.get_path(entry.obj, rt.scale.status_replicas) or 0}
    if rt.scale.label_selector:
        selector = objects.get_path(entry.obj, rt.scale.label_selector)
        if isinstance(selector, dict):  # built-ins keep a LabelSelector; Scale carries its string form
            selector = _selector_string(selector)
        if selector:
            status["selector"] = selector
    scale_meta = {
        k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp") if k in meta
    }
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": scale_meta,
        "spec": {"replicas": objects.get_path(entry.obj, rt.scale.spec_replicas) or 0},
        "status": status,
    }


def write_scale(
    api: Api, rt: ResourceType, old: Entry, scale: Any, dry_run: bool = False, manager: str = ""
) -> dict[str, Any]:
    if not isinstance(scale, dict) or not isinstance(scale.get("spec", {}), dict):
        raise errors.bad_request("the body of the request must be an autoscaling/v1 Scale")
    assert rt.scale is not None
    wanted = (scale.get("metadata") or {}).get("resourceVersion")
    if wanted and wanted != old.meta["resourceVersion"]:
        raise errors.conflict(rt.plural, rt.group, old.meta["name"], errors.STALE)
    replicas = (scale.get("spec") or {}).get("replicas")
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        raise errors.invalid(
            "Scale",
            "autoscaling",
            old.meta["name"],
            [
                errors.cause(
                    "spec.replicas", f"Invalid value: {replicas!r}: must be greater than or equal to 0"
                )
            ],
        )
    new = old.clone()
    objects.set_path(new, rt.scale.spec_replicas, replicas)
    return scale_of(rt, api.write_update(rt, old, new, None, dry_run, manager=manager, subresource="scale"))
