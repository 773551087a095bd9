"""Every kind the controllers read or write, once: its API resource, its model, its key in the Redis
mirror with the mirror's indexes, and the queue its reconciles run on.

One name per kind, and each concept of a kind is a field of it (there is no second constant to keep
in step):

- ``kinds.MACHINE.resource``: the API resource (group, version, plural, scope), what ``kube.ops``
  reads and writes and the start-up discovery check asks for;
- ``kinds.MACHINE.mirror``: the key of the kind in the Redis mirror (``cache.layout``), what the
  cache readers and the informer's events name;
- ``kinds.MACHINE.indexes`` / ``.queue`` / ``.model``: the mirror's index names, the queue its
  reconciles run on, its typed model;
- ``informers.resources.WATCHES[kinds.MACHINE]``: how the informer lists, stores, remembers and
  indexes it; the table is keyed by ``Kind`` and checks its index functions against ``indexes``.

Kinds the controllers only write (Events, Leases) or only look up (Namespaces) are here too, outside
``ALL``: they are not mirrored and have no queue. Code that holds only an object's ``kind`` string
finds its resource with ``resource_for_kind``. The contract's queues are the members of ``Queue``
(so no queue list is unpacked by position, and a queue name is never a string literal).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from mcm_tasks.api import Machine, MachineClass, MachineDeployment, MachineSet
from mcm_tasks.api.drainrule import OWN_GROUP, OWN_VERSION, MachineDrainRule
from mcm_tasks.api.meta import K8sObject
from mcm_tasks.kube.resources import MACHINE_GROUP, MACHINE_VERSION, Resource


class Queue(StrEnum):
    """The queues of the contract, one per reconciled kind. The order is the order operators see them
    in (``mcm-tasks queues``, the metrics); nothing depends on it."""

    MACHINE = "machine"
    #: machines being deleted: long drains cannot starve creations
    MACHINE_TERMINATION = "machine-termination"
    MACHINE_SET = "machineset"
    MACHINE_DEPLOYMENT = "machinedeployment"
    MACHINE_CLASS = "machineclass"
    SECRET = "secret"
    NODE = "node"
    #: the safety jobs (one key per job, not one per object)
    SAFETY = "safety"


#: the queue names, in ``Queue`` order
QUEUES: Final[tuple[str, ...]] = tuple(q.value for q in Queue)


# --- index names of the mirror, per kind ---------------------------------------------------------------
#: Machines and MachineSets: uid of the controller ownerReference
BY_OWNER: Final = "owner"
#: Machines: ``spec.class.name``
BY_CLASS: Final = "class"
#: Machines: the ``node`` label; Pods and VolumeAttachments: ``spec.nodeName``
BY_NODE: Final = "node"
#: Machines: the ``name`` label (MachineDeployment name, the meltdown-protection permit key)
BY_DEPLOYMENT_NAME: Final = "name-label"
#: MachineClasses: key of each Secret they reference (``secretRef`` and ``credentialsSecretRef``)
BY_SECRET: Final = "secret"
#: Nodes: label ``node.gardener.cloud/machine-name``
BY_MACHINE_NAME: Final = "machine-name"
#: PodDisruptionBudgets: namespace
BY_NAMESPACE: Final = "namespace"
#: PersistentVolumes: key of the bound claim (``namespace/name`` from ``spec.claimRef``)
BY_CLAIM: Final = "claim"
#: PersistentVolumeClaims: ``spec.volumeName``
BY_VOLUME: Final = "volume"
#: VolumeAttachments: ``spec.source.persistentVolumeName``
BY_PERSISTENT_VOLUME: Final = "pv"


@dataclass(frozen=True)
class Kind:
    """One kind: ``resource`` on the API server, ``model`` the typed model (None for core kinds, read
    as dicts), ``indexes`` of its mirror hash, ``queue`` its own reconciles run on (None when its
    changes only wake other kinds, or when it is not watched at all)."""

    resource: Resource
    model: type[K8sObject] | None = None
    indexes: tuple[str, ...] = ()
    queue: Queue | None = None

    @property
    def mirror(self) -> str:
        """The kind's key in the mirror: the REST plural (``machines``)."""
        return self.resource.plural


def _mcm(plural: str, kind: str) -> Resource:
    return Resource(MACHINE_GROUP, MACHINE_VERSION, plural, kind)


MACHINE: Final = Kind(
    _mcm("machines", "Machine"), Machine, (BY_OWNER, BY_CLASS, BY_NODE, BY_DEPLOYMENT_NAME), Queue.MACHINE
)
MACHINE_SET: Final = Kind(_mcm("machinesets", "MachineSet"), MachineSet, (BY_OWNER,), Queue.MACHINE_SET)
MACHINE_DEPLOYMENT: Final = Kind(
    _mcm("machinedeployments", "MachineDeployment"), MachineDeployment, (), Queue.MACHINE_DEPLOYMENT
)
MACHINE_CLASS: Final = Kind(
    _mcm("machineclasses", "MachineClass"), MachineClass, (BY_SECRET,), Queue.MACHINE_CLASS
)
SECRET: Final = Kind(Resource("", "v1", "secrets", "Secret"), None, (), Queue.SECRET)
NODE: Final = Kind(
    Resource("", "v1", "nodes", "Node", namespaced=False), None, (BY_MACHINE_NAME,), Queue.NODE
)
POD: Final = Kind(Resource("", "v1", "pods", "Pod"), None, (BY_NODE,))
POD_DISRUPTION_BUDGET: Final = Kind(
    Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget"), None, (BY_NAMESPACE,)
)
PERSISTENT_VOLUME: Final = Kind(
    Resource("", "v1", "persistentvolumes", "PersistentVolume", namespaced=False), None, (BY_CLAIM,)
)
PERSISTENT_VOLUME_CLAIM: Final = Kind(
    Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim"), None, (BY_VOLUME,)
)
VOLUME_ATTACHMENT: Final = Kind(
    Resource("storage.k8s.io", "v1", "volumeattachments", "VolumeAttachment", namespaced=False),
    None,
    (BY_NODE, BY_PERSISTENT_VOLUME),
)
#: mcm-tasks's own (``mcm-tasks.io``), not mirrored: the drain reads the rules when it needs them
MACHINE_DRAIN_RULE: Final = Kind(
    Resource(OWN_GROUP, OWN_VERSION, "machinedrainrules", "MachineDrainRule"), MachineDrainRule
)
# not mirrored: written (Events, the leader Lease) or looked up (Namespaces) only
NAMESPACE: Final = Kind(Resource("", "v1", "namespaces", "Namespace", namespaced=False))
EVENT: Final = Kind(Resource("", "v1", "events", "Event"))
LEASE: Final = Kind(Resource("coordination.k8s.io", "v1", "leases", "Lease"))

#: the four MCM kinds' resources; start-up fails unless the control cluster serves them all
MCM_RESOURCES: Final = tuple(k.resource for k in (MACHINE, MACHINE_SET, MACHINE_DEPLOYMENT, MACHINE_CLASS))

#: the control cluster's kinds, in listing order: what routing looks up (classes, sets) is known
#: before what refers to it
CONTROL: Final = (MACHINE_CLASS, SECRET, MACHINE_DEPLOYMENT, MACHINE_SET, MACHINE)
#: the target cluster's kinds
TARGET: Final = (
    NODE,
    POD,
    POD_DISRUPTION_BUDGET,
    PERSISTENT_VOLUME,
    PERSISTENT_VOLUME_CLAIM,
    VOLUME_ATTACHMENT,
)
ALL: Final = CONTROL + TARGET
#: mirror key → kind
BY_MIRROR: Final[dict[str, Kind]] = {k.mirror: k for k in ALL}
#: ``kind`` string of an object (``"Machine"``) → its resource, for every kind above
_RESOURCE_OF_KIND: Final[dict[str, Resource]] = {
    k.resource.kind: k.resource for k in (*ALL, MACHINE_DRAIN_RULE, NAMESPACE, EVENT, LEASE)
}
#: queue → the kind of the objects its keys name (the safety queue's keys name jobs)
OF_QUEUE: Final[dict[Queue, Kind]] = {
    **{k.queue: k for k in ALL if k.queue is not None},
    Queue.MACHINE_TERMINATION: MACHINE,
}


def machine_queue(deleting: bool) -> Queue:
    """Machines being deleted go to their own queue, so long drains cannot starve creations."""
    return Queue.MACHINE_TERMINATION if deleting else Queue.MACHINE


def machine_queue_items(machines: list[Machine]) -> list[tuple[Queue, str]]:
    """(queue, key) of each machine, by ``machine_queue``."""
    return [(machine_queue(m.metadata.is_deleting), m.key) for m in machines]


def resource_for_kind(kind: str) -> Resource:
    """The resource of a kind (``"Machine"`` → machines), for code that holds only an object."""
    try:
        return _RESOURCE_OF_KIND[kind]
    except KeyError:
        raise KeyError(f"no resource known for kind {kind!r}") from None
