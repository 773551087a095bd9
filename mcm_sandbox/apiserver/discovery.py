"""Discovery documents (/api, /apis, group and group/version resource lists) and /version.

kubectl and the dynamic client build their whole view of the server from these, so subresources,
short names, verbs and categories must be listed the way a real server lists them.
"""

from __future__ import annotations

import re
from typing import Any

from mcm_sandbox.apiserver.builtins import PREFERRED_GROUP_ORDER
from mcm_sandbox.apiserver.resources import SUB_VERBS, Registry, ResourceType

VERSION_INFO = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0-mcm-sandbox",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z",
    "goVersion": "go1.23.4",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def api_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def _group_entry(registry: Registry, group: str) -> dict[str, Any] | None:
    versions = registry.groups().get(group)
    if not versions:
        return None
    # kube-aware order, as apiextensions lists a group's versions; the preferred one is the first
    ordered = sorted(versions, key=lambda v: (_version_priority(v), v))
    preferred = ordered[0]
    return {
        "name": group,
        "versions": [{"groupVersion": f"{group}/{v}", "version": v} for v in ordered],
        "preferredVersion": {"groupVersion": f"{group}/{preferred}", "version": preferred},
    }


def _version_priority(version: str) -> tuple[int, int, int]:
    """Kubernetes version ordering: GA before beta before alpha, higher numbers first."""
    m = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if not m:
        return (3, 0, 0)
    major, stage, minor = int(m.group(1)), m.group(2), int(m.group(3) or 0)
    return ({None: 0, "beta": 1, "alpha": 2}[stage], -major, -minor)


def api_group_list(registry: Registry) -> dict[str, Any]:
    groups = [g for g in registry.groups() if g]
    ordered = [g for g in PREFERRED_GROUP_ORDER if g in groups] + sorted(
        g for g in groups if g not in PREFERRED_GROUP_ORDER
    )
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [entry for g in ordered if (entry := _group_entry(registry, g)) is not None],
    }


def api_group(registry: Registry, group: str) -> dict[str, Any] | None:
    entry = _group_entry(registry, group)
    if entry is None:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **entry}


def _resource(rt: ResourceType) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": rt.plural,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": rt.served_verbs,
    }
    if rt.short_names:
        out["shortNames"] = rt.short_names
    if rt.categories:
        out["categories"] = rt.categories
    return out


def _subresources(rt: ResourceType) -> list[dict[str, Any]]:
    subs: list[dict[str, Any]] = []
    if rt.status:
        subs.append(
            {
                "name": f"{rt.plural}/status",
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": SUB_VERBS,
            }
        )
    if rt.scale is not None:
        subs.append(
            {
                "name": f"{rt.plural}/scale",
                "singularName": "",
                "namespaced": rt.namespaced,
                "group": "autoscaling",
                "version": "v1",
                "kind": "Scale",
                "verbs": SUB_VERBS,
            }
        )
    if rt.eviction:
        subs.append(
            {
                "name": f"{rt.plural}/eviction",
                "singularName": "",
                "namespaced": True,
                "group": "policy",
                "version": "v1",
                "kind": "Eviction",
                "verbs": ["create"],
            }
        )
    for name, (group, version, kind, verbs) in rt.extra_subresources.items():
        subs.append(
            {
                "name": f"{rt.plural}/{name}",
                "singularName": "",
                "namespaced": rt.namespaced,
                "group": group,
                "version": version,
                "kind": kind,
                "verbs": verbs,
            }
        )
    if rt.plural == "namespaces" and not rt.group:
        subs.append(
            {
                "name": "namespaces/finalize",
                "singularName": "",
                "namespaced": False,
                "kind": "Namespace",
                "verbs": ["update"],
            }
        )
    return subs


def api_resource_list(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    types = sorted(registry.in_group_version(group, version), key=lambda rt: rt.plural)
    if not types:
        return None
    resources: list[dict[str, Any]] = []
    for rt in types:
        resources.append(_resource(rt))
        resources.extend(_subresources(rt))
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }
