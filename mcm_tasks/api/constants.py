"""The names MCM gives to labels, annotations, finalizers, taints and conditions.

One place for every well-known string, so that controllers, the sandbox and tests cannot drift apart
by a typo. Names follow MCM's Go constants where there is one.
"""

from __future__ import annotations

from typing import Final

GROUP: Final = "machine.sapcloud.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"

# --- labels on Machines, MachineSets, MachineDeployments ---
#: Machine → name of its Node; set by the machine controller once the node is known
NODE_LABEL_KEY: Final = "node"
#: Machine → MachineDeployment name; set by templates only, never by MCM
MACHINE_DEPLOYMENT_NAME_LABEL_KEY: Final = "name"
#: MachineSet selector/template and Machines: hash of the template plus collisionCount
MACHINE_TEMPLATE_HASH_LABEL_KEY: Final = "machine-template-hash"
#: Machine: any boolean-true value forces drain and delete
FORCE_DELETION_LABEL_KEY: Final = "force-deletion"
#: Machine: exactly "True" forces the in-place and preservation drains
FORCE_DRAIN_LABEL_KEY: Final = "force-drain"
FORCE_DRAIN_LABEL_VALUE: Final = "True"
#: MachineSet/MachineDeployment: set "True" by the safety controller
FREEZE_LABEL_KEY: Final = "freeze"
FREEZE_LABEL_VALUE: Final = "True"
#: old MachineSet during an in-place update
SCALE_UP_DISABLED_LABEL_KEY: Final = "node.machine.sapcloud.io/scale-up-disabled"

# --- annotations on Machines, MachineSets, MachineDeployments ---
#: Machine deletion priority: default "3", lower goes first, "1" = triggered for deletion
MACHINE_PRIORITY_ANNOTATION: Final = "machinepriority.machine.sapcloud.io"
MACHINE_PRIORITY_DEFAULT: Final = "3"
MACHINE_PRIORITY_TRIGGERED: Final = "1"
#: Machine, RFC 3339: when the deployment marked it for deletion
MARKED_FOR_DELETION_TIME_ANNOTATION: Final = "machine.sapcloud.io/marked-for-deletion-time"
#: MachineDeployment (copied to MachineSets), RFC 3339: last replica change by the autoscaler
LAST_REPLICA_CHANGE_BY_SCALER_TIME_ANNOTATION: Final = (
    "machine.sapcloud.io/last-deployment-replica-change-by-scaler-time"
)
#: MachineDeployment: ``M1~T1,M2~T2`` machines the autoscaler wants deleted
TRIGGER_DELETION_BY_MCM_ANNOTATION: Final = "node.machine.sapcloud.io/trigger-deletion-by-mcm"
#: MachineDeployment → MachineSet → Machine: overrides ``spec.creationTimeout``
EFFECTIVE_CREATION_TIMEOUT_ANNOTATION: Final = "node.machine.sapcloud.io/effective-creation-timeout"
#: Machine: how long it took to become Running the first time
MACHINE_JOIN_DURATION_ANNOTATION: Final = "node.machine.sapcloud.io/machine-join-duration"
#: MachineDeployment/MachineSet: manual unfreeze
UNFREEZE_ANNOTATION: Final = "safety.machine.sapcloud.io/unfreeze"
#: rollout revisions on MachineSets and MachineDeployments
REVISION_ANNOTATION: Final = "deployment.kubernetes.io/revision"
REVISION_HISTORY_ANNOTATION: Final = "deployment.kubernetes.io/revision-history"
#: MachineSet: the deployment's replicas, and replicas + maxSurge
DESIRED_REPLICAS_ANNOTATION: Final = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS_ANNOTATION: Final = "deployment.kubernetes.io/max-replicas"
#: MachineSet annotation (its nodes are already tainted) and the Node taint key of the same name
PREFER_NO_SCHEDULE_KEY: Final = "deployment.machine.sapcloud.io/prefer-no-schedule"
#: Node or Machine: ``now``, ``when-failed``, ``auto-preserved``, ``false``
PRESERVE_ANNOTATION: Final = "node.machine.sapcloud.io/preserve"
PRESERVE_NOW: Final = "now"
PRESERVE_WHEN_FAILED: Final = "when-failed"
PRESERVE_AUTO_PRESERVED: Final = "auto-preserved"
PRESERVE_FALSE: Final = "false"

# --- labels, annotations and taints on Nodes ---
#: Node → its Machine's name
NODE_MACHINE_NAME_LABEL_KEY: Final = "node.gardener.cloud/machine-name"
#: Node: set "1" by the orphan-node sweep; node handlers then ignore it
NOT_MANAGED_BY_MCM_ANNOTATION: Final = "node.machine.sapcloud.io/not-managed-by-mcm"
NOT_MANAGED_BY_MCM_VALUE: Final = "1"
#: Node, JSON NodeTemplateSpec: what was applied last, for the three-way sync
LAST_APPLIED_ANNO_LABELS_TAINTS_ANNOTATION: Final = "node.machine.sapcloud.io/last-applied-anno-labels-taints"
LAST_APPLIED_VIRTUAL_CAPACITY_ANNOTATION: Final = "node.machine.sapcloud.io/last-applied-virtual-capacity"
#: Node: cluster-autoscaler scale-down protection, and the marker that MCM set it
CA_SCALE_DOWN_DISABLED_ANNOTATION: Final = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION: Final = (
    "cluster-autoscaler.kubernetes.io/scale-down-disabled-by-mcm"
)
CA_SCALE_DOWN_DISABLED_VALUE: Final = "true"
#: Machine and Node (mcm-tasks's own): set by the deletion flow in the same PATCH that takes its
#: finalizer off, so the object's DELETE says the flow itself let it go (its status may be a step
#: behind, the pass writing its status only where it stops): value the flow's step
DELETED_BY_FLOW_ANNOTATION: Final = "mcm-tasks.machine.sapcloud.io/deleted-by-deletion-flow"
#: Node taint (read): while present a Pending machine does not become Running
CRITICAL_COMPONENTS_NOT_READY_TAINT: Final = "node.gardener.cloud/critical-components-not-ready"
#: Node taint (NoSchedule) applied before draining a preserved Failed machine
PRESERVED_TAINT: Final = "node.machine.sapcloud.io/preserved"
#: Node in-place update state
CANDIDATE_FOR_UPDATE_LABEL_KEY: Final = "node.machine.sapcloud.io/candidate-for-update"
SELECTED_FOR_UPDATE_LABEL_KEY: Final = "node.machine.sapcloud.io/selected-for-update"
UPDATE_RESULT_LABEL_KEY: Final = "node.machine.sapcloud.io/update-result"
UPDATE_RESULT_SUCCESSFUL: Final = "successful"
UPDATE_RESULT_FAILED: Final = "failed"

# --- taint effects ---
TAINT_EFFECT_NO_SCHEDULE: Final = "NoSchedule"
TAINT_EFFECT_PREFER_NO_SCHEDULE: Final = "PreferNoSchedule"
TAINT_EFFECT_NO_EXECUTE: Final = "NoExecute"
PREFER_NO_SCHEDULE_TAINT_VALUE: Final = "True"

# --- finalizers ---
#: on Machines, MachineClasses, MachineSets, MachineDeployments
MCM_FINALIZER: Final = "machine.sapcloud.io/machine-controller-manager"
#: on Secrets referenced by a MachineClass
MC_SECRET_FINALIZER: Final = "machine.sapcloud.io/machine-controller"
#: on Nodes that back a machine
NODE_FINALIZER: Final = "node.machine.sapcloud.io/machine-controller"

# --- node conditions ---
NODE_TERMINATING_CONDITION: Final = "Terminating"
NODE_TERMINATING_REASON_UNHEALTHY: Final = "Unhealthy"
NODE_TERMINATING_REASON_SCALE_DOWN: Final = "ScaleDown"
NODE_IN_PLACE_UPDATE_CONDITION: Final = "InPlaceUpdate"
#: upstream's NodePreserved condition type and its reasons and messages (v1alpha1, verbatim)
NODE_PRESERVED_CONDITION: Final = "Preserved"
NODE_PRESERVED_BY_MCM_REASON: Final = "Preserved by MCM."
NODE_PRESERVED_BY_USER_REASON: Final = "Preserved by user."
NODE_PRESERVATION_STOPPED_REASON: Final = "Preservation stopped."
PRESERVED_NODE_DRAIN_SUCCESSFUL: Final = "Preserved node drained successfully."
PRESERVED_NODE_DRAIN_UNSUCCESSFUL: Final = "Preserved node could not be drained."
#: reasons of the in-place update condition
CANDIDATE_FOR_UPDATE_REASON: Final = "CandidateForUpdate"
SELECTED_FOR_UPDATE_REASON: Final = "SelectedForUpdate"
READY_FOR_UPDATE_REASON: Final = "ReadyForUpdate"
DRAIN_SUCCESSFUL_REASON: Final = "DrainSuccessful"
UPDATE_SUCCESSFUL_REASON: Final = "UpdateSuccessful"
UPDATE_FAILED_REASON: Final = "UpdateFailed"

# --- bootstrap (target mode) ---
BOOTSTRAP_TOKEN_NAMESPACE: Final = "kube-system"
BOOTSTRAP_TOKEN_SECRET_PREFIX: Final = "bootstrap-token-"
USER_DATA_SECRET_KEY: Final = "userData"
BOOTSTRAP_TOKEN_PLACEHOLDER: Final = "<<BOOTSTRAP_TOKEN>>"
MACHINE_NAME_PLACEHOLDER: Final = "<<MACHINE_NAME>>"

# --- mcm-tasks's own API (``mcm-tasks.io``): what Cluster API users have, MCM's CRDs unchanged ---
#: Machine annotation prefixes of lifecycle hooks (Cluster API's ``pre-drain.delete.hook.machine.
#: cluster.x-k8s.io/`` and ``pre-terminate.…``): the rest of the key names the hook's owner, the value
#: is free text. While one is present a deleting machine is not drained, or its VM not deleted.
PRE_DRAIN_HOOK_PREFIX: Final = "pre-drain.delete.hook.mcm-tasks.io/"
PRE_TERMINATE_HOOK_PREFIX: Final = "pre-terminate.delete.hook.mcm-tasks.io/"
#: Machine, RFC 3339: when the last pre-drain hook went and the drain began (the drain timeout runs
#: from then, not from the deletion); written by the deletion flow
PRE_DRAIN_HOOKS_RELEASED_ANNOTATION: Final = "mcm-tasks.io/pre-drain-hooks-released-at"
#: MachineDeployment or MachineSet: ``Random``, ``Newest`` or ``Oldest`` (Cluster API's deletePolicy)
DELETION_ORDER_ANNOTATION: Final = "mcm-tasks.io/deletion-order"
#: MachineDeployment or MachineSet, Go durations: per-deployment bounds of the volume-detach wait and
#: of the Node deletion's retries (Cluster API's nodeVolumeDetachTimeout, nodeDeletionTimeout)
NODE_VOLUME_DETACH_TIMEOUT_ANNOTATION: Final = "mcm-tasks.io/node-volume-detach-timeout"
NODE_DELETION_TIMEOUT_ANNOTATION: Final = "mcm-tasks.io/node-deletion-timeout"
#: Pod label: ``skip`` or ``wait-completed`` (Cluster API's ``cluster.x-k8s.io/drain``)
POD_DRAIN_LABEL_KEY: Final = "mcm-tasks.io/drain"
POD_DRAIN_SKIP: Final = "skip"
POD_DRAIN_WAIT_COMPLETED: Final = "wait-completed"
#: Machine condition (in ``status.conditions``, Node-condition shaped) while the machine is deleted
MACHINE_DELETING_CONDITION: Final = "Deleting"

# --- remediation budgets (mcm-tasks's own, issue 29) ---
#: MachineDeployment: replacements in flight at once (int or percent of replicas, rounded up);
#: overrides --max-replacements
MAX_REPLACEMENTS_ANNOTATION: Final = "mcm-tasks.io/max-replacements"
#: MachineDeployment: above this many Unknown or Failed machines none is marked Failed (int or
#: percent of replicas, rounded down); overrides --max-unhealthy
MAX_UNHEALTHY_ANNOTATION: Final = "mcm-tasks.io/max-unhealthy"
#: Node label giving a machine's zone (Gardener, the cloud controllers)
ZONE_LABEL_KEY: Final = "topology.kubernetes.io/zone"
#: Machine (ours): why the machine is held instead of deleted (``NodeDeletionStorm``); removed by
#: ``mcm-tasks admin release`` or by its Node coming back
HELD_ANNOTATION: Final = "mcm-tasks.io/held"
#: Machine (ours), RFC 3339: an operator released the hold; the loss of its Node no longer deletes it
#: (the health check decides its fate, within the remediation budgets) until the Node is back
NODE_DELETION_RELEASED_ANNOTATION: Final = "mcm-tasks.io/node-deletion-released"
