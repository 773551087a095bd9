"""The built-in resources the sandbox serves, declared once as a table.

Each row says what kube-apiserver's registry for that resource says: scope, short names,
categories, which subresources exist, whether ``metadata.generation`` is kept, and whether DELETE
answers with the object (``ReturnDeletedObject`` in the upstream ``genericregistry.Store``) or with
a ``Status``. Workload kinds (apps/v1, batch/v1, ReplicationControllers …) are served as storage with
defaults and status only: no controller acts on them, so pods they own live until a test or a
controller deletes them, and the garbage collector sees their owners as present.
"""

from __future__ import annotations

from typing import Any

from mcm_sandbox.apiserver.resources import ResourceType, ScaleSpec

CREATE_ONLY = ["create"]

# Discovery lists groups in this order (the aggregator's priority order, roughly).
PREFERRED_GROUP_ORDER = [
    "",
    "apiregistration.k8s.io",
    "apps",
    "events.k8s.io",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "autoscaling",
    "batch",
    "networking.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "storage.k8s.io",
    "scheduling.k8s.io",
    "coordination.k8s.io",
    "apiextensions.k8s.io",
]

_REPLICAS = ScaleSpec(".spec.replicas", ".status.replicas", ".spec.selector")

# group, version, plural, kind, namespaced, options
_ROWS: list[tuple[str, str, str, str, bool, dict[str, Any]]] = [
    # core/v1
    ("", "v1", "namespaces", "Namespace", False, {"short_names": ["ns"], "status": True, "returns": True}),
    ("", "v1", "nodes", "Node", False, {"short_names": ["no"], "status": True}),
    ("", "v1", "pods", "Pod", True,
     {"short_names": ["po"], "categories": ["all"], "status": True, "eviction": True, "gen": True,
      "returns": True}),
    ("", "v1", "secrets", "Secret", True, {}),
    ("", "v1", "configmaps", "ConfigMap", True, {"short_names": ["cm"]}),
    ("", "v1", "events", "Event", True, {"short_names": ["ev"]}),
    ("", "v1", "services", "Service", True,
     {"short_names": ["svc"], "categories": ["all"], "status": True, "returns": True}),
    ("", "v1", "serviceaccounts", "ServiceAccount", True,
     {"short_names": ["sa"], "returns": True,
      "subs": {"token": ("authentication.k8s.io", "v1", "TokenRequest", CREATE_ONLY)}}),
    ("", "v1", "endpoints", "Endpoints", True, {"short_names": ["ep"]}),
    ("", "v1", "replicationcontrollers", "ReplicationController", True,
     {"short_names": ["rc"], "categories": ["all"], "status": True, "gen": True,
      "scale": ScaleSpec(".spec.replicas", ".status.replicas", ".spec.selector")}),
    ("", "v1", "podtemplates", "PodTemplate", True, {}),
    ("", "v1", "limitranges", "LimitRange", True, {"short_names": ["limits"]}),
    ("", "v1", "resourcequotas", "ResourceQuota", True, {"short_names": ["quota"], "status": True}),
    ("", "v1", "persistentvolumes", "PersistentVolume", False,
     {"short_names": ["pv"], "status": True, "returns": True}),
    ("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True,
     {"short_names": ["pvc"], "status": True, "returns": True}),
    # apps/v1
    ("apps", "v1", "deployments", "Deployment", True,
     {"short_names": ["deploy"], "categories": ["all"], "status": True, "gen": True, "scale": _REPLICAS}),
    ("apps", "v1", "replicasets", "ReplicaSet", True,
     {"short_names": ["rs"], "categories": ["all"], "status": True, "gen": True, "scale": _REPLICAS}),
    ("apps", "v1", "statefulsets", "StatefulSet", True,
     {"short_names": ["sts"], "categories": ["all"], "status": True, "gen": True, "scale": _REPLICAS}),
    ("apps", "v1", "daemonsets", "DaemonSet", True,
     {"short_names": ["ds"], "categories": ["all"], "status": True, "gen": True}),
    ("apps", "v1", "controllerrevisions", "ControllerRevision", True, {}),
    # batch/v1
    ("batch", "v1", "jobs", "Job", True, {"categories": ["all"], "status": True, "gen": True}),
    ("batch", "v1", "cronjobs", "CronJob", True,
     {"short_names": ["cj"], "categories": ["all"], "status": True, "gen": True}),
    # autoscaling/v2
    ("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", True,
     {"short_names": ["hpa"], "categories": ["all"], "status": True, "gen": True}),
    # policy/v1
    ("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True,
     {"short_names": ["pdb"], "status": True, "gen": True}),
    # networking.k8s.io/v1
    ("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", True,
     {"short_names": ["netpol"], "gen": True}),
    ("networking.k8s.io", "v1", "ingresses", "Ingress", True,
     {"short_names": ["ing"], "status": True, "gen": True}),
    ("networking.k8s.io", "v1", "ingressclasses", "IngressClass", False, {}),
    # rbac.authorization.k8s.io/v1
    ("rbac.authorization.k8s.io", "v1", "roles", "Role", True, {}),
    ("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True, {}),
    ("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False, {}),
    ("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False, {}),
    # authentication and authorization reviews: create only, never stored
    ("authentication.k8s.io", "v1", "tokenreviews", "TokenReview", False, {"verbs": CREATE_ONLY}),
    ("authentication.k8s.io", "v1", "selfsubjectreviews", "SelfSubjectReview", False, {"verbs": CREATE_ONLY}),
    ("authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", False,
     {"verbs": CREATE_ONLY}),
    ("authorization.k8s.io", "v1", "selfsubjectrulesreviews", "SelfSubjectRulesReview", False,
     {"verbs": CREATE_ONLY}),
    ("authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", False,
     {"verbs": CREATE_ONLY}),
    ("authorization.k8s.io", "v1", "localsubjectaccessreviews", "LocalSubjectAccessReview", True,
     {"verbs": CREATE_ONLY}),
    # apiregistration.k8s.io/v1
    ("apiregistration.k8s.io", "v1", "apiservices", "APIService", False, {"status": True}),
    # storage, scheduling, coordination, events, apiextensions
    ("storage.k8s.io", "v1", "volumeattachments", "VolumeAttachment", False,
     {"status": True, "returns": True}),
    ("storage.k8s.io", "v1", "storageclasses", "StorageClass", False,
     {"short_names": ["sc"], "returns": True}),
    ("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False, {"short_names": ["pc"]}),
    ("coordination.k8s.io", "v1", "leases", "Lease", True, {}),
    ("events.k8s.io", "v1", "events", "Event", True,
     {"short_names": ["ev"], "storage": "events", "view": "events.k8s.io/v1"}),
    ("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False,
     {"short_names": ["crd", "crds"], "status": True, "gen": True}),
]  # fmt: skip


def builtin_types() -> list[ResourceType]:
    out: list[ResourceType] = []
    for group, version, plural, kind, namespaced, opt in _ROWS:
        out.append(
            ResourceType(
                group,
                version,
                plural,
                kind.lower(),
                kind,
                namespaced,
                short_names=list(opt.get("short_names", [])),
                categories=list(opt.get("categories", [])),
                status=bool(opt.get("status")),
                scale=opt.get("scale"),
                eviction=bool(opt.get("eviction")),
                has_generation=bool(opt.get("gen")),
                returns_deleted_object=bool(opt.get("returns")),
                storage=opt.get("storage", ""),
                verbs=opt.get("verbs"),
                extra_subresources=dict(opt.get("subs", {})),
                view=opt.get("view", ""),
            )
        )
    return out


def review_kind(rt: ResourceType) -> bool:
    """Resources that are computed per request and never stored (access and token reviews)."""
    return rt.verbs == CREATE_ONLY
