"""Event routing for the target cluster: Nodes wake their Machine, Pods and VolumeAttachments wake a
draining one.

Node (ignored altogether while annotated ``not-managed-by-mcm``), its Machine being the one whose
``node`` label names it (unique, as MCM's ``getMachineFromNode``), else the one its
``node.gardener.cloud/machine-name`` label names:
- ADD: the machine when the node's conditions differ from the copy in the machine's status (unless
  the machine is CrashLoopBackOff or Terminating); the node on ``node``, unless that machine pass
  does the node task's work itself (``machine_pass_syncs_node``: the usual join of a new machine).
- UPDATE, with a machine: the node on ``node`` when the node is being deleted, is annotated to
  trigger the machine's deletion, or lacks the MCM finalizer — the node task does what MCM's
  handler does inline (delete the Machine, add the finalizer), since the informer never writes the
  API. The machine when an essential taint (critical-components-not-ready) came or went, an
  in-place-update label appeared or the update result changed, the conditions differ from its
  status (a type or a status, or the ``InPlaceUpdate`` reason; not CrashLoopBackOff/Terminating),
  or the preserve annotation changed. A machine being
  deleted instead gets ``machine-termination`` when the node's attached volumes change (the drain
  waits for detaches).
- DELETE: the node on ``node`` (its task deletes the machine) and the machine itself. Not when no
  machine claims it (upstream's handler then returns too), nor the node task when the machine is
  already being deleted (the task would find nothing to do); and a deleting machine's flow is not
  woken when it deletes the Node itself (``deletes_its_node_itself``).
Pod: deleted, or newly being deleted, on a node whose machine is being deleted → that machine on
``machine-termination``: the drain moves on as soon as the pod is gone, instead of at its next poll.
VolumeAttachment: deleted on such a node → the same (the "Delete Volume Attachments" step).
"""

from __future__ import annotations

from informers.events import (
    ADDED,
    DELETED,
    MODIFIED,
    Event,
    Routing,
    View,
    annotations_of,
    is_deleting,
    labels_of,
    machine_queue,
)
from informers.resources import key_of, meta
from mcm_tasks import kinds
from mcm_tasks.api import Obj
from mcm_tasks.api.constants import (
    CANDIDATE_FOR_UPDATE_LABEL_KEY,
    CRITICAL_COMPONENTS_NOT_READY_TAINT,
    NODE_FINALIZER,
    NODE_IN_PLACE_UPDATE_CONDITION,
    NODE_LABEL_KEY,
    NODE_MACHINE_NAME_LABEL_KEY,
    NOT_MANAGED_BY_MCM_ANNOTATION,
    PRESERVE_ANNOTATION,
    SELECTED_FOR_UPDATE_LABEL_KEY,
    TRIGGER_DELETION_BY_MCM_ANNOTATION,
    UPDATE_RESULT_LABEL_KEY,
)
from mcm_tasks.api.enums import MachinePhase
from mcm_tasks.cache import layout
from mcm_tasks.controllers.machine.watches import deletes_its_node_itself
from mcm_tasks.kinds import Queue

#: taints whose arrival or removal changes a machine's lifecycle (MCM's ``EssentialTaints``)
ESSENTIAL_TAINTS = (CRITICAL_COMPONENTS_NOT_READY_TAINT,)
_QUIET_PHASES = (MachinePhase.CRASH_LOOP_BACK_OFF.value, MachinePhase.TERMINATING.value)


def node_is_managed(node: Obj | None) -> bool:
    return NOT_MANAGED_BY_MCM_ANNOTATION not in annotations_of(node)


def machine_for_node(view: View, node_name: str, node: Obj | None = None) -> Obj | None:
    """The machine behind a node: the single one labelled ``node=<node>``; failing that, the one the
    node's machine-name label names (machines live in the view's control namespace). Ambiguity → None."""
    if not node_name:
        return None
    matches = view.by_index(kinds.MACHINE.mirror, layout.BY_NODE, node_name)
    if len(matches) == 1:
        return matches[0]
    if matches:
        return None
    if node is None:
        node = view.get(kinds.NODE.mirror, node_name)
    named = labels_of(node).get(NODE_MACHINE_NAME_LABEL_KEY)
    return view.get(kinds.MACHINE.mirror, layout.object_key(view.namespace, named)) if named else None


def _phase(machine: Obj) -> str:
    return str(((machine.get("status") or {}).get("currentStatus") or {}).get("phase") or "")


def _status_by_type(conditions: list[dict[str, str]] | None) -> dict[str, tuple[str, str]]:
    return {
        str(c.get("type")): (
            str(c.get("status")),
            str(c.get("reason")) if c.get("type") == NODE_IN_PLACE_UPDATE_CONDITION else "",
        )
        for c in conditions or ()
    }


def conditions_differ(machine: Obj, node: Obj) -> bool:
    """MCM's ``nodeConditionsHaveChanged``: a condition added, removed, or with another status; the
    ``InPlaceUpdate`` condition also with another reason."""
    return _status_by_type((machine.get("status") or {}).get("conditions")) != _status_by_type(
        (node.get("status") or {}).get("conditions")
    )


def _taint_keys(node: Obj | None) -> set[str]:
    return {str(t.get("key")) for t in ((node or {}).get("spec") or {}).get("taints") or ()}


def essential_taints_changed(old: Obj, new: Obj) -> bool:
    before, after = _taint_keys(old), _taint_keys(new)
    return any((t in before) != (t in after) for t in ESSENTIAL_TAINTS)


def in_place_labels_changed(old: Obj, new: Obj) -> bool:
    """A candidate/selected label appeared, or the update result changed (MCM's rule, to the letter)."""
    before, after = labels_of(old), labels_of(new)
    for key in (CANDIDATE_FOR_UPDATE_LABEL_KEY, SELECTED_FOR_UPDATE_LABEL_KEY, UPDATE_RESULT_LABEL_KEY):
        if key not in before and key in after:
            return True
    return before.get(UPDATE_RESULT_LABEL_KEY) != after.get(UPDATE_RESULT_LABEL_KEY)


def _volumes_attached(node: Obj | None) -> list[object]:
    return list(((node or {}).get("status") or {}).get("volumesAttached") or ())


def _node_needs_task(node: Obj) -> bool:
    return (
        is_deleting(node)
        or annotations_of(node).get(TRIGGER_DELETION_BY_MCM_ANNOTATION) == "true"
        or NODE_FINALIZER not in (meta(node).get("finalizers") or ())
    )


def machine_pass_syncs_node(machine: Obj, node_name: str, node: Obj) -> bool:
    """Whether the machine's own pass, woken by a node's ADD, does what the node task would: the pass
    of a machine that is not being deleted and names the node in its ``node`` label syncs the node
    (``health_io.sync_node``: the node finalizer in the same patch as the machine-name label), and a
    pass that does not (stopped early, or the machine has no phase yet) hands the node to the node
    task itself (``reconcile.hand_node_over``). So the node task is left out: one task and one node
    write fewer per machine. A node being deleted or asking for its machine's deletion always gets
    the node task.

    Upstream: ``addNode`` enqueues every new Node."""
    return (
        not is_deleting(machine)
        and labels_of(machine).get(NODE_LABEL_KEY) == node_name
        and not is_deleting(node)
        and annotations_of(node).get(TRIGGER_DELETION_BY_MCM_ANNOTATION) != "true"
    )


def route_node(ev: Event, view: View, out: Routing) -> None:
    """Upstream: ``updateNodeToMachine``, ``deleteNodeToMachine``."""
    node = ev.obj
    if not node_is_managed(node):
        return
    name = str(meta(node).get("name"))
    machine = machine_for_node(view, name, node)
    if ev.type == ADDED:
        if machine is not None and _phase(machine) not in _QUIET_PHASES and conditions_differ(machine, node):
            out.add(machine_queue(machine), key_of(machine))
            if machine_pass_syncs_node(machine, name, node):
                return
        out.add(Queue.NODE, name)
        return
    if ev.type == DELETED:
        if machine is None:
            return
        if is_deleting(machine):
            if not deletes_its_node_itself(machine, node):
                out.add(Queue.MACHINE_TERMINATION, key_of(machine))
            return
        out.add(Queue.NODE, name)
        out.add(machine_queue(machine), key_of(machine))
        return
    old, new = ev.old or {}, node
    if machine is None:
        return
    machine_key = key_of(machine)
    if is_deleting(machine):
        if _volumes_attached(old) != _volumes_attached(new):
            out.add(Queue.MACHINE_TERMINATION, machine_key)
        return
    if _node_needs_task(new):
        out.add(Queue.NODE, name)
    if (
        essential_taints_changed(old, new)
        or in_place_labels_changed(old, new)
        or (_phase(machine) not in _QUIET_PHASES and conditions_differ(machine, new))
        or annotations_of(old).get(PRESERVE_ANNOTATION) != annotations_of(new).get(PRESERVE_ANNOTATION)
    ):
        out.add(Queue.MACHINE, machine_key)


def _wake_draining_machine(view: View, node_name: str, out: Routing) -> None:
    machine = machine_for_node(view, node_name)
    if machine is not None and is_deleting(machine):
        out.add(Queue.MACHINE_TERMINATION, key_of(machine))


def _node_name(obj: Obj | None) -> str:
    return str(((obj or {}).get("spec") or {}).get("nodeName") or "")


def route_pod(ev: Event, view: View, out: Routing) -> None:
    gone = ev.type == DELETED or (ev.type == MODIFIED and is_deleting(ev.new) and not is_deleting(ev.old))
    if gone:
        _wake_draining_machine(view, _node_name(ev.obj), out)


def route_volume_attachment(ev: Event, view: View, out: Routing) -> None:
    if ev.type == DELETED:
        _wake_draining_machine(view, _node_name(ev.obj), out)
