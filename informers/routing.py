"""Event routing: which watch event enqueues which (queue, key), as MCM's event handlers do.

A pure function of the event (old and new object, as the informer remembers them) and a read-only
view of the informer's store, which already holds the event's outcome (client-go runs handlers after
the indexer is updated). The table, per kind (upstream's
``addMachine``/``updateMachine``/``deleteMachine``, ``addMachineToMachineSet``…, ``addNodeToMachine``…,
``addMachineToSafety``… event handlers):

Machine
- ADD: itself on ``machine``, or ``machine-termination`` when it has a deletionTimestamp; its class
  and the ``overshooting`` safety check, both ``batched``; its controlling MachineSet (creation
  observed), or every MachineSet selecting an orphan.
- UPDATE with a new resourceVersion: itself only when the spec changed (generation), the preserve annotation
  changed or a deletionTimestamp appeared — status-only echoes of our own writes reconcile nothing (upstream
  does not reconcile on status-only updates either). Its MachineSet when anything the set reads changed
  (``seen_by_set``), the old one too when the ownerRef or labels moved. Old and new class when the class
  changed. ``orphan-vms`` when the description first reports OutOfRange (several VMs behind one machine).
- A machine's MachineSet is always woken ``batched``, and so are its class and the overshooting
  check when it is added, and its class and the orphan sweep when it is deleted: they may wait
  ``--machine-updates-batch-period`` so that a burst of machine events joins one pass (the set's
  expectations are lowered at once).
- DELETE: itself on ``machine-termination`` and ``orphan-vms`` (neither when its deletion flow released
  it, its VM deleted and its drain forgotten: ``cleaned_up_after_itself``); its MachineSet (deletion
  observed); its class when no machine of the class is left; its MachineDeployment if that uses
  Recreate and has no machine left.
- What wakes the machine itself, its MachineSet, a Recreate MachineDeployment and the safety jobs is
  declared beside each controller (``mcm_tasks.controllers.*.watches``); this module composes them.
MachineSet: itself, on an UPDATE only when more than its status changed (``wakes_machine_set``: the
  echoes of its own status writes reconcile nothing); its controlling MachineDeployment (or those
  selecting an orphan) on every event.
MachineDeployment: itself, on an UPDATE only when more than its status changed
  (``wakes_machine_deployment``).
MachineClass: itself; the secrets it references (old and new); its machines on ADD and when its
  content or finalizers change (machines wait for the class finalizer).
Secret: itself on ADD/DELETE and when finalizers or deletion change; the classes that reference it
  on ADD/DELETE and when its data changes.
Node, Pod, VolumeAttachment: see ``informers.routing_target``.
PodDisruptionBudget, PersistentVolume, PersistentVolumeClaim: mirror only (drains poll them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from informers import routing_target
from informers.events import (
    ADDED,
    DELETED,
    MODIFIED,
    Event,
    Routing,
    View,
    is_deleting,
    labels_of,
    machine_queue,
)
from informers.resources import WATCHES, controller_ref, key_of, meta, resource_version
from mcm_tasks import kinds
from mcm_tasks.api import Obj
from mcm_tasks.api.meta import LabelSelector
from mcm_tasks.api.validation import parse_problem, validate_label_selector
from mcm_tasks.cache import layout
from mcm_tasks.controllers.machine.watches import cleaned_up_after_itself, wakes_machine
from mcm_tasks.controllers.machinedeployment.watches import (
    in_place_wakes_machine_deployment,
    waits_for_machines_gone,
    wakes_machine_deployment,
)
from mcm_tasks.controllers.machineset.watches import seen_by_set, wakes_machine_set
from mcm_tasks.controllers.safety.watches import (
    jobs_on_machine_added,
    jobs_on_machine_deleted,
    jobs_on_machine_updated,
)
from mcm_tasks.kinds import Queue


def route(event: Event, view: View, into: Routing | None = None) -> Routing:
    out = into if into is not None else Routing()
    if event.type == MODIFIED and resource_version(event.old) == resource_version(event.new):
        return out  # a re-list that found nothing new
    handler = _HANDLERS.get(event.kind)
    if handler is not None:
        handler(event, view, out)
    return out


# --- helpers ---------------------------------------------------------------------------------------------


def resolve_controller(view: View, kind: str, child: Obj | None, ref: Mapping[str, Any] | None) -> str | None:
    """The key of the object a controller ref names, unless the store knows a different object (uid)
    under that name. Unknown objects still resolve: the reconcile of a missing key is a no-op, while
    a dropped key could be a lost event."""
    expected = {kinds.MACHINE_SET.mirror: "MachineSet", kinds.MACHINE_DEPLOYMENT.mirror: "MachineDeployment"}[
        kind
    ]
    if not ref or ref.get("kind") != expected or not ref.get("name"):
        return None
    key = layout.object_key(meta(child).get("namespace"), ref["name"])
    known = view.get(kind, key)
    if known is not None and ref.get("uid") and meta(known).get("uid") != ref.get("uid"):
        return None
    return key


def selecting(view: View, kind: str, child: Obj | None) -> list[str]:
    """Keys of the objects of ``kind`` whose selector matches an orphan (adoption candidates).
    An empty or missing selector selects nothing here, as in MCM."""
    child_labels = labels_of(child)
    if not child_labels:
        return []
    namespace = meta(child).get("namespace")
    out = []
    for owner in view.values(kind):
        if meta(owner).get("namespace") != namespace:
            continue
        selector = owner_selector(owner)
        if selector is not None and selector.matches(child_labels):
            out.append(key_of(owner))
    return sorted(out)


def owner_selector(owner: Obj | None) -> LabelSelector | None:
    """An owner's selector as routing uses it: None when missing, empty or unusable (a wrong shape,
    an unknown operator). An unusable selector selects nothing, so that one bad MachineSet cannot
    stop the routing of every orphan's event; the set's own reconcile reports it."""
    raw = ((owner or {}).get("spec") or {}).get("selector")
    if not raw:
        return None
    try:
        selector = LabelSelector.model_validate(raw)
    except ValueError:
        return None
    if selector.is_empty or validate_label_selector(selector):
        return None
    return selector


def selector_problem(owner: Obj | None) -> str | None:
    """Why routing cannot use an owner's selector (for the informer's report); None when it can."""
    raw = ((owner or {}).get("spec") or {}).get("selector")
    if not raw:
        return None
    try:
        selector = LabelSelector.model_validate(raw)
    except ValueError as err:
        return f"spec.selector cannot be read: {parse_problem(err)}"
    errors = validate_label_selector(selector)
    return "; ".join(str(e) for e in errors) if errors else None


def _content(obj: Obj | None) -> dict[str, Any]:
    return {k: v for k, v in (obj or {}).items() if k not in ("metadata", "status")}


# --- machines ----------------------------------------------------------------------------------------------


def _machine(ev: Event, view: View, out: Routing) -> None:
    """Upstream ``addMachine``/``updateMachine``/``deleteMachine`` and the handlers the other controllers
    register on machines; what wakes the machine itself, the safety jobs and a Recreate deployment is
    declared in their ``watches`` modules."""
    old, new = ev.old, ev.new
    key = key_of(ev.obj)
    if ev.type == ADDED:
        assert new is not None
        out.add(machine_queue(new), key)
        # a burst of creations needs one class pass (its finalizer) and one overshooting check after
        # it, not one each: a scale-up of 1000 ran ~80 class passes that changed nothing
        out.add(Queue.MACHINE_CLASS, _class_key(new), batched=True)
        for job in jobs_on_machine_added(new):
            out.add(Queue.SAFETY, job, batched=True)
    elif ev.type == MODIFIED:
        assert new is not None and old is not None
        if wakes_machine(old, new):
            out.add(machine_queue(new), key)
        if _class_key(old) != _class_key(new):
            out.add(Queue.MACHINE_CLASS, _class_key(old))
            out.add(Queue.MACHINE_CLASS, _class_key(new))
        for job in jobs_on_machine_updated(old, new):
            out.add(Queue.SAFETY, job)
        if in_place_wakes_machine_deployment(old, new):
            out.add(Queue.MACHINE_DEPLOYMENT, _deployment_of(view, new))
    else:
        assert old is not None
        released = cleaned_up_after_itself(old)
        if not released:
            out.add(Queue.MACHINE_TERMINATION, key)
        # a scale-down deletes hundreds at once: the class's finalizer check and the orphan sweep
        # need one pass after the burst, not one per machine; and the class only when this was the
        # last machine using it (the others keep its finalizer: its pass would change nothing)
        if _last_of_its_class(view, old):
            out.add(Queue.MACHINE_CLASS, _class_key(old), batched=True)
        for job in () if released else jobs_on_machine_deleted(old):
            out.add(Queue.SAFETY, job, batched=True)
        _recreate_deployment_emptied(view, old, out)
    _machine_to_machine_sets(ev, view, out)


def _last_of_its_class(view: View, machine: Obj) -> bool:
    """No machine of the deleted one's class is left in its namespace (the view holds the outcome)."""
    key = _class_key(machine)
    if key is None:
        return False
    namespace, name = layout.split_key(key)
    prefix = f"{namespace}/" if namespace else ""
    return not any(k.startswith(prefix) for k in view.index_keys(kinds.MACHINE.mirror, layout.BY_CLASS, name))


def _class_key(machine: Obj | None) -> str | None:
    cls = ((machine or {}).get("spec") or {}).get("class") or {}
    if not isinstance(cls, Mapping) or not cls.get("name"):
        return None
    if cls.get("kind", "MachineClass") != "MachineClass":
        return None
    return layout.object_key(meta(machine).get("namespace"), cls["name"])


def _machine_to_machine_sets(ev: Event, view: View, out: Routing) -> None:
    """MCM's add/update/deleteMachineToMachineSet, with its expectations bookkeeping.

    Upstream: ``updateMachineToMachineSet``.
    """
    old, new = ev.old, ev.new
    if ev.type == DELETED:
        assert old is not None
        _machine_gone(view, old, out)
        return
    assert new is not None
    if ev.type == MODIFIED and seen_by_set(old) == seen_by_set(new):
        return
    if ev.type == ADDED:
        if is_deleting(new):
            _machine_gone(view, new, out)
            return
        ms = resolve_controller(view, kinds.MACHINE_SET.mirror, new, controller_ref(new))
        if ms:
            out.creations_observed.append(ms)
            out.add(Queue.MACHINE_SET, ms, batched=True)
        elif controller_ref(new) is None:
            for candidate in selecting(view, kinds.MACHINE_SET.mirror, new):
                out.add(Queue.MACHINE_SET, candidate, batched=True)
        return
    labels_changed = labels_of(old) != labels_of(new)
    if is_deleting(new):
        if not is_deleting(old):
            _machine_gone(view, new, out)
        else:
            _enqueue_owner(view, kinds.MACHINE_SET.mirror, new, Queue.MACHINE_SET, out, batched=True)
        if labels_changed:
            _enqueue_owner(view, kinds.MACHINE_SET.mirror, old, Queue.MACHINE_SET, out, batched=True)
        return
    _owner_moved(view, kinds.MACHINE_SET.mirror, Queue.MACHINE_SET, old, new, out, batched=True)


def _machine_gone(view: View, machine: Obj, out: Routing) -> None:
    ms = resolve_controller(view, kinds.MACHINE_SET.mirror, machine, controller_ref(machine))
    if ms:
        out.deletions_observed[(ms, str(meta(machine).get("name")))] = None
        out.add(Queue.MACHINE_SET, ms, batched=True)


def _enqueue_owner(
    view: View, kind: str, child: Obj | None, queue: str, out: Routing, *, batched: bool = False
) -> None:
    out.add(queue, resolve_controller(view, kind, child, controller_ref(child)), batched=batched)


def _owner_moved(
    view: View,
    kind: str,
    queue: str,
    old: Obj | None,
    new: Obj | None,
    out: Routing,
    *,
    batched: bool = False,
) -> None:
    """Upstream's update handlers for owned objects: old and new controller, else adoption candidates."""
    old_ref, new_ref = controller_ref(old), controller_ref(new)
    if old_ref != new_ref and old_ref is not None:
        out.add(queue, resolve_controller(view, kind, old, old_ref), batched=batched)
    if new_ref is not None:
        out.add(queue, resolve_controller(view, kind, new, new_ref), batched=batched)
    elif labels_of(old) != labels_of(new) or old_ref != new_ref:
        for candidate in selecting(view, kind, new):
            out.add(queue, candidate, batched=batched)


def _deployment_of(view: View, machine: Obj) -> str | None:
    """Upstream ``getMachineDeploymentForMachine``: the deployment controlling the machine's set."""
    ms_key = resolve_controller(view, kinds.MACHINE_SET.mirror, machine, controller_ref(machine))
    ms = view.get(kinds.MACHINE_SET.mirror, ms_key) if ms_key else None
    if ms is None:
        return None
    return resolve_controller(view, kinds.MACHINE_DEPLOYMENT.mirror, ms, controller_ref(ms))


def _recreate_deployment_emptied(view: View, machine: Obj, out: Routing) -> None:
    """Upstream ``deleteMachineToMachineDeployment``: a deployment that waits for its machines to be
    gone (``waits_for_machines_gone``) is woken by the deletion of the last one."""
    mcd_key = _deployment_of(view, machine)
    mcd = view.get(kinds.MACHINE_DEPLOYMENT.mirror, mcd_key) if mcd_key else None
    if mcd is None or not waits_for_machines_gone(mcd):
        return
    owned_sets = view.by_index(kinds.MACHINE_SET.mirror, layout.BY_OWNER, str(meta(mcd).get("uid")))
    if not any(
        view.index_keys(kinds.MACHINE.mirror, layout.BY_OWNER, str(meta(s).get("uid"))) for s in owned_sets
    ):
        out.add(Queue.MACHINE_DEPLOYMENT, mcd_key)


# --- machine sets and deployments --------------------------------------------------------------------------


def _machine_set(ev: Event, view: View, out: Routing) -> None:
    """Upstream: ``addMachineSetToDeployment``, ``updateMachineSetToDeployment``,
    ``deleteMachineSetToDeployment``."""
    old, new = ev.old, ev.new
    if ev.type != MODIFIED or wakes_machine_set(old, new):
        out.add(Queue.MACHINE_SET, key_of(ev.obj))
    if ev.type == DELETED or (ev.type == ADDED and is_deleting(new)):
        _enqueue_owner(view, kinds.MACHINE_DEPLOYMENT.mirror, ev.obj, Queue.MACHINE_DEPLOYMENT, out)
    elif ev.type == ADDED:
        assert new is not None
        if controller_ref(new) is not None:
            _enqueue_owner(view, kinds.MACHINE_DEPLOYMENT.mirror, new, Queue.MACHINE_DEPLOYMENT, out)
        else:
            for candidate in selecting(view, kinds.MACHINE_DEPLOYMENT.mirror, new):
                out.add(Queue.MACHINE_DEPLOYMENT, candidate)
    else:
        _owner_moved(view, kinds.MACHINE_DEPLOYMENT.mirror, Queue.MACHINE_DEPLOYMENT, old, new, out)


def _machine_deployment(ev: Event, view: View, out: Routing) -> None:
    if ev.type != MODIFIED or wakes_machine_deployment(ev.old, ev.new):
        out.add(Queue.MACHINE_DEPLOYMENT, key_of(ev.obj))


# --- classes and secrets -----------------------------------------------------------------------------------


def _secret_keys(cls: Obj | None) -> list[str]:
    return WATCHES[kinds.MACHINE_CLASS].index_values(cls).get(layout.BY_SECRET, [])


def _machine_class(ev: Event, view: View, out: Routing) -> None:
    key = key_of(ev.obj)
    out.add(Queue.MACHINE_CLASS, key)
    old, new = ev.old, ev.new
    old_secrets, new_secrets = _secret_keys(old), _secret_keys(new)
    if ev.type != MODIFIED or old_secrets != new_secrets:
        for secret in (*old_secrets, *new_secrets):
            out.add(Queue.SECRET, secret)
    wake_machines = ev.type == ADDED or (
        ev.type == MODIFIED
        and (_content(old) != _content(new) or meta(old).get("finalizers") != meta(new).get("finalizers"))
    )
    if wake_machines:
        name = str(meta(ev.obj).get("name"))
        for machine in view.by_index(kinds.MACHINE.mirror, layout.BY_CLASS, name):
            if meta(machine).get("namespace") == meta(ev.obj).get("namespace"):
                out.add(machine_queue(machine), key_of(machine))


def _data_digest(secret: Obj | None) -> str | None:
    """The digest the stored form carries instead of the data (``informers.resources._secret_stored``)."""
    return (meta(secret).get("annotations") or {}).get(layout.DATA_DIGEST_ANNOTATION)


def _secret(ev: Event, view: View, out: Routing) -> None:
    key = key_of(ev.obj)
    old, new = ev.old, ev.new
    if ev.type != MODIFIED:
        out.add(Queue.SECRET, key)
        data_changed = True
    else:
        if meta(old).get("finalizers") != meta(new).get("finalizers") or is_deleting(old) != is_deleting(new):
            out.add(Queue.SECRET, key)
        data_changed = _data_digest(old) != _data_digest(new)
    if data_changed:
        for cls in view.by_index(kinds.MACHINE_CLASS.mirror, layout.BY_SECRET, key):
            out.add(Queue.MACHINE_CLASS, key_of(cls))


def full_resync(view: View) -> Routing:
    """Every key of every reconciled kind: MCM's informer resync, and the cure for lost messages;
    in the background (behind every user-facing reconcile, for at most ``--background-aging``)."""
    out = Routing(background=True)
    for machine in view.values(kinds.MACHINE.mirror):
        out.add(machine_queue(machine), key_of(machine))
    for kind, queue in (
        (kinds.MACHINE_SET.mirror, Queue.MACHINE_SET),
        (kinds.MACHINE_DEPLOYMENT.mirror, Queue.MACHINE_DEPLOYMENT),
        (kinds.MACHINE_CLASS.mirror, Queue.MACHINE_CLASS),
        (kinds.SECRET.mirror, Queue.SECRET),
    ):
        for obj in view.values(kind):
            out.add(queue, key_of(obj))
    for node in view.values(kinds.NODE.mirror):
        if routing_target.node_is_managed(node):
            out.add(Queue.NODE, key_of(node))
    return out


_HANDLERS: dict[str, Callable[[Event, View, Routing], None]] = {
    kinds.MACHINE.mirror: _machine,
    kinds.MACHINE_SET.mirror: _machine_set,
    kinds.MACHINE_DEPLOYMENT.mirror: _machine_deployment,
    kinds.MACHINE_CLASS.mirror: _machine_class,
    kinds.SECRET.mirror: _secret,
    kinds.NODE.mirror: routing_target.route_node,
    kinds.POD.mirror: routing_target.route_pod,
    kinds.VOLUME_ATTACHMENT.mirror: routing_target.route_volume_attachment,
}
