"""The disruption controller's status computation and the eviction subresource's decision.

MCM's drain evicts pods and reacts to 429s and to "misconfigured" budgets by reading PDB status,
so both halves follow kube's disruption controller and ``EvictionREST`` rule for rule. Kept pure:
the API server stores the results and does the deleting.

Deliberate simplification: kube derives ``expectedPods`` for percentages and ``maxUnavailable``
from the scale of the pods' controllers; the sandbox has no workload controllers, so it uses the
number of selected pods unless the caller passes ``expected_scale``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from .apiserver.errors import failure_status
from .selectors import SelectorError, label_selector_from_api

#: An eviction recorded in ``disruptedPods`` stops counting once the pod survives this long.
DELETION_TIMEOUT = timedelta(minutes=2)
#: Evictions are refused (403) while more than this many are unconfirmed by the controller.
MAX_DISRUPTED_POD_SIZE = 2000

DISRUPTION_ALLOWED = "DisruptionAllowed"
SUFFICIENT_PODS = "SufficientPods"
INSUFFICIENT_PODS = "InsufficientPods"
SYNC_FAILED = "SyncFailed"
EVICTION_VIOLATES_BUDGET = "Cannot evict pod as it would violate the pod's disruption budget."
MULTIPLE_BUDGETS = (
    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
)


def format_time(moment: datetime) -> str:
    """RFC 3339 with second precision, as metav1.Time serialises."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def is_pod_ready(pod: Mapping[str, Any]) -> bool:
    """kube's IsPodReady: the Ready condition is True (the eviction code's notion of healthy)."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def pdb_selects(pdb: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """Same namespace and the selector matches; a nil selector selects nothing, ``{}`` everything."""
    if _meta(pdb).get("namespace") != _meta(pod).get("namespace"):
        return False
    try:
        selector = label_selector_from_api((pdb.get("spec") or {}).get("selector"))
    except SelectorError:
        return False  # an invalid selector matches no pod, as in EvictionREST
    return selector.matches(_meta(pod).get("labels"))


def scaled_value(value: int | str, total: int) -> int:
    """IntOrString to a count, percentages of ``total`` rounded up (GetScaledValueFromIntOrPercent)."""
    if isinstance(value, bool):
        raise ValueError(f"invalid value for IntOrString: {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.endswith("%"):
        try:
            percent = int(value[:-1])
        except ValueError:
            raise ValueError(f"invalid value for IntOrString: invalid value {value!r}") from None
        return math.ceil(percent * total / 100)
    raise ValueError(f"invalid value for IntOrString: invalid type: string is not a percentage: {value!r}")


def expected_and_desired(
    spec: Mapping[str, Any], selected: int, expected_scale: int | None = None
) -> tuple[int, int]:
    """(expectedPods, desiredHealthy) as getExpectedPodCount computes them."""
    scale = selected if expected_scale is None else expected_scale
    max_unavailable = spec.get("maxUnavailable")
    min_available = spec.get("minAvailable")
    if max_unavailable is not None:
        return scale, max(0, scale - scaled_value(max_unavailable, scale))
    if isinstance(min_available, int) and not isinstance(min_available, bool):
        return selected, min_available
    if min_available is not None:
        return scale, scaled_value(min_available, scale)
    return 0, 0


def _set_condition(conditions: list[dict[str, Any]], new: dict[str, Any], now: datetime) -> None:
    """meta.SetStatusCondition: lastTransitionTime moves only when the status changes."""
    for existing in conditions:
        if existing.get("type") == new["type"]:
            if existing.get("status") != new["status"] or not existing.get("lastTransitionTime"):
                existing["lastTransitionTime"] = format_time(now)
            existing.update({k: v for k, v in new.items() if k != "lastTransitionTime"})
            return
    conditions.append({**new, "lastTransitionTime": format_time(now)})


def _disruption_condition(status: dict[str, Any], now: datetime, failure: str = "") -> None:
    if failure:
        value, reason = "False", SYNC_FAILED
    elif status.get("disruptionsAllowed", 0) > 0:
        value, reason = "True", SUFFICIENT_PODS
    else:
        value, reason = "False", INSUFFICIENT_PODS
    condition = {
        "type": DISRUPTION_ALLOWED,
        "status": value,
        "reason": reason,
        "message": failure,
        "observedGeneration": status.get("observedGeneration", 0),
    }
    conditions = status.setdefault("conditions", [])
    _set_condition(conditions, condition, now)


def _live_disruptions(
    disrupted: Mapping[str, str], pods: list[Mapping[str, Any]], now: datetime
) -> dict[str, str]:
    """Entries for pods still present, not yet terminating, evicted less than DELETION_TIMEOUT ago."""
    kept: dict[str, str] = {}
    for pod in pods:
        name = _meta(pod).get("name", "")
        if _meta(pod).get("deletionTimestamp") or name not in disrupted:
            continue
        when = parse_time(disrupted[name])
        if when is not None and when + DELETION_TIMEOUT >= now:
            kept[name] = disrupted[name]
    return kept


def _count_healthy(pods: list[Mapping[str, Any]], disrupted: Mapping[str, str]) -> int:
    return sum(
        1
        for pod in pods
        if not _meta(pod).get("deletionTimestamp")
        and _meta(pod).get("name") not in disrupted
        and is_pod_ready(pod)
    )


def pdb_status(
    pdb: Mapping[str, Any],
    pods: Iterable[Mapping[str, Any]],
    now: datetime,
    expected_scale: int | None = None,
) -> dict[str, Any]:
    """The status the disruption controller would write for ``pdb`` given all candidate pods.

    Pods in other namespaces or outside the selector are ignored, so the caller may pass every pod.
    Pods recently evicted (``disruptedPods``) are not counted healthy, which is how an eviction
    lowers ``disruptionsAllowed`` until the pod is gone.
    """
    old = copy.deepcopy(pdb.get("status") or {})
    generation = int(_meta(pdb).get("generation") or 0)
    selected = [pod for pod in pods if pdb_selects(pdb, pod)]
    status: dict[str, Any] = {"conditions": old.get("conditions") or []}
    try:
        expected, desired = expected_and_desired(pdb.get("spec") or {}, len(selected), expected_scale)
    except ValueError as err:
        # failSafe: never allow disruptions while the budget cannot be evaluated.
        status.update(
            {
                "disruptionsAllowed": 0,
                "currentHealthy": old.get("currentHealthy", 0),
                "desiredHealthy": old.get("desiredHealthy", 0),
                "expectedPods": old.get("expectedPods", 0),
                "observedGeneration": generation,
            }
        )
        _disruption_condition(status, now, failure=str(err))
        return status
    disrupted = _live_disruptions(old.get("disruptedPods") or {}, selected, now)
    healthy = _count_healthy(selected, disrupted)
    allowed = healthy - desired
    if expected <= 0 or allowed <= 0:
        allowed = 0  # a budget matching no pods yet must not permit evictions of its first pods
    status.update(
        {
            "currentHealthy": healthy,
            "desiredHealthy": desired,
            "expectedPods": expected,
            "disruptionsAllowed": allowed,
            "observedGeneration": generation,
        }
    )
    if disrupted:
        status["disruptedPods"] = disrupted
    _disruption_condition(status, now)
    return status


def record_eviction(pdb: Mapping[str, Any], pod_name: str, now: datetime) -> dict[str, Any]:
    """The PDB status after an allowed eviction: one fewer disruption, the pod marked disrupted."""
    status = copy.deepcopy(pdb.get("status") or {})
    status["disruptionsAllowed"] = int(status.get("disruptionsAllowed", 0)) - 1
    if status["disruptionsAllowed"] == 0:
        _disruption_condition(status, now)
    status.setdefault("disruptedPods", {})[pod_name] = format_time(now)
    return status


# ------------------------------------------------------------------------------------------ eviction


@dataclass(frozen=True)
class EvictionDecision:
    """What POST pods/{name}/eviction answers.

    ``decrement``: the caller must store ``record_eviction`` for ``pdb_name`` before deleting.
    ``require_resource_version``: delete with the pod's resourceVersion as a precondition (kube
    does so when it lets an unready pod go without consuming budget, in case it just turned ready).
    """

    allowed: bool
    code: int = 201
    reason: str = ""
    message: str = ""
    pdb_name: str = ""
    decrement: bool = False
    require_resource_version: bool = False
    causes: tuple[dict[str, str], ...] = ()
    retry_after_seconds: int = 0
    details: dict[str, Any] = field(default_factory=dict)

    def status(self) -> dict[str, Any]:
        """The Status object kube returns for this decision."""
        if self.allowed:
            return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
        details = dict(self.details)
        if self.causes:
            details["causes"] = [dict(cause) for cause in self.causes]
        if self.retry_after_seconds:
            details["retryAfterSeconds"] = self.retry_after_seconds
        return failure_status(self.code, self.message, self.reason, details or None)


def can_ignore_pdb(pod: Mapping[str, Any]) -> bool:
    """Terminal, pending and terminating pods are deleted without consulting any budget."""
    phase = (pod.get("status") or {}).get("phase")
    return phase in ("Succeeded", "Failed", "Pending") or bool(_meta(pod).get("deletionTimestamp"))


def _too_many_requests(name: str, message: str, retry_after: int = 0) -> EvictionDecision:
    return EvictionDecision(
        allowed=False,
        code=429,
        reason="TooManyRequests",
        message=EVICTION_VIOLATES_BUDGET,
        pdb_name=name,
        causes=({"reason": "DisruptionBudget", "message": message},),
        retry_after_seconds=retry_after,
    )


def _forbidden(name: str, why: str) -> EvictionDecision:
    return EvictionDecision(
        allowed=False,
        code=403,
        reason="Forbidden",
        message=f'poddisruptionbudget.policy "{name}" is forbidden: {why}',
        pdb_name=name,
        details={"name": name, "group": "policy", "kind": "poddisruptionbudget"},
    )


def _check_and_decrement(pdb: Mapping[str, Any]) -> EvictionDecision:
    name = _meta(pdb).get("name", "")
    status = pdb.get("status") or {}
    if int(status.get("observedGeneration") or 0) < int(_meta(pdb).get("generation") or 0):
        return _too_many_requests(
            name, f"The disruption budget {name} is still being processed by the server.", 10
        )
    allowed = int(status.get("disruptionsAllowed") or 0)
    if allowed < 0:
        return _forbidden(name, "pdb disruptions allowed is negative")
    if len(status.get("disruptedPods") or {}) > MAX_DISRUPTED_POD_SIZE:
        return _forbidden(
            name, "DisruptedPods map too big - too many evictions not confirmed by PDB controller"
        )
    if allowed == 0:
        desired, current = status.get("desiredHealthy", 0), status.get("currentHealthy", 0)
        return _too_many_requests(
            name, f"The disruption budget {name} needs {desired} healthy pods and has {current} currently"
        )
    return EvictionDecision(allowed=True, pdb_name=name, decrement=True)


def eviction_decision(pod: Mapping[str, Any], pdbs: Iterable[Mapping[str, Any]]) -> EvictionDecision:
    """Decide an eviction of ``pod`` given the PDBs of its namespace (EvictionREST.Create)."""
    if can_ignore_pdb(pod):
        terminal = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        enforce = not terminal and not _meta(pod).get("deletionTimestamp")
        return EvictionDecision(allowed=True, require_resource_version=enforce)
    matching = [pdb for pdb in pdbs if pdb_selects(pdb, pod)]
    if len(matching) > 1:
        return EvictionDecision(allowed=False, code=500, message=MULTIPLE_BUDGETS)
    if not matching:
        return EvictionDecision(allowed=True)
    pdb = matching[0]
    name = _meta(pdb).get("name", "")
    if not is_pod_ready(pod):
        policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") or "IfHealthyBudget"
        status = pdb.get("status") or {}
        current, desired = int(status.get("currentHealthy") or 0), int(status.get("desiredHealthy") or 0)
        if policy == "AlwaysAllow" or (current >= desired and desired > 0):
            return EvictionDecision(allowed=True, pdb_name=name, require_resource_version=True)
    return _check_and_decrement(pdb)
