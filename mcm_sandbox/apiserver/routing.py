"""URL paths to resources: the Kubernetes REST layout, parsed by hand (one catch-all route is faster
than hundreds of patterns, and CRDs add resources at run time)."""

from __future__ import annotations

from dataclasses import dataclass

from mcm_sandbox.apiserver import errors
from mcm_sandbox.apiserver.resources import Registry, ResourceType


@dataclass(slots=True)
class Target:
    rt: ResourceType
    namespace: str | None
    name: str | None
    sub: str | None
    watch_path: bool = False

    @property
    def resource(self) -> str:
        """The resource as RBAC and fault rules name it: ``pods`` or ``pods/status``."""
        return f"{self.rt.plural}/{self.sub}" if self.sub else self.rt.plural


@dataclass(slots=True)
class Discovery:
    """A discovery path: ``group`` None means /apis, ``version`` None means /apis/{group}."""

    legacy: bool
    group: str | None
    version: str | None


def resolve(registry: Registry, path: str) -> Target | Discovery:
    segs = [s for s in path.split("/") if s]
    if not segs or segs[0] not in ("api", "apis"):
        raise errors.not_found_path()
    if segs[0] == "api":
        if len(segs) == 1:
            return Discovery(True, None, None)
        if segs[1] != "v1":
            raise errors.not_found_path()
        group, version, rest = "", "v1", segs[2:]
    else:
        if len(segs) <= 3:
            return Discovery(False, segs[1] if len(segs) > 1 else None, segs[2] if len(segs) > 2 else None)
        group, version, rest = segs[1], segs[2], segs[3:]
    if not rest:
        return Discovery(not group, group, version)
    watch_path = rest[0] == "watch"
    if watch_path:
        rest = rest[1:]
        if not rest:
            raise errors.not_found_path()
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace = rest[1]
        rt = registry.get(group, version, rest[2])
        if rt is not None and rt.namespaced and len(rest) <= 5:
            return Target(rt, namespace, _at(rest, 3), _at(rest, 4), watch_path)
        if not group and rest[2] in ("status", "finalize") and len(rest) == 3:
            ns_rt = registry.get("", "v1", "namespaces")
            assert ns_rt is not None
            return Target(ns_rt, None, namespace, rest[2], watch_path)
        raise errors.not_found_path()
    rt = registry.get(group, version, rest[0])
    if rt is None or len(rest) > 3 or (rt.namespaced and len(rest) > 1):
        raise errors.not_found_path()
    return Target(rt, None, _at(rest, 1), _at(rest, 2), watch_path)


def _at(parts: list[str], i: int) -> str | None:
    return parts[i] if len(parts) > i else None


def sub_exists(t: Target) -> bool:
    rt = t.rt
    return (
        (t.sub == "status" and rt.status)
        or (t.sub == "scale" and rt.scale is not None)
        or (t.sub == "eviction" and rt.eviction)
        or (t.sub == "finalize" and rt.storage == "namespaces")
        or (t.sub in rt.extra_subresources)
    )


def sub_allowed(t: Target, verb: str) -> bool:
    if not sub_exists(t):
        return False
    if t.sub == "eviction":
        return verb == "create"
    if t.sub == "finalize":
        return verb == "update"
    if t.sub in t.rt.extra_subresources:
        return verb in t.rt.extra_subresources[t.sub][3]
    return verb in ("get", "update", "patch")
