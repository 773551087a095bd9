"""What a deleting machine shows and what holds it: lifecycle hooks and the ``Deleting`` condition.

**Hooks** (Cluster API's ``pre-drain.delete.hook.machine.cluster.x-k8s.io/`` and
``pre-terminate.…``, under our own ``mcm-tasks.io``): an annotation on the Machine whose key begins
with ``PRE_DRAIN_HOOK_PREFIX`` holds the flow before the node is cordoned and drained; one beginning
with ``PRE_TERMINATE_HOOK_PREFIX`` holds it before the VM is deleted (after the drain and the volume
detach). The rest of the key names the hook's owner; the value is free text. The controller that set
a hook removes it when it is done; the annotation's change wakes the machine (``watches``), so the
flow resumes at once.

**The ``Deleting`` condition**: one Node-condition-shaped entry in ``status.conditions`` while the
machine is deleted, derived in one place (``deleting_condition``) from the description the flow writes:
the description is the flow's state, so the condition can never disagree with it. Its reason names the
step (``REASON_OF_STEP``) or the hook it waits for; its ``lastTransitionTime`` changes only with the
reason, so it says since when the machine waits there (how long a hook has held it, how long a
step has been tried: ``waiting_since``). A later step gets its own reason by a row of ``REASON_OF_STEP``.

**Per-deployment timeouts** (Cluster API's ``nodeVolumeDetachTimeout`` and ``nodeDeletionTimeout``):
the annotations ``mcm-tasks.io/node-volume-detach-timeout`` and ``mcm-tasks.io/node-deletion-timeout``
on a machine's MachineDeployment (or MachineSet) bound how long the flow waits for the node's volumes
to detach (the drain's per-pod wait, else ``--machine-pv-detach-timeout``, and the "Delete Volume
Attachments" step, else forever) and how long it retries a failing Node deletion (else forever, as
upstream). Each runs from the start of its step (``waiting_since``): Cluster API counts the node
deletion's from the machine's deletion, which a long drain would use up before the Node is tried.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Final

from mcm_tasks.api import Machine, MachineStatus, NodeCondition
from mcm_tasks.api.constants import (
    MACHINE_DELETING_CONDITION,
    PRE_DRAIN_HOOK_PREFIX,
    PRE_DRAIN_HOOKS_RELEASED_ANNOTATION,
    PRE_TERMINATE_HOOK_PREFIX,
)
from mcm_tasks.controllers.machine.deletion_steps import Step, step_of_description
from mcm_tasks.controllers.machine.descriptions import (
    INITIATE_DRAIN,
    INITIATE_VM_DELETION,
    WAITING_FOR_PRE_DRAIN_HOOK,
    WAITING_FOR_PRE_TERMINATE_HOOK,
)
from mcm_tasks.durations import parse_duration

WAITING_FOR_PRE_DRAIN_HOOK_REASON: Final = "WaitingForPreDrainHook"
WAITING_FOR_PRE_TERMINATE_HOOK_REASON: Final = "WaitingForPreTerminateHook"
DRAINING_REASON: Final = "DrainingNode"
#: Cluster API's reason (and issue 30's contract): the flow waits for the node's volumes to detach
DETACHING_VOLUMES_REASON: Final = "WaitingForVolumeDetach"
DELETING_NODE_REASON: Final = "DeletingNode"

#: the reason of each step the flow stands at (a wait of its own, a hook, is told by its description)
REASON_OF_STEP: Final[dict[Step, str]] = {
    Step.SET_TERMINATING: "Terminating",
    Step.GET_VM_STATUS: "GettingVMStatus",
    Step.DRAIN: DRAINING_REASON,
    Step.DELETE_VOLUME_ATTACHMENTS: DETACHING_VOLUMES_REASON,
    Step.DELETE_VM: "DeletingVM",
    Step.DELETE_NODE: DELETING_NODE_REASON,
    Step.REMOVE_FINALIZER: "RemovingFinalizer",
}

#: hook names listed in a description or an Event; more are counted
_NAMES_SHOWN: Final = 5


# --- hooks ---------------------------------------------------------------------------------------------


def hooks(annotations: Mapping[str, str], prefix: str) -> list[str]:
    """The owners of the hooks with ``prefix`` on an object (the key after the prefix), sorted."""
    return sorted(key[len(prefix) :] or key for key in annotations if key.startswith(prefix))


def pre_drain_hooks(machine: Machine) -> list[str]:
    return hooks(machine.metadata.annotations, PRE_DRAIN_HOOK_PREFIX)


def pre_terminate_hooks(machine: Machine) -> list[str]:
    return hooks(machine.metadata.annotations, PRE_TERMINATE_HOOK_PREFIX)


def named(names: list[str]) -> str:
    shown = ", ".join(names[:_NAMES_SHOWN])
    more = len(names) - _NAMES_SHOWN
    return shown + (f" and {more} more" if more > 0 else "")


def pre_drain_wait(names: list[str]) -> str:
    """The description of a flow held before its drain; it stays at the drain step."""
    return f"{WAITING_FOR_PRE_DRAIN_HOOK} {named(names)}. {INITIATE_DRAIN}"


def pre_terminate_wait(names: list[str]) -> str:
    """The description of a flow held before its VM's deletion; it stays at that step."""
    return f"{WAITING_FOR_PRE_TERMINATE_HOOK} {named(names)}. {INITIATE_VM_DELETION}"


# --- the Deleting condition ----------------------------------------------------------------------------


def deleting_reason(description: str) -> str:
    """The ``Deleting`` condition's reason for the flow standing at ``description``."""
    if description.startswith(WAITING_FOR_PRE_DRAIN_HOOK):
        return WAITING_FOR_PRE_DRAIN_HOOK_REASON
    if description.startswith(WAITING_FOR_PRE_TERMINATE_HOOK):
        return WAITING_FOR_PRE_TERMINATE_HOOK_REASON
    return REASON_OF_STEP[step_of_description(description)]


def deleting_condition(status: MachineStatus) -> NodeCondition | None:
    """The machine's ``Deleting`` condition, None when it has none."""
    return next((c for c in status.conditions if c.type == MACHINE_DELETING_CONDITION), None)


def deleting_message(description: str, detail: str = "") -> str:
    """The condition's message: the flow's description, and what holds the step when the step knows
    (a drain: the pods whose eviction is refused and the budgets that refuse them)."""
    return f"{description}; {detail}" if detail else description


def with_deleting_condition(status: MachineStatus, now: datetime, detail: str = "") -> MachineStatus:
    """``status`` with its ``Deleting`` condition derived from its lastOperation: the reason and message
    follow the description (and ``detail``, what holds the step); the transition time moves only when
    the reason does (the heartbeat is left alone, so a status otherwise alike stays alike to the
    de-duplication)."""
    description = status.last_operation.description
    reason = deleting_reason(description)
    old = deleting_condition(status)
    since = old.last_transition_time if old is not None and old.reason == reason else None
    condition = NodeCondition(
        type=MACHINE_DELETING_CONDITION,
        status="True",
        reason=reason,
        message=deleting_message(description, detail),
        last_transition_time=since or now,
        last_heartbeat_time=now if old is None or old.reason != reason else old.last_heartbeat_time,
    )
    rest = [c for c in status.conditions if c.type != MACHINE_DELETING_CONDITION]
    return status.model_copy(update={"conditions": [*rest, condition]})


def _time(raw: str | None) -> datetime | None:
    """An RFC 3339 annotation value as an aware datetime; None when absent or unreadable."""
    if not raw:
        return None
    try:
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def released_from_pre_drain_hooks(machine: Machine) -> bool:
    """The machine's flow waited for pre-drain hooks and none is left: the drain starts now."""
    condition = deleting_condition(machine.status)
    held = condition is not None and condition.reason == WAITING_FOR_PRE_DRAIN_HOOK_REASON
    return held and not pre_drain_hooks(machine)


def drain_clock_start(machine: Machine, now: datetime) -> datetime | None:
    """Since when the drain timeout runs: the deletion (``deletionTimestamp``, as upstream), but never
    before the last pre-drain hook went (``PRE_DRAIN_HOOKS_RELEASED_ANNOTATION``, written when the
    drain then began), and ``now`` while the condition still says a hook holds it. A hook's hold so
    never counts against ``--machine-drain-timeout``; a machine no hook held drains as upstream."""
    deleted = machine.metadata.deletion_timestamp
    if deleted is None:
        return None
    condition = deleting_condition(machine.status)
    if condition is not None and condition.reason == WAITING_FOR_PRE_DRAIN_HOOK_REASON:
        return now
    released = _time(machine.metadata.annotations.get(PRE_DRAIN_HOOKS_RELEASED_ANNOTATION))
    return max(deleted, released) if released is not None else deleted


# --- per-deployment timeouts ---------------------------------------------------------------------------


def parse_timeout(raw: str | None) -> float | None:
    """A per-deployment timeout annotation's value in seconds; None when absent or 0 (wait forever, as
    upstream and as Cluster API's 0). Raises ValueError, with a short message, for anything but a
    non-negative Go duration."""
    if raw is None:
        return None
    try:
        seconds = parse_duration(raw)
    except ValueError:
        raise ValueError(f"{raw[:64]!r} is not a duration (e.g. 10s, 5m)") from None
    if seconds < 0 or seconds != seconds or seconds == float("inf"):
        raise ValueError(f"{raw[:64]!r} is not a non-negative duration")
    return seconds or None


def waiting_since(machine: Machine, reason: str, now: datetime) -> datetime:
    """Since when the flow stands where ``reason`` says: the ``Deleting`` condition's transition time
    when it already says so, else ``now`` (the step begins in this pass)."""
    condition = deleting_condition(machine.status)
    if condition is not None and condition.reason == reason and condition.last_transition_time is not None:
        return condition.last_transition_time
    return now


def timed_out(machine: Machine, reason: str, timeout: float | None, now: datetime) -> bool:
    """Whether the flow has stood at ``reason``'s step for longer than ``timeout`` (None: never)."""
    if timeout is None:
        return False
    return (now - waiting_since(machine, reason, now)).total_seconds() > timeout
