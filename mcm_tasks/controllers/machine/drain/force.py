"""How hard a deletion drains: the effective timeout and eviction retries, and when the drain is forced.

A drain is *forced* (pods deleted at once with no grace, nothing waited for, VolumeAttachments removed
afterwards, and a failure no longer blocks the VM's deletion) when:

- the Machine carries the ``force-deletion`` label with any value Go's ``strconv.ParseBool`` reads as
  true (``1``, ``t``, ``T``, ``true``, ``TRUE``, ``True``) — MCM's docs promise a boolean, so every
  spelling of one counts, while upstream's ``force-drain`` wants exactly "True";
- the deletion is older than the drain timeout (``deletionTimestamp`` + timeout; time a pre-drain
  hook held the machine does not count: ``deleting.drain_clock_start``);
- the node's Ready condition has not been True for longer than ``force_drain_unhealthy_after``;
- its ReadonlyFilesystem condition has not been False for longer than that.

The first two also shorten the drain to ``force_drain_timeout`` with one eviction attempt, as upstream.

A drain that failed last time is *not* a reason (the seeds' third one): upstream dropped it in #373,
since a drain refused by a PodDisruptionBudget would otherwise delete the budget's pods on the next
pass; its ``drainNode`` keeps only the comment.

The node conditions are read from the Node when it is known, else from the Machine's copy. Upstream
reads only the copy, which the health check stops refreshing once a machine is being deleted, so a
node that breaks during a long drain would never force it; the Node is the fresher truth.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from mcm_tasks.api import Machine
from mcm_tasks.api.constants import FORCE_DELETION_LABEL_KEY
from mcm_tasks.controllers.machine.deleting import drain_clock_start
from mcm_tasks.settings import Settings

#: what ``strconv.ParseBool`` accepts as true
TRUE_VALUES: Final = frozenset({"1", "t", "T", "true", "TRUE", "True"})
READY: Final = "Ready"
READONLY_FILESYSTEM: Final = "ReadonlyFilesystem"


def is_true(value: str | None) -> bool:
    return value is not None and value in TRUE_VALUES


@dataclass(frozen=True)
class DrainParams:
    #: seconds the drain may take (min(grace, timeout) bounds each pod's termination wait)
    timeout: float
    #: refused evictions of a pod before it is deleted instead
    max_evict_retries: int
    #: why the drain is forced ("" when it is not)
    force_reason: str = ""

    @property
    def force(self) -> bool:
        return bool(self.force_reason)


def effective_drain_timeout(machine: Machine, settings: Settings) -> float:
    """The machine's ``drainTimeout`` when set (and readable), else ``--machine-drain-timeout``."""
    try:
        own = machine.spec.drain_timeout_seconds
    except ValueError:
        own = None
    return own if own is not None else settings.machine_drain_timeout


def effective_max_evict_retries(machine: Machine, settings: Settings, timeout: float) -> int:
    """min(machine's ``maxEvictRetries`` else the flag, timeout / retry interval), as upstream: retrying
    longer than the drain may take is pointless."""
    own = machine.spec.max_evict_retries
    flag = own if own is not None else settings.machine_max_evict_retries
    interval = settings.pod_eviction_retry_interval
    by_timeout = int(timeout / interval) if interval > 0 else flag
    return max(0, min(flag, by_timeout))


def _conditions(machine: Machine, node: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    if node is not None:
        return list((node.get("status") or {}).get("conditions") or [])
    return [c.model_dump(by_alias=True) for c in machine.status.conditions]


def parse_time(raw: Any) -> datetime | None:
    """An API timestamp (RFC 3339 text or a datetime) as an aware datetime; None when unreadable."""
    if isinstance(raw, str):
        try:
            raw = datetime.fromisoformat(raw[:-1] + "+00:00" if raw.endswith("Z") else raw)
        except ValueError:
            return None
    if not isinstance(raw, datetime):
        return None
    return raw if raw.tzinfo else raw.replace(tzinfo=UTC)


def _transition(condition: Mapping[str, Any]) -> datetime | None:
    return parse_time(condition.get("lastTransitionTime"))


def _bad_since(conditions: Sequence[Mapping[str, Any]], type_: str, good: str) -> datetime | None:
    """When the condition left its good status, None when it is good or absent (or has no time)."""
    found = next((c for c in conditions if c.get("type") == type_), None)
    if found is None or found.get("status") == good:
        return None
    return _transition(found)


def force_reason(
    machine: Machine, node: Mapping[str, Any] | None, now: datetime, settings: Settings
) -> tuple[str, bool]:
    """(why the drain is forced or "", whether that also shortens it)."""
    if is_true(machine.metadata.labels.get(FORCE_DELETION_LABEL_KEY)):
        return f'label "{FORCE_DELETION_LABEL_KEY}" is set', True
    deleted = drain_clock_start(machine, now)
    timeout = effective_drain_timeout(machine, settings)
    if deleted is not None and (now - deleted).total_seconds() > timeout:
        return f"drain timeout of {timeout:g}s exceeded", True
    conditions = _conditions(machine, node)
    after = settings.force_drain_unhealthy_after
    for type_, good, what in (
        (READY, "True", "NotReady"),
        (READONLY_FILESYSTEM, "False", READONLY_FILESYSTEM),
    ):
        since = _bad_since(conditions, type_, good)
        if since is not None and (now - since).total_seconds() > after:
            return f"node {what} for over {after:g}s", False
    return "", False


def force_due_in(
    machine: Machine, node: Mapping[str, Any] | None, now: datetime, settings: Settings
) -> float | None:
    """Seconds until a condition above would force the drain (None: nothing pending), so a waiting
    drain comes back in time instead of at its next poll."""
    candidates: list[float] = []
    deleted = drain_clock_start(machine, now)
    if deleted is not None:
        candidates.append(effective_drain_timeout(machine, settings) - (now - deleted).total_seconds())
    conditions = _conditions(machine, node)
    for type_, good in ((READY, "True"), (READONLY_FILESYSTEM, "False")):
        since = _bad_since(conditions, type_, good)
        if since is not None:
            candidates.append(settings.force_drain_unhealthy_after - (now - since).total_seconds())
    due = [c for c in candidates if c >= 0]
    return min(due) if due else None


def drain_params(
    machine: Machine, node: Mapping[str, Any] | None, now: datetime, settings: Settings
) -> DrainParams:
    timeout = effective_drain_timeout(machine, settings)
    retries = effective_max_evict_retries(machine, settings, timeout)
    reason, shorten = force_reason(machine, node, now, settings)
    if shorten:
        return DrainParams(settings.force_drain_timeout, 1, reason)
    return DrainParams(timeout, retries, reason)
