"""Per-type defaulting and validation on write, and serving a CRD's resources once it is written.

Only the rules a controller can observe are kept: status resets on create (a pod starts Pending, a
custom resource with a status subresource starts without status), namespace lifecycle, CRD naming
and structural-schema checks, and custom resource validation and pruning against the CRD schema.
"""

from __future__ import annotations

from typing import Any

from mcm_sandbox.apiserver import defaults, errors, objects
from mcm_sandbox.apiserver.authn import (
    SA_NAME_ANNOTATION,
    SA_UID_ANNOTATION,
    TOKEN_SECRET_TYPE,
    Authenticator,
)
from mcm_sandbox.apiserver.resources import Registry, ResourceType, crd_causes
from mcm_sandbox.apiserver.store import DELETED, Entry, Store

CRD_STORAGE = "customresourcedefinitions.apiextensions.k8s.io"
CRD_CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"


class Admission:
    def __init__(self, store: Store, registry: Registry) -> None:
        self.store = store
        self.registry = registry
        self.tokens: Authenticator | None = None  # set by the server: fills legacy token Secrets
        self.authorizer: Any = None  # set by the server in RBAC mode: escalation checks

    def guard_escalation(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        """RBAC's escalation prevention for a client's write of a Role, ClusterRole or binding."""
        from mcm_sandbox.apiserver import rbac
        from mcm_sandbox.apiserver.authn import CURRENT_USER

        user = CURRENT_USER.get()
        if self.authorizer is None or user is None or rt.group != rbac.RBAC_GROUP:
            return
        message = rbac.guard(self.authorizer, user, rt.plural, obj)
        if message:
            raise errors.forbidden(rt.plural, rt.group, obj["metadata"].get("name", ""), message)

    def check_namespace_writable(self, namespace: str, body: dict[str, Any]) -> None:
        ns = self.store.get("namespaces", "", namespace)
        if ns is None:
            raise errors.not_found("namespaces", "", namespace)
        if ns.meta.get("deletionTimestamp"):
            name = body.get("metadata", {}).get("name") or body.get("metadata", {}).get("generateName", "")
            kind = body.get("kind", "")
            raise errors.ApiError(
                403,
                "Forbidden",
                f'{kind} "{name}" is forbidden: unable to create new content in namespace {namespace} '
                "because it is being terminated",
                {
                    "name": name,
                    "kind": kind,
                    "causes": [
                        {
                            "reason": "NamespaceTerminating",
                            "message": f"namespace {namespace} is being terminated",
                            "field": "metadata.namespace",
                        }
                    ],
                },
            )

    # --- create ------------------------------------------------------------------------------

    def default(self, rt: ResourceType, body: dict[str, Any], old: dict[str, Any] | None) -> None:
        """Built-in defaulting, on create and on every update of the main resource."""
        if rt.crd:
            return
        defaults.default(rt.kind, body)
        if rt.storage == "services":
            used_ips = {
                ip
                for e in self.store.iter("services")
                for ip in (e.obj.get("spec") or {}).get("clusterIPs") or []
            }
            used_ports = {
                p.get("nodePort")
                for e in self.store.iter("services")
                for p in (e.obj.get("spec") or {}).get("ports") or []
                if p.get("nodePort")
            }
            try:
                defaults.service_spec(body, old, used_ips, used_ports)
            except ValueError as exc:
                raise errors.internal(str(exc)) from exc

    def on_create(self, rt: ResourceType, body: dict[str, Any]) -> None:
        if not rt.crd and rt.kind in defaults.INITIAL_STATUS:
            body["status"] = dict(defaults.INITIAL_STATUS[rt.kind])
        if rt.storage == "jobs.batch":
            defaults.job_selector(body)
        elif rt.storage == "secrets" and body.get("type") == TOKEN_SECRET_TYPE:
            self._token_secret(body)
        if rt.storage == "namespaces":
            body.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
            body["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = body["metadata"][
                "name"
            ]
        elif rt.storage == CRD_STORAGE:
            self._crd_create(body)
        elif rt.crd:
            self._check_crd_not_terminating(rt)
            if rt.status:
                body.pop("status", None)
            self._validate_custom(rt, body)

    def _token_secret(self, body: dict[str, Any]) -> None:
        """What the tokens controller does to a legacy token Secret: uid annotation, token, ca, namespace."""
        meta = body["metadata"]
        sa_name = (meta.get("annotations") or {}).get(SA_NAME_ANNOTATION)
        if not sa_name:
            raise errors.invalid(
                "Secret",
                "",
                meta["name"],
                [
                    errors.cause(
                        f"metadata.annotations[{SA_NAME_ANNOTATION}]", "Required value", "FieldValueRequired"
                    )
                ],
            )
        sa = self.store.get("serviceaccounts", meta.get("namespace", ""), sa_name)
        if sa is None or self.tokens is None:
            return
        import base64

        meta["annotations"][SA_UID_ANNOTATION] = sa.meta.get("uid", "")
        data = body.setdefault("data", {})
        token = self.tokens.legacy_token(sa.obj, meta["name"])
        for key, value in (("token", token), ("namespace", meta.get("namespace", "")), ("ca.crt", "")):
            data[key] = base64.b64encode(value.encode()).decode()

    def _check_crd_not_terminating(self, rt: ResourceType) -> None:
        crd = self.store.get(CRD_STORAGE, "", rt.storage)
        if crd is not None and crd.meta.get("deletionTimestamp"):
            raise errors.method_not_allowed(
                f"create not allowed while custom resource definition is terminating: {rt.storage}"
            )

    def _crd_create(self, body: dict[str, Any]) -> None:
        self._validate_crd(body)
        names = body["spec"]["names"]
        names.setdefault("singular", names["kind"].lower())
        names.setdefault("listKind", names["kind"] + "List")
        body["spec"].setdefault("conversion", {"strategy": "None"})
        finalizers = body["metadata"].setdefault("finalizers", [])
        if CRD_CLEANUP_FINALIZER not in finalizers:
            finalizers.append(CRD_CLEANUP_FINALIZER)
        now = objects.now_iso()
        body["status"] = {
            "conditions": [
                {
                    "type": "NamesAccepted",
                    "status": "True",
                    "reason": "NoConflicts",
                    "message": "no conflicts found",
                    "lastTransitionTime": now,
                },
                {
                    "type": "Established",
                    "status": "True",
                    "reason": "InitialNamesAccepted",
                    "message": "the initial names have been accepted",
                    "lastTransitionTime": now,
                },
            ],
            "acceptedNames": dict(names),
            "storedVersions": [v["name"] for v in body["spec"]["versions"] if v.get("storage")],
        }

    def _validate_crd(self, body: dict[str, Any]) -> None:
        causes = crd_causes(body)
        name = body["metadata"].get("name", "")
        if not causes:
            for i, ver in enumerate(body["spec"]["versions"]):
                schema = (ver.get("schema") or {}).get("openAPIV3Schema")
                if schema is None:
                    causes.append(
                        errors.cause(
                            f"spec.versions[{i}].schema.openAPIV3Schema",
                            "Required value",
                            "FieldValueRequired",
                        )
                    )
                    continue
                causes.extend(_structural_causes(schema, f"spec.versions[{i}].schema.openAPIV3Schema"))
        if causes:
            raise errors.invalid("CustomResourceDefinition", "apiextensions.k8s.io", name, causes)

    def _validate_custom(self, rt: ResourceType, body: dict[str, Any]) -> None:
        """Prune unknown fields, default, and validate against the version's schema (422 with causes)."""
        if not rt.schema:
            return
        from mcm_sandbox import schema as oapi

        # managedFields follow ObjectMeta, not the CRD schema: kept out of the (copying) prune
        meta = body.get("metadata")
        managed = meta.pop("managedFields", None) if isinstance(meta, dict) else None
        checked = oapi.apply_defaults(oapi.prune(body, rt.schema), rt.schema)
        body.clear()
        body.update(checked)
        if managed is not None:
            body["metadata"]["managedFields"] = managed
        found = oapi.validate(body, rt.schema)
        if found:
            causes = [errors.cause(c.field, c.message, c.reason) for c in found]
            raise errors.invalid(rt.kind, rt.group, body["metadata"].get("name", ""), causes)

    # --- update ------------------------------------------------------------------------------

    def on_update(self, rt: ResourceType, new: dict[str, Any], old: dict[str, Any], sub: str | None) -> None:
        if rt.storage == CRD_STORAGE and sub != "status":
            self._validate_crd(new)
            stored = set((old.get("status") or {}).get("storedVersions") or [])
            status = new.setdefault("status", {})
            status["storedVersions"] = sorted(
                stored | {v["name"] for v in new["spec"]["versions"] if v.get("storage")}
            )
        elif rt.crd:
            self._validate_custom(rt, new)

    # --- after commit ------------------------------------------------------------------------

    def committed(self, rt: ResourceType, entry: Entry, event_type: str) -> None:
        if rt.storage != CRD_STORAGE:
            return
        if event_type == DELETED:
            self.registry.unserve_crd(entry.meta["name"])
        else:
            self.registry.serve_crd(entry.obj)


def _structural_causes(schema: dict[str, Any], at: str) -> list[dict[str, str]]:
    from mcm_sandbox import schema as oapi

    out: list[dict[str, str]] = []
    for problem in oapi.check_structural(schema, at):
        field, _, message = problem.partition(": ")
        out.append(errors.cause(field, message or problem))
    return out
