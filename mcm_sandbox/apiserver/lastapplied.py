"""Client-side apply to server-side apply, as kube-apiserver migrates it (``kubectl`` only).

``kubectl apply`` (client-side) keeps the configuration it applied in the
``kubectl.kubernetes.io/last-applied-configuration`` annotation and writes as the Update manager
``kubectl-client-side-apply``. When ``kubectl apply --server-side`` (manager ``kubectl``) later
conflicts with fields that configuration set and the live object still holds, upstream's
``lastAppliedManager`` lets the apply take them without ``--force-conflicts``; and
``lastAppliedUpdater`` keeps the annotation in step with what ``kubectl`` applies server-side, so a
later client-side apply still computes the right patch.
"""

from __future__ import annotations

import json
from typing import Any

from mcm_sandbox.apiserver import fieldsets as fs

ANNOTATION = "kubectl.kubernetes.io/last-applied-configuration"
MIGRATING_MANAGER = "kubectl"  # upstream upgrades only applies made by kubectl itself


def _last_applied(obj: fs.Node) -> str:
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION)
    return value if isinstance(value, str) else ""


def allows(live: fs.Node, manager: str, conflicts: dict[Any, set[fs.Path]], schema: fs.Node) -> bool:
    """``allowedConflictsFromLastApplied``: every conflict is a field the last client-side apply set
    to the value the object still has."""
    if manager != MIGRATING_MANAGER:
        return False
    text = _last_applied(live)
    if not text:
        return False
    try:
        last = json.loads(text)
    except ValueError:
        return False
    if not isinstance(last, dict):
        return False
    current = {**live, "metadata": {k: v for k, v in live["metadata"].items() if k != "managedFields"}}
    changed, removed = fs.compare(last, current, schema)
    allowed = fs.field_set(last, schema) - set(changed) - set(removed)
    return all(paths <= allowed for paths in conflicts.values())


def sync(result: fs.Node, applied: fs.Node, manager: str) -> None:
    """``lastAppliedUpdater``: an apply by kubectl rewrites an existing annotation to what it applied."""
    if manager != MIGRATING_MANAGER or not _last_applied(result):
        return
    config = json.loads(json.dumps(applied))
    annotations = (config.get("metadata") or {}).get("annotations")
    if isinstance(annotations, dict):
        annotations.pop(ANNOTATION, None)
    result["metadata"]["annotations"][ANNOTATION] = go_json(config) + "\n"


def go_json(value: Any) -> str:
    """``encoding/json``: sorted keys, compact, UTF-8, with HTML characters escaped."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    for char, escape in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(char, escape)
    return text
