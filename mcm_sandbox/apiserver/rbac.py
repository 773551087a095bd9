"""RBAC authorization over the stored Roles, ClusterRoles and their bindings.

The rules are upstream's ``pkg/registry/rbac/validation`` and ``plugin/pkg/auth/authorizer/rbac``:
a request is allowed when some ClusterRoleBinding, or a RoleBinding in the request's namespace,
binds the user (by name, group or service account) to a role with a matching rule. Matching covers
verbs, apiGroups, resources with subresources (``pods/status``, ``*/scale``), resourceNames and
nonResourceURLs (with a trailing ``*``). A ClusterRole with an ``aggregationRule`` also holds the
rules of the ClusterRoles its selectors match. A denial's message is kube-apiserver's
``forbiddenMessage``, word for word.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from mcm_sandbox.apiserver.authn import UserInfo, split_service_account
from mcm_sandbox.apiserver.store import Store

RBAC_GROUP = "rbac.authorization.k8s.io"
CLUSTER_ROLES = f"clusterroles.{RBAC_GROUP}"
ROLES = f"roles.{RBAC_GROUP}"
CLUSTER_BINDINGS = f"clusterrolebindings.{RBAC_GROUP}"
BINDINGS = f"rolebindings.{RBAC_GROUP}"


@dataclass(frozen=True)
class Attributes:
    """What a request asks to do (upstream's ``authorizer.Attributes``)."""

    user: UserInfo
    verb: str
    namespace: str = ""
    api_group: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    path: str = ""
    resource_request: bool = True


def forbidden_message(attrs: Attributes) -> str:
    if not attrs.resource_request:
        return f'User "{attrs.user.name}" cannot {attrs.verb} path "{attrs.path}"'
    resource = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    where = f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
    return (
        f'User "{attrs.user.name}" cannot {attrs.verb} resource "{resource}" '
        f'in API group "{attrs.api_group}" {where}'
    )


def _has(values: list[str] | None, wanted: str) -> bool:
    found = values or []
    return "*" in found or wanted in found


def rule_allows(rule: dict[str, Any], attrs: Attributes) -> bool:
    if not _has(rule.get("verbs"), attrs.verb):
        return False
    if not attrs.resource_request:
        for url in rule.get("nonResourceURLs") or []:
            if url == "*" or url == attrs.path or (url.endswith("*") and attrs.path.startswith(url[:-1])):
                return True
        return False
    if rule.get("nonResourceURLs") and not rule.get("resources"):
        return False
    if not _has(rule.get("apiGroups"), attrs.api_group):
        return False
    combined = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    resources = rule.get("resources") or []
    if not any(
        r == "*" or r == combined or (attrs.subresource and r == f"*/{attrs.subresource}") for r in resources
    ):
        return False
    names = rule.get("resourceNames") or []
    return not names or attrs.name in names


def _subject_matches(subject: dict[str, Any], user: UserInfo, binding_namespace: str) -> bool:
    kind = subject.get("kind")
    if kind == "User":
        return bool(subject.get("name") == user.name)
    if kind == "Group":
        return subject.get("name") in user.groups
    if kind == "ServiceAccount":
        sa = split_service_account(user.name)
        namespace = subject.get("namespace") or binding_namespace
        return sa is not None and sa == (namespace, subject.get("name"))
    return False


class Authorizer:
    def __init__(self, store: Store) -> None:
        self.store = store

    def _cluster_role_rules(
        self, name: str, seen: frozenset[str] = frozenset()
    ) -> list[dict[str, Any]] | None:
        role = self.store.get(CLUSTER_ROLES, "", name)
        if role is None:
            return None
        rules = list(role.obj.get("rules") or [])
        aggregation = role.obj.get("aggregationRule") or {}
        if aggregation.get("clusterRoleSelectors"):
            from mcm_sandbox import selectors

            for sel in aggregation["clusterRoleSelectors"]:
                try:
                    match = selectors.label_selector_from_api(sel)
                except selectors.SelectorError:
                    continue
                for other in self.store.iter(CLUSTER_ROLES):
                    other_name = other.meta["name"]
                    if (
                        other_name == name
                        or other_name in seen
                        or not match.matches(other.meta.get("labels"))
                    ):
                        continue
                    rules.extend(self._cluster_role_rules(other_name, seen | {name}) or [])
        return rules

    def _role_rules(self, ref: dict[str, Any], namespace: str) -> list[dict[str, Any]] | None:
        if ref.get("kind") == "ClusterRole":
            return self._cluster_role_rules(ref.get("name", ""))
        role = self.store.get(ROLES, namespace, ref.get("name", ""))
        return None if role is None else list(role.obj.get("rules") or [])

    def visit(self, user: UserInfo, namespace: str) -> Iterator[tuple[str, list[dict[str, Any]] | None, str]]:
        """(description, rules or None when the role is missing, error) for every binding of ``user``."""
        sources = [(CLUSTER_BINDINGS, "")]
        if namespace:
            sources.append((BINDINGS, namespace))
        for storage, ns in sources:
            for binding in list(self.store.iter(storage, ns if ns else None)):
                subjects = binding.obj.get("subjects") or []
                if not any(_subject_matches(s, user, ns) for s in subjects):
                    continue
                ref = binding.obj.get("roleRef") or {}
                rules = self._role_rules(ref, ns)
                kind = "ClusterRoleBinding" if storage == CLUSTER_BINDINGS else "RoleBinding"
                where = f'{kind} "{binding.meta["name"]}"' + (f' of namespace "{ns}"' if ns else "")
                describe = f'{where} of {ref.get("kind")} "{ref.get("name")}"'
                missing = ""
                if rules is None:
                    missing = f'{ref.get("kind", "").lower()}.{RBAC_GROUP} "{ref.get("name")}" not found'
                yield describe, rules, missing

    def authorize(self, attrs: Attributes) -> tuple[bool, str]:
        """(allowed, reason): the reason says which binding allowed it, or why none could."""
        errors: list[str] = []
        for describe, rules, missing in self.visit(attrs.user, attrs.namespace):
            if rules is None:
                errors.append(missing)
                continue
            if any(rule_allows(r, attrs) for r in rules):
                return True, f'RBAC: allowed by {describe} to {_subject_word(attrs.user)} "{attrs.user.name}"'
        if not errors:
            return False, ""
        return False, "RBAC: " + (errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]")

    def rules_for(self, user: UserInfo, namespace: str) -> tuple[list[dict[str, Any]], bool]:
        """Every rule that applies to ``user`` in ``namespace`` (SelfSubjectRulesReview)."""
        out: list[dict[str, Any]] = []
        incomplete = False
        for _, rules, _missing in self.visit(user, namespace):
            if rules is None:
                incomplete = True
            else:
                out.extend(rules)
        return out, incomplete


def _subject_word(user: UserInfo) -> str:
    return "ServiceAccount" if split_service_account(user.name) else "User"


# --- the bootstrap policy every cluster starts with ----------------------------------------------

_BOOTSTRAP_META = {
    "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
    "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
}
_DISCOVERY_URLS = ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*",
                   "/readyz", "/version", "/version/"]  # fmt: skip
_INFO_URLS = ["/healthz", "/livez", "/readyz", "/version", "/version/"]
_READ = ["get", "list", "watch"]
_WRITE = ["create", "delete", "deletecollection", "patch", "update"]


def _aggregate(to: str) -> dict[str, Any]:
    return {
        "clusterRoleSelectors": [{"matchLabels": {f"rbac.authorization.k8s.io/aggregate-to-{to}": "true"}}]
    }


_VIEW_RULES = [
    {"apiGroups": [""], "resources": ["configmaps", "endpoints", "persistentvolumeclaims", "pods",
                                      "replicationcontrollers", "serviceaccounts", "services", "events",
                                      "limitranges", "resourcequotas", "namespaces", "pods/status"],
     "verbs": _READ},
    {"apiGroups": ["apps"], "resources": ["daemonsets", "deployments", "replicasets", "statefulsets",
                                          "deployments/scale", "replicasets/scale", "statefulsets/scale"],
     "verbs": _READ},
    {"apiGroups": ["batch"], "resources": ["cronjobs", "jobs"], "verbs": _READ},
    {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"], "verbs": _READ},
    {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": _READ},
    {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses", "networkpolicies"], "verbs": _READ},
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": _READ},
]  # fmt: skip
_EDIT_RULES = [{**rule, "verbs": _READ + _WRITE} for rule in _VIEW_RULES] + [
    {"apiGroups": [""], "resources": ["secrets", "serviceaccounts/token"], "verbs": _READ + _WRITE}
]
_ADMIN_RULES = [
    {"apiGroups": [RBAC_GROUP], "resources": ["roles", "rolebindings"], "verbs": _READ + _WRITE},
    {"apiGroups": ["authorization.k8s.io"], "resources": ["localsubjectaccessreviews"], "verbs": ["create"]},
]

BOOTSTRAP_CLUSTER_ROLES: list[dict[str, Any]] = [
    {"name": "cluster-admin", "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                                        {"nonResourceURLs": ["*"], "verbs": ["*"]}]},
    {"name": "system:discovery", "rules": [{"nonResourceURLs": _DISCOVERY_URLS, "verbs": ["get"]}]},
    {"name": "system:public-info-viewer", "rules": [{"nonResourceURLs": _INFO_URLS, "verbs": ["get"]}]},
    {"name": "system:basic-user", "rules": [
        {"apiGroups": ["authorization.k8s.io"],
         "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"], "verbs": ["create"]},
        {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"], "verbs": ["create"]}]},
    {"name": "admin", "aggregationRule": _aggregate("admin"), "rules": []},
    {"name": "edit", "aggregationRule": _aggregate("edit"), "rules": [],
     "labels": {"rbac.authorization.k8s.io/aggregate-to-admin": "true"}},
    {"name": "view", "aggregationRule": _aggregate("view"), "rules": [],
     "labels": {"rbac.authorization.k8s.io/aggregate-to-edit": "true"}},
    {"name": "system:aggregate-to-admin", "rules": _ADMIN_RULES,
     "labels": {"rbac.authorization.k8s.io/aggregate-to-admin": "true"}},
    {"name": "system:aggregate-to-edit", "rules": _EDIT_RULES,
     "labels": {"rbac.authorization.k8s.io/aggregate-to-edit": "true"}},
    {"name": "system:aggregate-to-view", "rules": _VIEW_RULES,
     "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
]  # fmt: skip
BOOTSTRAP_BINDINGS: list[tuple[str, list[str]]] = [
    ("cluster-admin", ["system:masters"]),
    ("system:discovery", ["system:authenticated"]),
    ("system:basic-user", ["system:authenticated"]),
    ("system:public-info-viewer", ["system:authenticated", "system:unauthenticated"]),
]


def bootstrap_objects() -> Iterator[tuple[str, dict[str, Any]]]:
    """(plural, body) for the ClusterRoles and ClusterRoleBindings a new cluster has."""
    for spec in BOOTSTRAP_CLUSTER_ROLES:
        meta = {
            "name": spec["name"],
            "labels": {**_BOOTSTRAP_META["labels"], **spec.get("labels", {})},
            "annotations": dict(_BOOTSTRAP_META["annotations"]),
        }
        body: dict[str, Any] = {"metadata": meta, "rules": spec["rules"]}
        if "aggregationRule" in spec:
            body["aggregationRule"] = spec["aggregationRule"]
        yield "clusterroles", body
    for role, groups in BOOTSTRAP_BINDINGS:
        yield (
            "clusterrolebindings",
            {
                "metadata": {"name": role, **{k: dict(v) for k, v in _BOOTSTRAP_META.items()}},
                "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": role},
                "subjects": [{"apiGroup": RBAC_GROUP, "kind": "Group", "name": g} for g in groups],
            },
        )


# --- escalation prevention ---------------------------------------------------------------------


def _atoms(rule: dict[str, Any]) -> Iterator[Attributes]:
    """A rule broken into single-verb, single-resource rules (upstream's ``BreakdownRule``)."""
    anyone = UserInfo("")
    for verb in rule.get("verbs") or []:
        for url in rule.get("nonResourceURLs") or []:
            yield Attributes(anyone, verb, path=url, resource_request=False)
        for group in rule.get("apiGroups") or []:
            for resource in rule.get("resources") or []:
                base, _, sub = resource.partition("/")
                for name in rule.get("resourceNames") or [""]:
                    yield Attributes(anyone, verb, "", group, base, sub, name)


def _covers(owner: list[dict[str, Any]], atom: Attributes) -> bool:
    for rule in owner:
        if not atom.resource_request:
            if atom.verb in (rule.get("verbs") or []) or "*" in (rule.get("verbs") or []):
                for url in rule.get("nonResourceURLs") or []:
                    if url in (atom.path, "*") or (url.endswith("*") and atom.path.startswith(url[:-1])):
                        return True
            continue
        names = rule.get("resourceNames") or []
        if names and not atom.name:
            continue  # a rule limited to names does not cover a rule for every name
        if rule_allows(rule, atom):
            return True
    return False


def _atom_text(atom: Attributes) -> str:
    if not atom.resource_request:
        return f'{{NonResourceURLs:["{atom.path}"], Verbs:["{atom.verb}"]}}'
    resource = f"{atom.resource}/{atom.subresource}" if atom.subresource else atom.resource
    names = f', ResourceNames:["{atom.name}"]' if atom.name else ""
    return f'{{APIGroups:["{atom.api_group}"], Resources:["{resource}"]{names}, Verbs:["{atom.verb}"]}}'


def escalation(authorizer: Authorizer, user: UserInfo, namespace: str, rules: list[dict[str, Any]]) -> str:
    """Upstream's ``ConfirmNoEscalation``: "" when ``user`` holds every permission in ``rules``,
    else the message of the 403 (the permissions it would grant without holding them)."""
    if "system:masters" in user.groups:
        return ""
    owner, _ = authorizer.rules_for(user, namespace)
    missing = [a for rule in rules for a in _atoms(rule) if not _covers(owner, a)]
    if not missing:
        return ""
    groups = " ".join(f'"{g}"' for g in user.groups)
    held = "is attempting to grant RBAC permissions not currently held"
    return f'user "{user.name}" (groups=[{groups}]) {held}:\n' + "\n".join(
        dict.fromkeys(_atom_text(a) for a in missing)
    )


def guard(authorizer: Authorizer, user: UserInfo, plural: str, obj: dict[str, Any]) -> str:
    """The escalation check a write of a Role, ClusterRole or binding by ``user`` must pass: the
    ``escalate`` (roles) or ``bind`` (bindings) verb, or holding every permission it grants."""
    meta = obj.get("metadata") or {}
    namespace, name = meta.get("namespace", ""), meta.get("name", "")
    if plural in ("roles", "clusterroles"):
        attrs = Attributes(user, "escalate", namespace, RBAC_GROUP, plural, name=name)
        rules = list(obj.get("rules") or [])
    else:
        ref = obj.get("roleRef") or {}
        ref_plural = "clusterroles" if ref.get("kind") == "ClusterRole" else "roles"
        attrs = Attributes(user, "bind", namespace, RBAC_GROUP, ref_plural, name=ref.get("name", ""))
        rules = authorizer._role_rules(ref, namespace) or []
    if authorizer.authorize(attrs)[0]:
        return ""
    return escalation(authorizer, user, namespace, rules)
