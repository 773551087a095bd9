"""What a resource the controller reads and writes is: group, version, plural, kind, scope.

The resources themselves are fields of the kinds (``mcm_tasks.kinds``: ``kinds.MACHINE.resource``),
so the informers, the operations helpers and the start-up discovery check name each one the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

MACHINE_GROUP = "machine.sapcloud.io"
MACHINE_VERSION = "v1alpha1"
MACHINE_API_VERSION = f"{MACHINE_GROUP}/{MACHINE_VERSION}"


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version_path(self) -> str:
        """``/api/v1`` for the core group, ``/apis/<group>/<version>`` otherwise."""
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """The REST path of the collection (no name), an object, or one of its subresources.

        ``namespace`` is ignored for cluster-scoped resources; for namespaced ones ``None`` means
        across all namespaces (lists and watches only).
        """
        parts = [self.group_version_path]
        if self.namespaced and namespace is not None:
            parts.append(f"namespaces/{namespace}")
        parts.append(self.plural)
        if name is not None:
            parts.append(name)
            if subresource:
                parts.append(subresource)
        elif subresource:
            raise ValueError("a subresource needs an object name")
        return "/".join(parts)
