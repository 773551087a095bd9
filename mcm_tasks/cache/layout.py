"""Where the informers' mirror keeps things in Redis: the one definition both sides read.

The informer is the only writer; workers only read. Per kind (the REST plural, e.g. ``machines``):

- ``<prefix>:cache:<kind>``: a hash, field = the object's key (``namespace/name``, or ``name`` for
  cluster-scoped kinds), value = the object as JSON. One hash per kind rather than one string per
  object, so a whole kind is listed with one command, and an object and its index entries change in
  one MULTI with no key scan.
- ``<prefix>:cache:<kind>:idx:<index>:<value>``: a set of object keys, one per index value.
- ``<prefix>:cache:synced``: a hash kind → resourceVersion of the last complete list; a kind
  that is absent has not been listed yet (client-go's ``HasSynced``).
- ``<prefix>:cache:sentinel``: set once a full list has been written. When it is gone, Redis lost
  its data (restart, flush) and the informer re-lists everything.
"""

from __future__ import annotations

from typing import Final

from mcm_tasks.redisdb import rkey

# --- kinds (REST plurals) ------------------------------------------------------------------------
MACHINES: Final = "machines"
MACHINE_SETS: Final = "machinesets"
MACHINE_DEPLOYMENTS: Final = "machinedeployments"
MACHINE_CLASSES: Final = "machineclasses"
SECRETS: Final = "secrets"
NODES: Final = "nodes"
PODS: Final = "pods"
POD_DISRUPTION_BUDGETS: Final = "poddisruptionbudgets"
PERSISTENT_VOLUMES: Final = "persistentvolumes"
PERSISTENT_VOLUME_CLAIMS: Final = "persistentvolumeclaims"
VOLUME_ATTACHMENTS: Final = "volumeattachments"

CONTROL_KINDS: Final = (MACHINE_CLASSES, SECRETS, MACHINE_DEPLOYMENTS, MACHINE_SETS, MACHINES)
TARGET_KINDS: Final = (
    NODES,
    PODS,
    POD_DISRUPTION_BUDGETS,
    PERSISTENT_VOLUMES,
    PERSISTENT_VOLUME_CLAIMS,
    VOLUME_ATTACHMENTS,
)
ALL_KINDS: Final = CONTROL_KINDS + TARGET_KINDS

# --- index names, per kind -----------------------------------------------------------------------
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

INDEXES: Final[dict[str, tuple[str, ...]]] = {
    MACHINES: (BY_OWNER, BY_CLASS, BY_NODE, BY_DEPLOYMENT_NAME),
    MACHINE_SETS: (BY_OWNER,),
    MACHINE_CLASSES: (BY_SECRET,),
    NODES: (BY_MACHINE_NAME,),
    PODS: (BY_NODE,),
    POD_DISRUPTION_BUDGETS: (BY_NAMESPACE,),
    PERSISTENT_VOLUMES: (BY_CLAIM,),
    PERSISTENT_VOLUME_CLAIMS: (BY_VOLUME,),
    VOLUME_ATTACHMENTS: (BY_NODE, BY_PERSISTENT_VOLUME),
}

#: the mirror keeps a Secret without its data, with a keyed digest of the data under this annotation
#: (for change detection; never on the API server)
DATA_DIGEST_ANNOTATION: Final = "mcm-tasks.gardener.cloud/cache-data-digest"


def objects_key(kind: str) -> str:
    return rkey("cache", kind)


def index_key(kind: str, index: str, value: str) -> str:
    return rkey("cache", kind, "idx", index, value)


def index_pattern(kind: str) -> str:
    return rkey("cache", kind, "idx", "*")


def synced_key() -> str:
    return rkey("cache", "synced")


def sentinel_key() -> str:
    return rkey("cache", "sentinel")


def object_key(namespace: str | None, name: str) -> str:
    """client-go's ``MetaNamespaceKeyFunc``: ``namespace/name``, or ``name`` when cluster-scoped."""
    return f"{namespace}/{name}" if namespace else name


def split_key(key: str) -> tuple[str | None, str]:
    namespace, sep, name = key.rpartition("/")
    return (namespace if sep else None), name
