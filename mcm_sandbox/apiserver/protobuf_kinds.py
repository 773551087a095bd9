# ruff: noqa: E501 - a table of field numbers reads best one message per line
"""Field numbers of the built-in kinds kubectl's typed commands send as protobuf.

``kubectl create deployment|service|serviceaccount|token|pdb|role|rolebinding|clusterrole|
clusterrolebinding|job|cronjob|priorityclass|quota|ingress``, ``kubectl auth can-i|whoami`` and
``kubectl drain`` encode their bodies as ``application/vnd.kubernetes.protobuf``. The numbers are
k8s.io/api's ``generated.proto``; each message lists the fields those commands fill (a field not
listed is skipped). ``tests/sandbox/test_apiserver_kubectl_battery.py`` runs every one of these
commands with the real kubectl, which is the check that the numbers match its encoder.

A schema maps field number → (json name, kind); kind is a scalar tag ("str", "int", "bool",
"bytes", "ios" for IntOrString, "quantity"), a nested schema, ("repeated", kind), ("map", value
kind) or ("inline", schema) for Go's embedded ``json:",inline"`` structs.
"""

from __future__ import annotations

from typing import Any

Schema = dict[int, tuple[str, Any]]

TIME: Schema = {1: ("seconds", "int"), 2: ("nanos", "int")}
OWNER_REF: Schema = {1: ("kind", "str"), 3: ("name", "str"), 4: ("uid", "str"), 5: ("apiVersion", "str"),
                     6: ("controller", "bool"), 7: ("blockOwnerDeletion", "bool")}  # fmt: skip
OBJECT_META: Schema = {
    1: ("name", "str"), 2: ("generateName", "str"), 3: ("namespace", "str"), 5: ("uid", "str"),
    6: ("resourceVersion", "str"), 7: ("generation", "int"), 8: ("creationTimestamp", TIME),
    9: ("deletionTimestamp", TIME), 10: ("deletionGracePeriodSeconds", "int"), 11: ("labels", ("map", "str")),
    12: ("annotations", ("map", "str")), 13: ("ownerReferences", ("repeated", OWNER_REF)),
    14: ("finalizers", ("repeated", "str")),
}  # fmt: skip
DELETE_OPTIONS: Schema = {
    1: ("gracePeriodSeconds", "int"),
    2: ("preconditions", {1: ("uid", "str"), 2: ("resourceVersion", "str")}),
    3: ("orphanDependents", "bool"), 4: ("propagationPolicy", "str"), 5: ("dryRun", ("repeated", "str")),
}  # fmt: skip
LABEL_SELECTOR: Schema = {
    1: ("matchLabels", ("map", "str")),
    2: ("matchExpressions", ("repeated", {1: ("key", "str"), 2: ("operator", "str"), 3: ("values", ("repeated", "str"))})),
}  # fmt: skip
OBJECT_REFERENCE: Schema = {1: ("kind", "str"), 2: ("namespace", "str"), 3: ("name", "str"), 4: ("uid", "str"),
                            5: ("apiVersion", "str"), 6: ("resourceVersion", "str"), 7: ("fieldPath", "str")}  # fmt: skip
NAME_REF: Schema = {1: ("name", "str")}

CONTAINER: Schema = {
    1: ("name", "str"), 2: ("image", "str"), 3: ("command", ("repeated", "str")), 4: ("args", ("repeated", "str")),
    5: ("workingDir", "str"),
    6: ("ports", ("repeated", {1: ("name", "str"), 2: ("hostPort", "int"), 3: ("containerPort", "int"),
                               4: ("protocol", "str"), 5: ("hostIP", "str")})),
    7: ("env", ("repeated", {1: ("name", "str"), 2: ("value", "str")})),
    8: ("resources", {1: ("limits", ("map", "quantity")), 2: ("requests", ("map", "quantity"))}),
    14: ("imagePullPolicy", "str"),
}  # fmt: skip
POD_SPEC: Schema = {
    2: ("containers", ("repeated", CONTAINER)), 3: ("restartPolicy", "str"),
    4: ("terminationGracePeriodSeconds", "int"), 5: ("activeDeadlineSeconds", "int"), 6: ("dnsPolicy", "str"),
    7: ("nodeSelector", ("map", "str")), 8: ("serviceAccountName", "str"), 9: ("serviceAccount", "str"),
    10: ("nodeName", "str"), 11: ("hostNetwork", "bool"), 15: ("imagePullSecrets", ("repeated", NAME_REF)),
    16: ("hostname", "str"), 17: ("subdomain", "str"), 19: ("schedulerName", "str"),
    20: ("initContainers", ("repeated", CONTAINER)),
}  # fmt: skip
POD_TEMPLATE: Schema = {1: ("metadata", OBJECT_META), 2: ("spec", POD_SPEC)}
JOB_SPEC: Schema = {
    1: ("parallelism", "int"), 2: ("completions", "int"), 3: ("activeDeadlineSeconds", "int"),
    4: ("selector", LABEL_SELECTOR), 5: ("manualSelector", "bool"), 6: ("template", POD_TEMPLATE),
    7: ("backoffLimit", "int"), 8: ("ttlSecondsAfterFinished", "int"), 9: ("completionMode", "str"),
    10: ("suspend", "bool"),
}  # fmt: skip
SERVICE_PORT: Schema = {1: ("name", "str"), 2: ("protocol", "str"), 3: ("port", "int"), 4: ("targetPort", "ios"),
                        5: ("nodePort", "int"), 6: ("appProtocol", "str")}  # fmt: skip
SERVICE_SPEC: Schema = {
    1: ("ports", ("repeated", SERVICE_PORT)), 2: ("selector", ("map", "str")), 3: ("clusterIP", "str"),
    4: ("type", "str"), 5: ("externalIPs", ("repeated", "str")), 7: ("sessionAffinity", "str"),
    8: ("loadBalancerIP", "str"), 9: ("loadBalancerSourceRanges", ("repeated", "str")), 10: ("externalName", "str"),
    11: ("externalTrafficPolicy", "str"), 12: ("healthCheckNodePort", "int"), 13: ("publishNotReadyAddresses", "bool"),
    17: ("ipFamilyPolicy", "str"), 18: ("clusterIPs", ("repeated", "str")), 19: ("ipFamilies", ("repeated", "str")),
    20: ("allocateLoadBalancerNodePorts", "bool"), 21: ("loadBalancerClass", "str"),
    22: ("internalTrafficPolicy", "str"),
}  # fmt: skip
POLICY_RULE: Schema = {1: ("verbs", ("repeated", "str")), 2: ("apiGroups", ("repeated", "str")),
                       3: ("resources", ("repeated", "str")), 4: ("resourceNames", ("repeated", "str")),
                       5: ("nonResourceURLs", ("repeated", "str"))}  # fmt: skip
BINDING: Schema = {
    1: ("metadata", OBJECT_META),
    2: ("subjects", ("repeated", {1: ("kind", "str"), 2: ("apiGroup", "str"), 3: ("name", "str"), 4: ("namespace", "str")})),
    3: ("roleRef", {1: ("apiGroup", "str"), 2: ("kind", "str"), 3: ("name", "str")}),
}  # fmt: skip
INGRESS_BACKEND: Schema = {
    4: ("service", {1: ("name", "str"), 2: ("port", {1: ("name", "str"), 2: ("number", "int")})}),
    3: ("resource", {1: ("apiGroup", "str"), 2: ("kind", "str"), 3: ("name", "str")}),
}
INGRESS_RULE: Schema = {
    1: ("host", "str"),
    2: ("", ("inline", {1: ("http", {1: ("paths", ("repeated", {
        1: ("path", "str"), 2: ("backend", INGRESS_BACKEND), 3: ("pathType", "str")}))})})),
}  # fmt: skip
SELF_SUBJECT_ACCESS_REVIEW_SPEC: Schema = {
    1: ("resourceAttributes", {1: ("namespace", "str"), 2: ("verb", "str"), 3: ("group", "str"),
                               4: ("version", "str"), 5: ("resource", "str"), 6: ("subresource", "str"),
                               7: ("name", "str")}),
    2: ("nonResourceAttributes", {1: ("path", "str"), 2: ("verb", "str")}),
}  # fmt: skip

KINDS: dict[str, Schema] = {
    "Namespace": {1: ("metadata", OBJECT_META), 2: ("spec", {1: ("finalizers", ("repeated", "str"))}),
                  3: ("status", {1: ("phase", "str")})},
    "ConfigMap": {1: ("metadata", OBJECT_META), 2: ("data", ("map", "str")),
                  3: ("binaryData", ("map", "bytes")), 4: ("immutable", "bool")},
    "Secret": {1: ("metadata", OBJECT_META), 2: ("data", ("map", "bytes")), 3: ("type", "str"),
               4: ("stringData", ("map", "str")), 5: ("immutable", "bool")},
    "Eviction": {1: ("metadata", OBJECT_META), 2: ("deleteOptions", DELETE_OPTIONS)},
    "DeleteOptions": DELETE_OPTIONS,
    "ServiceAccount": {1: ("metadata", OBJECT_META), 2: ("secrets", ("repeated", OBJECT_REFERENCE)),
                       3: ("imagePullSecrets", ("repeated", NAME_REF)),
                       4: ("automountServiceAccountToken", "bool")},
    "Service": {1: ("metadata", OBJECT_META), 2: ("spec", SERVICE_SPEC)},
    "ResourceQuota": {1: ("metadata", OBJECT_META),
                      2: ("spec", {1: ("hard", ("map", "quantity")), 2: ("scopes", ("repeated", "str"))})},
    "Pod": {1: ("metadata", OBJECT_META), 2: ("spec", POD_SPEC)},
    "PodDisruptionBudget": {1: ("metadata", OBJECT_META),
                            2: ("spec", {1: ("minAvailable", "ios"), 2: ("selector", LABEL_SELECTOR),
                                         3: ("maxUnavailable", "ios"), 4: ("unhealthyPodEvictionPolicy", "str")})},
    "Deployment": {1: ("metadata", OBJECT_META),
                   2: ("spec", {1: ("replicas", "int"), 2: ("selector", LABEL_SELECTOR), 3: ("template", POD_TEMPLATE),
                                5: ("minReadySeconds", "int"), 6: ("revisionHistoryLimit", "int"),
                                7: ("paused", "bool"), 9: ("progressDeadlineSeconds", "int")})},
    "Job": {1: ("metadata", OBJECT_META), 2: ("spec", JOB_SPEC)},
    "CronJob": {1: ("metadata", OBJECT_META),
                2: ("spec", {1: ("schedule", "str"), 2: ("startingDeadlineSeconds", "int"),
                             3: ("concurrencyPolicy", "str"), 4: ("suspend", "bool"),
                             5: ("jobTemplate", {1: ("metadata", OBJECT_META), 2: ("spec", JOB_SPEC)}),
                             6: ("successfulJobsHistoryLimit", "int"), 7: ("failedJobsHistoryLimit", "int"),
                             8: ("timeZone", "str")})},
    "PriorityClass": {1: ("metadata", OBJECT_META), 2: ("value", "int"), 3: ("globalDefault", "bool"),
                      4: ("description", "str"), 5: ("preemptionPolicy", "str")},
    "Ingress": {1: ("metadata", OBJECT_META),
                2: ("spec", {1: ("defaultBackend", INGRESS_BACKEND),
                             2: ("tls", ("repeated", {1: ("hosts", ("repeated", "str")), 2: ("secretName", "str")})),
                             3: ("rules", ("repeated", INGRESS_RULE)), 4: ("ingressClassName", "str")})},
    "Role": {1: ("metadata", OBJECT_META), 2: ("rules", ("repeated", POLICY_RULE))},
    "ClusterRole": {1: ("metadata", OBJECT_META), 2: ("rules", ("repeated", POLICY_RULE)),
                    3: ("aggregationRule", {1: ("clusterRoleSelectors", ("repeated", LABEL_SELECTOR))})},
    "RoleBinding": BINDING,
    "ClusterRoleBinding": BINDING,
    "SelfSubjectAccessReview": {1: ("metadata", OBJECT_META), 2: ("spec", SELF_SUBJECT_ACCESS_REVIEW_SPEC)},
    "SelfSubjectRulesReview": {1: ("metadata", OBJECT_META), 2: ("spec", {1: ("namespace", "str")})},
    "SelfSubjectReview": {1: ("metadata", OBJECT_META)},
    "TokenRequest": {1: ("metadata", OBJECT_META),
                     2: ("spec", {1: ("audiences", ("repeated", "str")), 4: ("expirationSeconds", "int"),
                                  3: ("boundObjectRef", {1: ("kind", "str"), 2: ("apiVersion", "str"),
                                                         3: ("name", "str"), 4: ("uid", "str")})})},
}  # fmt: skip

#: Scalars whose zero value is meaningful (pointers in Go): kept; other zero scalars are dropped,
#: as Go's JSON encoding of the decoded struct omits them (gogo protobuf writes every field).
KEEP_ZERO = frozenset({
    "replicas", "parallelism", "completions", "backoffLimit", "value", "gracePeriodSeconds",
    "orphanDependents", "suspend", "automountServiceAccountToken", "immutable", "minReadySeconds",
    "revisionHistoryLimit", "port", "containerPort",
})  # fmt: skip
