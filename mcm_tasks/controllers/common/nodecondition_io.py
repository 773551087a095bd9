"""Node conditions MCM writes itself (``Preserved``, ``InPlaceUpdate``): one shape, one write."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from mcm_tasks import kinds
from mcm_tasks.api import format_time
from mcm_tasks.kube import ops
from mcm_tasks.kube.errors import is_not_found


def condition(type_: str, status: str, reason: str, message: str, now: datetime) -> dict[str, Any]:
    stamp = format_time(now)
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": stamp,
    }


def write(
    api: ApiClient, node_name: str, cond: dict[str, Any], *, resource_version: str | None = None
) -> None:
    """Strategic merge on the status: the kubelet's own conditions stay as they are. A Node that is
    gone is no error. With ``resource_version`` the write is a compare-and-swap (a Conflict when the
    Node changed since it was read): for a condition decided from what the Node said, as upstream's
    ``UpdateStatus`` of the lister's copy."""
    body: dict[str, Any] = {"status": {"conditions": [cond]}}
    if resource_version:
        body["metadata"] = {"resourceVersion": resource_version}
    try:
        ops.patch(api, kinds.NODE.resource, node_name, body,
                  patch_type=ops.PatchType.STRATEGIC, subresource="status")  # fmt: skip
    except ApiException as err:
        if not is_not_found(err):
            raise
