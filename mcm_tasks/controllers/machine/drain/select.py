"""Which pods a drain removes, and in which order: pure functions over pod API dicts.

The rules are MCM's filters with its flags fixed as the machine controller fixes them
(``IgnoreDaemonsets``, ``DeleteLocalData`` and ``IgnorePodsWithoutControllers`` all true):

- only pods bound to the node (``spec.nodeName``);
- mirror pods are skipped: the kubelet owns them, the API server cannot delete them for real;
- DaemonSet pods are skipped: their controller would put them right back (and tolerates the cordon);
- pods with ``emptyDir`` volumes are removed anyway: that data lives and dies with the node;
- unmanaged pods (no controller) and finished pods (Succeeded, Failed) are removed too.

Pods that mount a PersistentVolumeClaim are drained one at a time, highest ``spec.priority`` first,
so that a volume is detached before the next workload moves; ``spec.priority`` is only set when a
priority admission plugin ran, so a missing one counts as 0 (the default priority) instead of
failing the drain (upstream dereferences it unchecked).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

Pod = Mapping[str, Any]

#: set by the kubelet on the API server's copy of a static pod
MIRROR_POD_ANNOTATION: Final = "kubernetes.io/config.mirror"
FINISHED_PHASES: Final = frozenset({"Succeeded", "Failed"})


def _meta(pod: Pod) -> Mapping[str, Any]:
    return pod.get("metadata") or {}


def _spec(pod: Pod) -> Mapping[str, Any]:
    return pod.get("spec") or {}


def pod_key(pod: Pod) -> str:
    meta = _meta(pod)
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


def pod_uid(pod: Pod) -> str:
    return str(_meta(pod).get("uid") or "")


def node_name_of(pod: Pod) -> str:
    return str(_spec(pod).get("nodeName") or "")


def controller_of(pod: Pod) -> Mapping[str, Any] | None:
    """The ownerReference with ``controller: true`` (``metav1.GetControllerOf``)."""
    return next((ref for ref in _meta(pod).get("ownerReferences") or () if ref.get("controller")), None)


def is_mirror_pod(pod: Pod) -> bool:
    return MIRROR_POD_ANNOTATION in (_meta(pod).get("annotations") or {})


def is_daemonset_pod(pod: Pod) -> bool:
    ref = controller_of(pod)
    return ref is not None and ref.get("kind") == "DaemonSet"


def is_finished(pod: Pod) -> bool:
    return (pod.get("status") or {}).get("phase") in FINISHED_PHASES


def is_terminating(pod: Pod) -> bool:
    return bool(_meta(pod).get("deletionTimestamp"))


def has_local_storage(pod: Pod) -> bool:
    return any(v.get("emptyDir") is not None for v in _spec(pod).get("volumes") or ())


def claim_names(pod: Pod) -> list[str]:
    """Names of the PersistentVolumeClaims the pod mounts, in volume order."""
    out: list[str] = []
    for volume in _spec(pod).get("volumes") or ():
        claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
        if claim and claim not in out:
            out.append(str(claim))
    return out


def has_volumes(pod: Pod) -> bool:
    """Whether the pod goes the serial way (it mounts a claim), MCM's ``filterPodsWithPv``."""
    return bool(claim_names(pod))


def priority_of(pod: Pod) -> int:
    """``spec.priority``; absent (no priority admission) or malformed counts as 0, the default."""
    value = _spec(pod).get("priority")
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return 0
    try:
        return int(value)
    except ValueError:
        return 0


def grace_period_of(pod: Pod) -> float:
    """``spec.terminationGracePeriodSeconds``, 0 when unset (as MCM's ``getTerminationGracePeriod``)."""
    value = _spec(pod).get("terminationGracePeriodSeconds")
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def skip_reason(pod: Pod) -> str:
    """Why a pod on the node stays where it is ("" when the drain removes it)."""
    if is_mirror_pod(pod):
        return "mirror pod"
    if is_daemonset_pod(pod):
        return "DaemonSet pod"
    return ""


def pods_for_deletion(pods: Iterable[Pod], node_name: str) -> list[Pod]:
    """The pods the drain removes, in a stable order (by key).

    Upstream: ``getPodsForDeletion``.
    """
    chosen = [p for p in pods if node_name and node_name_of(p) == node_name and not skip_reason(p)]
    return sorted(chosen, key=pod_key)


def split_by_volumes(pods: Iterable[Pod]) -> tuple[list[Pod], list[Pod]]:
    """(pods with claims, pods without), each keeping the given order."""
    with_pv: list[Pod] = []
    without_pv: list[Pod] = []
    for pod in pods:
        (with_pv if has_volumes(pod) else without_pv).append(pod)
    return with_pv, without_pv


def by_priority(pods: Iterable[Pod]) -> list[Pod]:
    """Highest priority first; equal priorities by key, so every reconcile picks the same pod."""
    return sorted(pods, key=lambda p: (-priority_of(p), pod_key(p)))
