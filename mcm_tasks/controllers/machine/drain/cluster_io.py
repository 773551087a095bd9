"""The drain's edges: what it reads from the target cluster (the informers' mirror once it holds a
complete list of the kind, else the API server) and what it writes there (node condition, cordon,
evictions, deletions), each answer turned into the pure modules' vocabulary.

Everything read here may lag the API server by the informer's delay. The drain tolerates it: a pod
that is already gone is answered 404 and counted done, a detach seen late only delays the next step.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final

import urllib3
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from mcm_tasks import kinds
from mcm_tasks.api import Obj, format_time
from mcm_tasks.api.constants import (
    NODE_FINALIZER,
    NODE_MACHINE_NAME_LABEL_KEY,
    NODE_TERMINATING_CONDITION,
    NODE_TERMINATING_REASON_SCALE_DOWN,
    NODE_TERMINATING_REASON_UNHEALTHY,
)
from mcm_tasks.cache import Listers, get_listers
from mcm_tasks.controllers.common.context_io import list_objects, mirror_has
from mcm_tasks.controllers.machine.drain import select as ds
from mcm_tasks.controllers.machine.drain.pods import Answer, Removal, Reply
from mcm_tasks.controllers.machine.drain.volumes import shared_pv_names
from mcm_tasks.kube import ops, rest
from mcm_tasks.kube.errors import describe, is_conflict, is_not_found, is_too_many_requests
from mcm_tasks.kube.retry import Backoff, retry_on_error
from providers.driver import Driver, GetVolumeIDsRequest
from providers.errors import MachineError

log = logging.getLogger(__name__)

#: the strategic merge patch directive that removes entries from a list of scalars
DELETE_FROM_PRIMITIVE_LIST: Final = "$deleteFromPrimitiveList"

TERMINATION_MESSAGES: Final = {
    NODE_TERMINATING_REASON_UNHEALTHY: "Machine Controller is terminating failed machine",
    NODE_TERMINATING_REASON_SCALE_DOWN: "Machine Controller is scaling down machine",
}


def _listers() -> Listers:
    return get_listers()


# --- reads ---------------------------------------------------------------------------------------------


def pods_on_node(api: ApiClient, node_name: str) -> list[Obj]:
    lister = _listers().pods
    return list_objects(
        lister,
        api,
        kinds.POD.resource,
        mirror=lambda: lister.on_node(node_name),
        all_namespaces=True,
        field_selector=f"spec.nodeName={node_name}",
    )


def node_for_machine(api: ApiClient, machine_name: str) -> str:
    """The name of the Node labelled ``node.gardener.cloud/machine-name=<machine>``, "" when none."""
    lister = _listers().nodes
    selector = f"{NODE_MACHINE_NAME_LABEL_KEY}={machine_name}"
    nodes = list_objects(
        lister,
        api,
        kinds.NODE.resource,
        mirror=lambda: lister.for_machine(machine_name),
        label_selector=selector,
    )
    return str(nodes[0]["metadata"]["name"]) if nodes else ""


#: upstream's ``EvictionSubresource`` and ``EvictionKind``, as discovery lists them under ``/api/v1``
EVICTION_SUBRESOURCE: Final = "pods/eviction"
EVICTION_KIND: Final = "Eviction"
#: seconds a process trusts a cluster's discovery answer: a drain step runs every few seconds, and a
#: cluster gains or loses the eviction API only with an upgrade
EVICTION_SUPPORT_TTL: Final = 300.0
#: per client (a cluster's client lives as long as its configuration; another server is another client)
_eviction_support: weakref.WeakKeyDictionary[ApiClient, tuple[float, str]] = weakref.WeakKeyDictionary()


def support_eviction(api: ApiClient) -> str:
    """The policy group version to evict pods with ("policy/v1", or "policy/v1beta1" on an old
    cluster), "" when the cluster serves no eviction subresource (the drain then deletes pods). Read
    from discovery as upstream does (the ``policy`` group's preferred version, and ``pods/eviction``
    of kind Eviction among the core resources), and kept per client for ``EVICTION_SUPPORT_TTL``.

    Upstream: ``SupportEviction``.
    """
    host = str(api.configuration.host)
    now = time.monotonic()
    cached = _eviction_support.get(api)
    if cached is not None and now - cached[0] < EVICTION_SUPPORT_TTL:
        return cached[1]
    groups = (rest.request(api, "GET", "/apis") or {}).get("groups") or ()
    policy = next((g for g in groups if g.get("name") == "policy"), None)
    version = ""
    if policy is not None:
        preferred = str((policy.get("preferredVersion") or {}).get("groupVersion") or "")
        core = (rest.request(api, "GET", "/api/v1") or {}).get("resources") or ()
        if any(r.get("name") == EVICTION_SUBRESOURCE and r.get("kind") == EVICTION_KIND for r in core):
            version = preferred
    if not version:
        log.warning("the cluster at %s serves no pod eviction: drains delete pods instead", host)
    _eviction_support[api] = (now, version)
    return version


def pdbs_in(api: ApiClient, namespace: str) -> list[Obj]:
    lister = _listers().pod_disruption_budgets
    return list_objects(
        lister,
        api,
        kinds.POD_DISRUPTION_BUDGET.resource,
        namespace,
        mirror=lambda: lister.in_namespace(namespace),
    )


def volume_attachments(api: ApiClient, node_name: str, pv_names: Iterable[str]) -> list[Obj]:
    """Those on the node and those of the given PVs (wherever they are attached)."""
    lister = _listers().volume_attachments

    def from_mirror() -> list[Obj]:
        found = {str(va["metadata"]["name"]): va for va in lister.on_node(node_name)}
        for pv in set(pv_names):
            found.update({str(va["metadata"]["name"]): va for va in lister.for_volume(pv)})
        return list(found.values())

    return list_objects(lister, api, kinds.VOLUME_ATTACHMENT.resource, mirror=from_mirror)


#: upstream's ``GetPvDetailsMaxRetries``: tries of a PVC or PV lookup before its volume is skipped
GET_PV_DETAILS_MAX_RETRIES: Final = 3
#: between the tries; upstream sleeps ``GetPvDetailsRetryInterval`` (5 s), a worker does not wait that
#: long: a lookup that still fails skips the volume, which the drain's detach barrier still covers
GET_PV_DETAILS_BACKOFF: Final = Backoff(duration=0.05, factor=4.0, jitter=0.1)


def _pv_details_transient(err: BaseException) -> bool:
    """What a PVC or PV lookup retries: the API server's errors and the network's (a NotFound is
    already an answer, None)."""
    return isinstance(err, ApiException | urllib3.exceptions.HTTPError | OSError)


def _pv_details(what: str, read: Callable[[], Obj | None]) -> Obj | None:
    """``read`` with upstream's retries; None (the volume skipped, with a warning) when every try
    failed, as upstream's ``getPersistentVolumeNamesForPod`` and ``getVolumeIDFromDriver`` skip it."""
    try:
        return retry_on_error(
            read, _pv_details_transient, attempts=GET_PV_DETAILS_MAX_RETRIES, backoff=GET_PV_DETAILS_BACKOFF
        )
    except Exception as err:
        if not _pv_details_transient(err):
            raise
        shown = describe(err) if isinstance(err, ApiException) else str(err)
        log.warning(
            "error getting %s after %d tries, skipping its volume: %s",
            what,
            GET_PV_DETAILS_MAX_RETRIES,
            shown,
        )
        return None


def _claim(api: ApiClient, namespace: str, name: str) -> Obj | None:
    lister = _listers().persistent_volume_claims
    if mirror_has(lister):
        return lister.get(name, namespace)
    return _pv_details(
        f"PVC {namespace}/{name}",
        lambda: ops.get(api, kinds.PERSISTENT_VOLUME_CLAIM.resource, name, namespace, missing_ok=True),
    )


def _volume(api: ApiClient, name: str) -> Obj | None:
    lister = _listers().persistent_volumes
    if mirror_has(lister):
        return lister.get(name)
    return _pv_details(
        f"PV {name}", lambda: ops.get(api, kinds.PERSISTENT_VOLUME.resource, name, missing_ok=True)
    )


def pv_names_of(api: ApiClient, pod: Mapping[str, Any]) -> list[str]:
    """The PVs bound to the pod's claims; an unknown or unbound claim is skipped (upstream)."""
    namespace = str((pod.get("metadata") or {}).get("namespace") or "")
    out = []
    for claim_name in ds.claim_names(pod):
        claim = _claim(api, namespace, claim_name)
        volume = str(((claim or {}).get("spec") or {}).get("volumeName") or "")
        if volume:
            out.append(volume)
    return out


def volume_ids_of(
    api: ApiClient, driver: Driver | None, pv_names: Sequence[str]
) -> tuple[list[str], list[str]]:
    """(PV names, volume IDs) of the PVs the Driver knows; others (another CSI driver, NFS, …) are not
    tracked, and a Driver error skips that PV, as upstream.

    Upstream: ``getVolIDsFromDriver``.
    """
    names: list[str] = []
    ids: list[str] = []
    if driver is None:
        return names, ids
    for name in pv_names:
        pv = _volume(api, name)
        if pv is None:
            continue
        try:
            found = driver.get_volume_ids(GetVolumeIDsRequest(pv_specs=[dict(pv.get("spec") or {})]))
        except MachineError as err:
            log.warning("GetVolumeIDs failed for PV %s, not tracking it: %s", name, err)
            continue
        if found.volume_ids:
            names.append(name)
            ids.append(found.volume_ids[0])
    return names, ids


def pv_names_by_pod(api: ApiClient, pods: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Upstream: ``doAccountingOfPvs``, ``getPVList``."""
    return {ds.pod_key(p): pv_names_of(api, p) for p in pods if ds.has_volumes(p)}


def unshared(names_by_pod: Mapping[str, list[str]]) -> dict[str, list[str]]:
    shared = shared_pv_names(names_by_pod)
    return {k: [n for n in names if n not in shared] for k, names in names_by_pod.items()}


# --- writes --------------------------------------------------------------------------------------------


def terminating_condition(node: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for condition in (node.get("status") or {}).get("conditions") or ():
        if condition.get("type") == NODE_TERMINATING_CONDITION:
            return dict(condition)
    return None


def set_terminating(api: ApiClient, node: Mapping[str, Any], reason: str, now: datetime) -> Obj | None:
    """MCM's ``UpdateNodeTerminationCondition``: Terminating=True on the node, keeping the reason of one
    already there. Returns the Node as the API server answered the write, None when it wrote nothing;
    a Node that is gone is not an error."""
    found = terminating_condition(node)
    if found is not None and found.get("status") == "True":
        return None
    stamp = format_time(now)
    condition = {
        "type": NODE_TERMINATING_CONDITION,
        "status": "True",
        "reason": reason,
        "message": TERMINATION_MESSAGES.get(reason, ""),
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": stamp,
    }
    name = str(node["metadata"]["name"])
    try:
        return ops.patch(
            api,
            kinds.NODE.resource,
            name,
            {"status": {"conditions": [condition]}},
            patch_type=ops.PatchType.STRATEGIC,
            subresource="status",
        )
    except ApiException as err:
        if is_not_found(err):
            return None
        raise


def cordon(api: ApiClient, node: Mapping[str, Any]) -> Obj | None:
    """``spec.unschedulable=true``; returns the Node as the API server answered the write, None when it
    wrote nothing (a Node that is gone is no error)."""
    if (node.get("spec") or {}).get("unschedulable") is True:
        return None
    try:
        return ops.patch(
            api, kinds.NODE.resource, str(node["metadata"]["name"]), {"spec": {"unschedulable": True}}
        )
    except ApiException as err:
        if is_not_found(err):
            return None
        raise


def has_node_finalizer(node: Mapping[str, Any] | None) -> bool:
    return NODE_FINALIZER in (((node or {}).get("metadata") or {}).get("finalizers") or ())


def remove_node_finalizer(api: ApiClient, name: str, annotations: Mapping[str, str] | None = None) -> None:
    """Take the MCM finalizer off the Node by name: a strategic merge patch that deletes just that
    entry of ``metadata.finalizers`` needs neither a fresh read nor a resourceVersion, and leaves any
    other finalizer where it is (``annotations`` go in the same patch). A Node that is gone is no
    error."""
    meta: dict[str, Any] = {f"{DELETE_FROM_PRIMITIVE_LIST}/finalizers": [NODE_FINALIZER]}
    if annotations:
        meta["annotations"] = dict(annotations)
    body = {"metadata": meta}
    try:
        ops.patch(api, kinds.NODE.resource, name, body, patch_type=ops.PatchType.STRATEGIC)
    except ApiException as err:
        if not is_not_found(err):
            raise


def remove_pod(
    api: ApiClient, pod: Mapping[str, Any], removal: Removal, eviction_version: str = "policy/v1"
) -> Reply:
    """Evict (an Eviction of ``eviction_version``, from ``support_eviction``), or delete with no grace
    and the pod's uid as precondition (never a namesake).

    Upstream: ``evictPod``, ``deletePod``.
    """
    meta = pod.get("metadata") or {}
    name, namespace, uid = str(meta.get("name")), str(meta.get("namespace")), ds.pod_uid(pod)
    try:
        if removal is Removal.EVICT:
            ops.evict(api, name, namespace, api_version=eviction_version)
        else:
            ops.delete(api, kinds.POD.resource, name, namespace, uid=uid or None, grace_period_seconds=0)
    except ApiException as err:
        if is_not_found(err) or (removal is Removal.DELETE and is_conflict(err)):
            return Reply(Answer.NOT_FOUND)
        if is_too_many_requests(err):
            return Reply(Answer.TOO_MANY_REQUESTS, describe(err))
        return Reply(Answer.ERROR, describe(err))
    return Reply(Answer.OK)
