"""Comparing and patching templates: what a MachineSet carries on to its machines and what a
MachineDeployment carries on to its sets are compared the same way (empty and missing values equal,
as Kubernetes' semantic equality has them) and written as JSON merge patches."""

from __future__ import annotations

from typing import Any

from mcm_tasks.api import MachineConfiguration

#: the MachineConfiguration fields as (attribute, wire name)
CONFIGURATION_FIELDS: tuple[tuple[str, str], ...] = tuple(
    (name, info.alias or name) for name, info in MachineConfiguration.model_fields.items()
)


def pruned(value: Any) -> Any:
    """The value without empty containers, strings or nulls, recursively (for comparisons only)."""
    if isinstance(value, dict):
        out = {k: pruned(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in (None, {}, [], "")}
    if isinstance(value, list):
        return [pruned(v) for v in value]
    return value


def merge_diff(current: Any, desired: Any) -> Any:
    """The JSON merge patch (RFC 7386) that turns ``current`` into ``desired``: objects recurse, keys
    that go away become null, anything else is replaced whole."""
    if not isinstance(current, dict) or not isinstance(desired, dict):
        return desired
    patch: dict[str, Any] = {k: None for k in current if k not in desired}
    for key, value in desired.items():
        if key not in current:
            patch[key] = value
        elif current[key] != value:
            patch[key] = merge_diff(current[key], value)
    return patch
