"""Machine preservation (MCM ≥ v0.60, "failed-machine-preservation"), the pure decisions shared by
the machine controller (which preserves and stops preserving) and the MachineSet controller (which
keeps a preserved machine, counts it, and auto-preserves Failed machines).

The annotation ``node.machine.sapcloud.io/preserve`` goes on the Node or the Machine: ``now``
preserves at once, ``when-failed`` once the machine is Failed, ``auto-preserved`` is what the
MachineSet writes on a Failed machine while ``autoPreserveFailedMachineMax`` allows, ``false`` stops
a preservation and keeps the machine from being auto-preserved. The Node's value wins; the machine
remembers the Node's last value in ``last-applied-node-preserve-value`` so that removing the Node's
annotation stops a preservation it started (upstream's ``computeEffectivePreserveValues``).

A preservation lasts until ``status.currentStatus.preserveExpiryTime`` (now +
``spec.machinePreserveTimeout``, else ``--machine-preserve-timeout``), until the annotation goes or
says ``false``, or — for ``when-failed`` and ``auto-preserved`` — until the machine is healthy
again. On expiry the annotation is removed too, so the machine is not preserved again at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Final

from mcm_tasks.api import Machine, MachinePhase, MachineSet
from mcm_tasks.api.constants import (
    NODE_PRESERVATION_STOPPED_REASON,
    NODE_PRESERVED_BY_MCM_REASON,
    NODE_PRESERVED_BY_USER_REASON,
    NODE_PRESERVED_CONDITION,
    PRESERVE_ANNOTATION,
    PRESERVE_AUTO_PRESERVED,
    PRESERVE_FALSE,
    PRESERVE_NOW,
    PRESERVE_WHEN_FAILED,
    PRESERVED_NODE_DRAIN_SUCCESSFUL,
    PRESERVED_NODE_DRAIN_UNSUCCESSFUL,
)

#: on the Machine: the Node's preserve value the machine controller last acted on
LAST_APPLIED_NODE_PRESERVE_ANNOTATION: Final = "node.machine.sapcloud.io/last-applied-node-preserve-value"
ALLOWED_VALUES: Final = frozenset(
    {PRESERVE_NOW, PRESERVE_WHEN_FAILED, PRESERVE_AUTO_PRESERVED, PRESERVE_FALSE}
)
#: the Node condition that shows a preservation, its reasons and drain messages (upstream's, verbatim)
PRESERVED_CONDITION: Final = NODE_PRESERVED_CONDITION
PRESERVED_BY_MCM_REASON: Final = NODE_PRESERVED_BY_MCM_REASON
PRESERVED_BY_USER_REASON: Final = NODE_PRESERVED_BY_USER_REASON
PRESERVATION_STOPPED_REASON: Final = NODE_PRESERVATION_STOPPED_REASON
DRAIN_SUCCESSFUL_MESSAGE: Final = PRESERVED_NODE_DRAIN_SUCCESSFUL
DRAIN_UNSUCCESSFUL_MESSAGE: Final = PRESERVED_NODE_DRAIN_UNSUCCESSFUL
_UNTIL: Final = "Machine preserved until"


def annotation_value(
    node_annotations: Mapping[str, str] | None, machine_annotations: Mapping[str, str], has_expiry: bool
) -> tuple[str, bool]:
    """Upstream's ``GetPreserveAnnotationValue``: the preserve value that applies and whether there is
    preservation work at all. A valid Node value wins; a Node without one, on a machine that acted on
    one before, means "stop" ("", True); then the machine's valid value; then a leftover expiry.
    Invalid values count as absent."""
    if node_annotations is not None:
        value = node_annotations.get(PRESERVE_ANNOTATION)
        if value in ALLOWED_VALUES:
            return str(value), True
        if LAST_APPLIED_NODE_PRESERVE_ANNOTATION in machine_annotations:
            return "", True
    value = machine_annotations.get(PRESERVE_ANNOTATION)
    if value in ALLOWED_VALUES:
        return str(value), True
    return "", has_expiry


def effective_values(
    node_value: str, last_applied_node_value: str, machine_value: str
) -> tuple[str, str, str]:
    """Upstream's ``getEffectivePreservationAnnotations`` with what
    ``updatePreserveAnnotationOnMachine`` then writes (``shouldAnnotationsBeUpdatedOnMachine``
    deciding whether it must): (effective value, the machine's preserve annotation afterwards, its
    last-applied Node value afterwards). The machine's own value applies only while the Node has
    none and never had one. Once the Node is in control (it has a value, or had one) the Node's
    value applies, even "" when it was removed, and the machine's own value is deleted: a machine
    annotated ``now`` whose Node's annotation went does not preserve again on its next pass."""
    if not node_value and not last_applied_node_value:
        return machine_value, machine_value, ""
    return node_value, "", node_value


def set_view_value(machine: Machine) -> str:
    """The effective value as far as the machine alone tells (what the MachineSet sees): the Node's
    last-applied value when the machine carries one, else the machine's annotation."""
    annotations = machine.metadata.annotations
    if LAST_APPLIED_NODE_PRESERVE_ANNOTATION in annotations:
        node_value = annotations[LAST_APPLIED_NODE_PRESERVE_ANNOTATION]
        if node_value:
            return node_value
    value = annotations.get(PRESERVE_ANNOTATION, "")
    return value if value in ALLOWED_VALUES else ""


def is_expired(machine: Machine, now: datetime) -> bool:
    """Upstream's ``IsMachinePreservationExpired``."""
    expiry = machine.status.current_status.preserve_expiry_time
    return expiry is not None and expiry <= now


def is_preserved(machine: Machine, now: datetime) -> bool:
    """Whether the MachineSet keeps the machine as preserved: its effective value asks for a
    preservation that applies to its phase, and the preservation has not expired. A machine whose
    value asks for one the machine controller has not written yet counts as preserved already, so a
    Failed machine is never deleted in the moment between its failure and its preservation."""
    value = set_view_value(machine)
    failed = machine.status.current_status.phase == MachinePhase.FAILED
    if value == PRESERVE_NOW or (value in (PRESERVE_WHEN_FAILED, PRESERVE_AUTO_PRESERVED) and failed):
        return not is_expired(machine, now)
    return False


#: the values that ask for a preservation (``false`` and "" do not)
PRESERVING_VALUES: Final = frozenset({PRESERVE_NOW, PRESERVE_WHEN_FAILED, PRESERVE_AUTO_PRESERVED})


def find_effective_preserve_value(machine: Machine, node_value: str | None) -> str:
    """Upstream's ``findEffectivePreserveValue`` (the MachineSet's reading): the Node's value wins
    once the Node has one or had one (the machine's last-applied Node value, even when the Node's
    annotation is gone); only a Node that never asked leaves the machine's own value in force.
    ``node_value`` None: there is no Node to read (no ``node`` label, the Node gone, no target
    cluster): as the machine controller reads it then (``decide``), a value a Node gave is over and
    the machine's own applies."""
    annotations = machine.metadata.annotations
    return effective_values(
        node_value or "",
        annotations.get(LAST_APPLIED_NODE_PRESERVE_ANNOTATION, ""),
        annotations.get(PRESERVE_ANNOTATION, ""),
    )[0]


def should_failed_machine_be_terminated(machine: Machine, node_value: str | None, now: datetime) -> bool:
    """Upstream's ``shouldFailedMachineBeTerminated``: whether the MachineSet replaces a Failed
    machine now. Kept while its preservation has not expired, and — before the machine controller
    has written ``preserveExpiryTime`` — while its effective value (the Node's or the machine's, see
    ``find_effective_preserve_value``) asks for one, so it is not deleted in the moment between its
    failure and its preservation.

    Deliberate difference: with an expiry still written, upstream keeps the machine until the
    machine controller clears it; here a request withdrawn (annotation removed, ``false``, an
    invalid value) ends it for the set at once, so a removed Node annotation ends the preservation
    in the same pass that sees it."""
    value = find_effective_preserve_value(machine, node_value)
    if is_expired(machine, now):
        return True
    return value not in PRESERVING_VALUES


def is_preserved_failed(machine: Machine, now: datetime) -> bool:
    return machine.status.current_status.phase == MachinePhase.FAILED and is_preserved(machine, now)


def is_auto_preserved(machine: Machine) -> bool:
    return machine.metadata.annotations.get(PRESERVE_ANNOTATION) == PRESERVE_AUTO_PRESERVED


@dataclass(frozen=True)
class AutoPreservation:
    """What upstream's ``manageAutoPreservationOfFailedMachines`` does in one MachineSet pass."""

    #: Failed machines to annotate ``auto-preserved``
    preserve: tuple[Machine, ...] = ()
    #: auto-preserved machines whose annotation goes (the maximum was lowered, or a rollout)
    unpreserve: tuple[Machine, ...] = ()


def _created(machine: Machine) -> datetime:
    return machine.metadata.creation_timestamp or datetime.min.replace(tzinfo=UTC)


def manage_auto_preservation(
    machines: Sequence[Machine],
    maximum: int | None,
    status_count: int | None,
    now: datetime,
    *,
    rolling_out: bool = False,
) -> AutoPreservation:
    """Upstream's ``manageAutoPreservationOfFailedMachines``: the room left is
    ``autoPreserveFailedMachineMax − status.autoPreserveFailedMachineCount``. With room, Failed
    machines without a preserve value are annotated ``auto-preserved``, the newest (by creation)
    first; with less than none (the maximum was lowered), the oldest auto-preserved machines lose the
    annotation (upstream's ``stopAutoPreservationForMachines``) and are replaced.

    Where upstream is silent or racy:
    - the count is the larger of the status's and the machines' own annotations, so a status not
      yet written (a pass that read the set before its last status write) cannot let a second pass
      preserve past the maximum; un-preserving takes only what the machines show above it;
    - never a machine being deleted, one whose Node asks for a preservation (its last-applied Node
      value), or one whose preservation just expired;
    - ``rolling_out`` (upstream MCM #1137): a set whose deployment is being rolled out auto-preserves
      nothing, and its auto-preserved machines lose the annotation, so a Failed machine there is
      replaced and the rollout goes on; manual preservation (``now``, ``when-failed``) still holds.
    """
    limit = 0 if rolling_out else max(maximum or 0, 0)
    annotated = [m for m in machines if is_auto_preserved(m) and not m.metadata.is_deleting]
    remaining = limit - max(status_count or 0, len(annotated))
    if remaining < 0 or len(annotated) > limit:
        excess = len(annotated) - limit
        if excess <= 0:
            return AutoPreservation()
        oldest = sorted(annotated, key=lambda m: (_created(m), m.metadata.name or ""))
        return AutoPreservation(unpreserve=tuple(oldest[:excess]))
    if remaining == 0:
        return AutoPreservation()
    candidates = [
        m
        for m in machines
        if m.status.current_status.phase == MachinePhase.FAILED
        and not m.metadata.is_deleting
        and m.metadata.annotations.get(PRESERVE_ANNOTATION, "") not in ALLOWED_VALUES
        and not set_view_value(m)
        and not is_expired(m, now)
    ]
    candidates.sort(key=lambda m: (_created(m), m.metadata.name or ""), reverse=True)
    return AutoPreservation(preserve=tuple(candidates[:remaining]))


def is_rolling_out(machine_set: MachineSet, siblings: Sequence[MachineSet]) -> bool:
    """Whether a MachineSet's deployment is being rolled out, as far as its sets tell: another set of
    the same deployment still wants or has machines (``spec.replicas`` or ``status.replicas``
    above 0). A set no deployment controls is never rolled out."""
    owner = machine_set.metadata.controller_ref()
    if owner is None:
        return False
    for other in siblings:
        if other.metadata.uid == machine_set.metadata.uid:
            continue
        ref = other.metadata.controller_ref()
        if ref is None or ref.uid != owner.uid:
            continue
        if other.spec.replicas > 0 or (other.status.replicas or 0) > 0:
            return True
    return False


class Action(StrEnum):
    NONE = "none"
    PRESERVE = "preserve"
    STOP = "stop"


#: why a preservation stops (the Preserved condition's message and the Event say it)
STOPPED_WITHDRAWN: Final = "the preserve annotation was removed"
STOPPED_FALSE: Final = "the preserve annotation is false"
STOPPED_EXPIRED: Final = "the preservation expired"
STOPPED_RECOVERED: Final = "the machine is no longer Failed"


@dataclass(frozen=True)
class Decision:
    """What upstream's ``manageMachinePreservation`` does with one machine."""

    action: Action
    #: the effective value the decision is about
    value: str = ""
    #: the machine's preserve annotation afterwards ("" removes it)
    machine_value: str = ""
    #: the machine's last-applied Node value afterwards ("" removes it)
    last_applied: str = ""
    #: remove the Node's preserve annotation (an expired preservation the Node asked for)
    clear_node_value: bool = False
    #: for a stop: why (one of the ``STOPPED_*`` texts)
    why: str = ""


def decide(machine: Machine, node_annotations: Mapping[str, str] | None, now: datetime) -> Decision:
    """The preservation step of one machine reconcile (upstream ``manageMachinePreservation``).
    ``node_annotations`` None: the machine has no Node to read. An invalid value on the Node leaves
    everything as it is (upstream logs it and returns); an invalid value on the machine counts as
    none (a preservation it started stops) and stays where it is."""
    annotations = machine.metadata.annotations
    machine_value = annotations.get(PRESERVE_ANNOTATION, "")
    last_applied = annotations.get(LAST_APPLIED_NODE_PRESERVE_ANNOTATION, "")
    node_value = (node_annotations or {}).get(PRESERVE_ANNOTATION, "")
    if node_value and node_value not in ALLOWED_VALUES:
        return Decision(Action.NONE, node_value, machine_value, last_applied)
    value, machine_after, last_after = effective_values(node_value, last_applied, machine_value)
    if value not in ALLOWED_VALUES:
        value = ""
    if not value:
        return Decision(Action.STOP, value, machine_after, last_after, why=STOPPED_WITHDRAWN)
    if value == PRESERVE_FALSE:
        return Decision(Action.STOP, value, machine_after, last_after, why=STOPPED_FALSE)
    if is_expired(machine, now):
        # expired: stop, and drop the request so that it does not preserve the machine again
        dropped = machine_after if machine_after == PRESERVE_FALSE else ""
        return Decision(
            Action.STOP, value, dropped, "", clear_node_value=bool(node_value), why=STOPPED_EXPIRED
        )
    failed = machine.status.current_status.phase == MachinePhase.FAILED
    if value in (PRESERVE_WHEN_FAILED, PRESERVE_AUTO_PRESERVED) and not failed:
        # healthy again: stop; an auto-preservation is forgotten (the set's count may have moved)
        dropped = "" if value == PRESERVE_AUTO_PRESERVED and machine_after == value else machine_after
        return Decision(Action.STOP, value, dropped, last_after, why=STOPPED_RECOVERED)
    return Decision(Action.PRESERVE, value, machine_after, last_after)


# --- the Preserved Node condition ------------------------------------------------------------------------


@dataclass(frozen=True)
class PreservedCondition:
    """The ``Preserved`` Node condition as upstream's ``computeNewNodePreservedCondition`` sets it."""

    status: str
    reason: str
    message: str


def preserved_reason(value: str) -> str:
    """``Preserved by MCM.`` for an auto-preservation, ``Preserved by user.`` for the others."""
    return PRESERVED_BY_MCM_REASON if value == PRESERVE_AUTO_PRESERVED else PRESERVED_BY_USER_REASON


def should_preserved_node_be_drained(existing: Mapping[str, Any] | None, phase: str) -> bool:
    """Upstream's ``shouldPreservedNodeBeDrained``: a Failed machine's Node is drained until the
    condition says it was ("Preserved node drained successfully."); a Running one's never."""
    if phase != MachinePhase.FAILED:
        return False
    return existing is None or DRAIN_SUCCESSFUL_MESSAGE not in str(existing.get("message") or "")


def new_preserved_condition(
    phase: str,
    expiry: str,
    value: str,
    drain_failed: bool,
    existing: Mapping[str, Any] | None,
) -> PreservedCondition | None:
    """Upstream's ``computeNewNodePreservedCondition``: the condition to write, None when the one
    there already says it. A Failed machine's condition tells the drain's outcome: True with
    "Preserved node drained successfully. Machine preserved until <expiry>.", False with "Preserved
    node could not be drained. …" when the drain failed; any other machine's is True "Machine
    preserved until <expiry>.". As upstream, a change of the reason alone is not written."""
    status = str((existing or {}).get("status") or "False")
    message = str((existing or {}).get("message") or "")
    update = existing is None
    if phase == MachinePhase.FAILED:
        if not drain_failed:
            if DRAIN_SUCCESSFUL_MESSAGE not in message:
                status, message, update = "True", f"{DRAIN_SUCCESSFUL_MESSAGE} {_UNTIL} {expiry}.", True
        elif DRAIN_UNSUCCESSFUL_MESSAGE not in message:
            status, message, update = "False", f"{DRAIN_UNSUCCESSFUL_MESSAGE} {_UNTIL} {expiry}.", True
    elif status != "True":
        status, message, update = "True", f"{_UNTIL} {expiry}.", True
    return PreservedCondition(status, preserved_reason(value), message) if update else None


def stopped_condition(why: str) -> PreservedCondition:
    """The condition a stopped preservation leaves (upstream's ``stopPreservationIfActive``: False,
    ``Preservation stopped.``); the message says why."""
    return PreservedCondition("False", PRESERVATION_STOPPED_REASON, f"Machine preservation stopped: {why}.")


def expiry_for(now: datetime, timeout_seconds: float) -> datetime:
    return now + timedelta(seconds=timeout_seconds)
