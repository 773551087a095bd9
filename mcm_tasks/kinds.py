"""Every kind the controllers read, once: its API resource, its model, its key in the Redis mirror with
the mirror's indexes, and the queue its reconciles run on.

The rest of the code names kinds through this module: the mirror's layout (``cache.layout``) takes the
mirror keys and index names from here, the informer builds its watches on these kinds, and the queue
contract's queues are the members of ``Queue`` (so no queue list is unpacked by position, and a queue
name is never a string literal).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from mcm_tasks.api import Machine, MachineClass, MachineDeployment, MachineSet
from mcm_tasks.api.meta import K8sObject
from mcm_tasks.kube import resources as kres


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
    changes only wake other kinds)."""

    resource: kres.Resource
    model: type[K8sObject] | None = None
    indexes: tuple[str, ...] = ()
    queue: Queue | None = None

    @property
    def mirror(self) -> str:
        """The kind's key in the mirror: the REST plural (``machines``)."""
        return self.resource.plural


MACHINE: Final = Kind(
    kres.MACHINES, Machine, (BY_OWNER, BY_CLASS, BY_NODE, BY_DEPLOYMENT_NAME), Queue.MACHINE
)
MACHINE_SET: Final = Kind(kres.MACHINE_SETS, MachineSet, (BY_OWNER,), Queue.MACHINE_SET)
MACHINE_DEPLOYMENT: Final = Kind(kres.MACHINE_DEPLOYMENTS, MachineDeployment, (), Queue.MACHINE_DEPLOYMENT)
MACHINE_CLASS: Final = Kind(kres.MACHINE_CLASSES, MachineClass, (BY_SECRET,), Queue.MACHINE_CLASS)
SECRET: Final = Kind(kres.SECRETS, None, (), Queue.SECRET)
NODE: Final = Kind(kres.NODES, None, (BY_MACHINE_NAME,), Queue.NODE)
POD: Final = Kind(kres.PODS, None, (BY_NODE,))
POD_DISRUPTION_BUDGET: Final = Kind(kres.POD_DISRUPTION_BUDGETS, None, (BY_NAMESPACE,))
PERSISTENT_VOLUME: Final = Kind(kres.PERSISTENT_VOLUMES, None, (BY_CLAIM,))
PERSISTENT_VOLUME_CLAIM: Final = Kind(kres.PERSISTENT_VOLUME_CLAIMS, None, (BY_VOLUME,))
VOLUME_ATTACHMENT: Final = Kind(kres.VOLUME_ATTACHMENTS, None, (BY_NODE, BY_PERSISTENT_VOLUME))

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
