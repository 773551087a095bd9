"""The resources the controller reads and writes: group, version, plural, kind, scope.

One table, so the informers, the operations helpers, the RBAC in the chart and the startup
discovery check all name a resource the same way.
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


MACHINES = Resource(MACHINE_GROUP, MACHINE_VERSION, "machines", "Machine")
MACHINE_SETS = Resource(MACHINE_GROUP, MACHINE_VERSION, "machinesets", "MachineSet")
MACHINE_DEPLOYMENTS = Resource(MACHINE_GROUP, MACHINE_VERSION, "machinedeployments", "MachineDeployment")
MACHINE_CLASSES = Resource(MACHINE_GROUP, MACHINE_VERSION, "machineclasses", "MachineClass")
#: the four MCM kinds; start-up fails unless the control cluster serves them all
MCM_RESOURCES = (MACHINES, MACHINE_SETS, MACHINE_DEPLOYMENTS, MACHINE_CLASSES)

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
PODS = Resource("", "v1", "pods", "Pod")
SECRETS = Resource("", "v1", "secrets", "Secret")
EVENTS = Resource("", "v1", "events", "Event")
PERSISTENT_VOLUMES = Resource("", "v1", "persistentvolumes", "PersistentVolume", namespaced=False)
PERSISTENT_VOLUME_CLAIMS = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim")
POD_DISRUPTION_BUDGETS = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget")
VOLUME_ATTACHMENTS = Resource(
    "storage.k8s.io", "v1", "volumeattachments", "VolumeAttachment", namespaced=False
)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")

ALL_RESOURCES = (
    *MCM_RESOURCES,
    NODES,
    PODS,
    SECRETS,
    EVENTS,
    PERSISTENT_VOLUMES,
    PERSISTENT_VOLUME_CLAIMS,
    POD_DISRUPTION_BUDGETS,
    VOLUME_ATTACHMENTS,
    LEASES,
)
_BY_KIND = {r.kind: r for r in ALL_RESOURCES}


def resource_for_kind(kind: str) -> Resource:
    """The resource of a kind (``"Machine"`` → machines), for code that holds only an object."""
    try:
        return _BY_KIND[kind]
    except KeyError:
        raise KeyError(f"no resource known for kind {kind!r}") from None
