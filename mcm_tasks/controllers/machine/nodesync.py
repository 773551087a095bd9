"""Node syncing (upstream ``syncMachineNodeTemplates``) as pure functions producing merge patches for the
machine's Node.

Three-way merges: what the machine's node template wants, what the node has, and what was applied
last time (kept in an annotation on the node). Entries applied before and no longer wanted are
removed; wanted entries that are missing or different are set; anything else on the node (the
kubelet's labels, other controllers' taints) is left alone. Taints are keyed by key and effect.

One patch carries everything the machine controller keeps on a node: the machine-name label, the
template's labels, annotations and taints with their last-applied record, and the node finalizer.
It includes the node's resourceVersion, so a concurrent change to the node makes it a Conflict
instead of silently overwriting the taint list. Virtual capacity lives in ``status.capacity`` and
needs its own patch of the status subresource.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from mcm_tasks.api import Machine, MachineClass, NodeTemplateSpec, ObjView, Taint, dump
from mcm_tasks.api.constants import (
    LAST_APPLIED_ANNO_LABELS_TAINTS_ANNOTATION,
    LAST_APPLIED_VIRTUAL_CAPACITY_ANNOTATION,
    NODE_FINALIZER,
    NODE_MACHINE_NAME_LABEL_KEY,
)
from mcm_tasks.controllers.common.finalizers import with_finalizer

#: a merge-patch map: value to set, or None to remove the key
Changes = dict[str, str | None]


def sync_map(
    current: Mapping[str, str], desired: Mapping[str, str], last_applied: Mapping[str, str]
) -> Changes:
    changes: Changes = {}
    for key in last_applied:
        if key not in desired and key in current:
            changes[key] = None
    for key, value in desired.items():
        if current.get(key) != value:
            changes[key] = value
    return changes


def _taint_key(taint: Mapping[str, Any]) -> tuple[str, str]:
    return (str(taint.get("key") or ""), str(taint.get("effect") or ""))


def _taint_dict(taint: Taint) -> dict[str, Any]:
    """The API form, without an empty value (``omitempty`` on the wire)."""
    out = dump(taint)
    if not out.get("value"):
        out.pop("value", None)
    return out


def _same_taint(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return _taint_key(a) == _taint_key(b) and (a.get("value") or "") == (b.get("value") or "")


def sync_taints(
    current: Sequence[Mapping[str, Any]], desired: Sequence[Taint], last_applied: Sequence[Taint]
) -> list[dict[str, Any]] | None:
    """The node's new taint list (its order kept, new taints appended), or None when unchanged."""
    wanted = {_taint_key(d): d for d in map(_taint_dict, desired)}
    dropped = {_taint_key(_taint_dict(t)) for t in last_applied} - set(wanted)
    out: list[dict[str, Any]] = []
    changed = False
    seen: set[tuple[str, str]] = set()
    for taint in current:
        key = _taint_key(taint)
        if key in dropped:
            changed = True
            continue
        if key in wanted:
            seen.add(key)
            if not _same_taint(taint, wanted[key]):
                out.append(wanted[key])
                changed = True
                continue
        out.append(dict(taint))
    for key, taint in wanted.items():
        if key not in seen:
            out.append(taint)
            changed = True
    return out if changed else None


def _meta(node: ObjView) -> Mapping[str, Any]:
    return node.get("metadata") or {}


def template_of(machine: Machine) -> NodeTemplateSpec:
    return machine.spec.node_template or NodeTemplateSpec()


def is_empty_template(template: NodeTemplateSpec) -> bool:
    return not (template.metadata.labels or template.metadata.annotations or template.spec.taints)


def last_applied_value(template: NodeTemplateSpec) -> str:
    """The annotation recording what was applied: only labels, annotations and taints, as JSON."""
    if is_empty_template(template):
        return ""
    metadata: dict[str, Any] = {}
    if template.metadata.labels:
        metadata["labels"] = template.metadata.labels
    if template.metadata.annotations:
        metadata["annotations"] = template.metadata.annotations
    record: dict[str, Any] = {"metadata": metadata}
    if template.spec.taints:
        record["spec"] = {"taints": [_taint_dict(t) for t in template.spec.taints]}
    return json.dumps(record, sort_keys=True, separators=(",", ":"))


def parse_last_applied(value: str | None) -> NodeTemplateSpec:
    """What the annotation says was applied; an unreadable record counts as nothing applied."""
    if not value:
        return NodeTemplateSpec()
    try:
        return NodeTemplateSpec.model_validate_json(value)
    except (ValidationError, ValueError):
        return NodeTemplateSpec()


def node_sync_patch(node: ObjView, machine: Machine, *, add_finalizer: bool) -> dict[str, Any] | None:
    """The merge patch that brings the node in line with the machine; None when it already is."""
    meta = _meta(node)
    labels: Mapping[str, str] = meta.get("labels") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    template = template_of(machine)
    previous = parse_last_applied(annotations.get(LAST_APPLIED_ANNO_LABELS_TAINTS_ANNOTATION))

    label_changes = sync_map(labels, template.metadata.labels, previous.metadata.labels)
    name = machine.metadata.name or ""
    if labels.get(NODE_MACHINE_NAME_LABEL_KEY) != name:
        label_changes[NODE_MACHINE_NAME_LABEL_KEY] = name
    annotation_changes = sync_map(annotations, template.metadata.annotations, previous.metadata.annotations)
    record = last_applied_value(template)
    if annotations.get(LAST_APPLIED_ANNO_LABELS_TAINTS_ANNOTATION, "") != record:
        annotation_changes[LAST_APPLIED_ANNO_LABELS_TAINTS_ANNOTATION] = record or None
    taints = sync_taints(
        (node.get("spec") or {}).get("taints") or [], template.spec.taints, previous.spec.taints
    )

    metadata: dict[str, Any] = {}
    if label_changes:
        metadata["labels"] = label_changes
    if annotation_changes:
        metadata["annotations"] = annotation_changes
    finalizers = list(meta.get("finalizers") or [])
    if add_finalizer and NODE_FINALIZER not in finalizers:
        metadata["finalizers"] = with_finalizer(finalizers, NODE_FINALIZER, True)
    if not metadata and taints is None:
        return None
    metadata["resourceVersion"] = meta.get("resourceVersion")
    patch: dict[str, Any] = {"metadata": metadata}
    if taints is not None:
        patch["spec"] = {"taints": taints}
    return patch


# --- virtual capacity ------------------------------------------------------------------------------------


def _quantities(values: Mapping[str, Any] | None) -> dict[str, str]:
    return {str(k): str(v) for k, v in (values or {}).items()}


def virtual_capacity_patches(
    node: ObjView, machine_class: MachineClass | None
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(status patch, metadata patch) merging the class's virtualCapacity into ``status.capacity``
    against the last-applied annotation; None when nothing is to change."""
    template = machine_class.node_template if machine_class is not None else None
    desired = _quantities(template.virtual_capacity if template is not None else None)
    annotations: Mapping[str, str] = _meta(node).get("annotations") or {}
    raw = annotations.get(LAST_APPLIED_VIRTUAL_CAPACITY_ANNOTATION)
    try:
        previous = _quantities(json.loads(raw)) if raw else {}
    except ValueError:
        previous = {}
    capacity = _quantities((node.get("status") or {}).get("capacity"))
    changes = sync_map(capacity, desired, previous)
    record = json.dumps(desired, sort_keys=True, separators=(",", ":")) if desired else ""
    if not changes and (raw or "") == record:
        return None
    status_patch = {"status": {"capacity": changes}} if changes else {}
    meta_patch = {"metadata": {"annotations": {LAST_APPLIED_VIRTUAL_CAPACITY_ANNOTATION: record or None}}}
    return status_patch, meta_patch
