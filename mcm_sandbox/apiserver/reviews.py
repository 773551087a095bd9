"""The create-only review resources and TokenRequest: computed per request, never stored.

``kubectl auth can-i`` posts a SelfSubjectAccessReview (``--list``: a SelfSubjectRulesReview),
``kubectl auth whoami`` a SelfSubjectReview, ``kubectl create token`` a TokenRequest on
``serviceaccounts/{name}/token``; webhooks and tests use SubjectAccessReview and TokenReview.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from mcm_sandbox.apiserver import errors, objects
from mcm_sandbox.apiserver.authn import ISSUER, Authenticator, InvalidToken, UserInfo
from mcm_sandbox.apiserver.rbac import Attributes, Authorizer
from mcm_sandbox.apiserver.resources import ResourceType

MIN_EXPIRATION = 600
DEFAULT_EXPIRATION = 3600


def _echo(rt: ResourceType, body: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    meta = dict(body.get("metadata") or {})
    meta.setdefault("creationTimestamp", None)
    return {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta, "spec": body.get("spec") or {},
            "status": status}  # fmt: skip


def _attributes(user: UserInfo, spec: dict[str, Any], namespace: str = "") -> Attributes:
    res = spec.get("resourceAttributes")
    if isinstance(res, dict):
        return Attributes(
            user,
            res.get("verb", ""),
            namespace or res.get("namespace", ""),
            res.get("group", ""),
            res.get("resource", ""),
            res.get("subresource", ""),
            res.get("name", ""),
        )
    non = spec.get("nonResourceAttributes") or {}
    return Attributes(user, non.get("verb", ""), path=non.get("path", ""), resource_request=False)


def _access_status(authorizer: Authorizer | None, attrs: Attributes) -> dict[str, Any]:
    if authorizer is None:  # AlwaysAllow
        return {"allowed": True}
    allowed, reason = authorizer.authorize(attrs)
    status: dict[str, Any] = {"allowed": allowed}
    if reason:
        status["reason"] = reason
    return status


def review(
    rt: ResourceType,
    body: Any,
    user: UserInfo,
    namespace: str | None,
    authorizer: Authorizer | None,
    authenticator: Authenticator,
) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise errors.bad_request(f"the body of the request must be a {rt.kind}")
    spec = body.get("spec") if isinstance(body.get("spec"), dict) else {}
    assert isinstance(spec, dict)
    kind = rt.kind
    if kind == "SelfSubjectAccessReview":
        _require_attributes(rt, spec)
        return _echo(rt, body, _access_status(authorizer, _attributes(user, spec)))
    if kind in ("SubjectAccessReview", "LocalSubjectAccessReview"):
        _require_attributes(rt, spec)
        subject = UserInfo(spec.get("user", ""), tuple(spec.get("groups") or []), spec.get("uid", ""))
        res = spec.get("resourceAttributes") or {}
        if kind == "LocalSubjectAccessReview" and res.get("namespace", namespace) != namespace:
            raise errors.bad_request(
                "spec.resourceAttributes.namespace must match the namespace of the request"
            )
        return _echo(rt, body, _access_status(authorizer, _attributes(subject, spec, namespace or "")))
    if kind == "SelfSubjectRulesReview":
        return _echo(rt, body, _rules_status(authorizer, user, spec.get("namespace", "")))
    if kind == "SelfSubjectReview":
        return _echo(rt, body, {"userInfo": user.as_dict()})
    if kind == "TokenReview":
        try:
            found = authenticator.review(spec.get("token", ""))
        except InvalidToken:
            return _echo(rt, body, {"user": {}, "error": "invalid bearer token"})
        return _echo(rt, body, {"authenticated": True, "user": found.as_dict(), "audiences": [ISSUER]})
    raise errors.method_not_allowed()


def _require_attributes(rt: ResourceType, spec: dict[str, Any]) -> None:
    if not spec.get("resourceAttributes") and not spec.get("nonResourceAttributes"):
        raise errors.invalid(
            rt.kind,
            "authorization.k8s.io",
            "",
            [
                errors.cause(
                    "spec.resourceAttributes",
                    "Required value: exactly one of nonResourceAttributes or resourceAttributes must be "
                    "specified",
                    "FieldValueRequired",
                )
            ],
        )


def _rules_status(authorizer: Authorizer | None, user: UserInfo, namespace: str) -> dict[str, Any]:
    if authorizer is None:
        everything = {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}
        every_url = {"verbs": ["*"], "nonResourceURLs": ["*"]}
        return {"resourceRules": [everything], "nonResourceRules": [every_url], "incomplete": False}
    rules, incomplete = authorizer.rules_for(user, namespace)
    resource_rules = [
        {k: r[k] for k in ("verbs", "apiGroups", "resources", "resourceNames") if r.get(k)}
        for r in rules
        if r.get("resources")
    ]
    non_resource = [
        {"verbs": r.get("verbs", []), "nonResourceURLs": r["nonResourceURLs"]}
        for r in rules
        if r.get("nonResourceURLs")
    ]
    return {"resourceRules": resource_rules, "nonResourceRules": non_resource, "incomplete": incomplete}


def token_request(
    authenticator: Authenticator, sa: dict[str, Any], body: Any, store_get: Any
) -> dict[str, Any]:
    """POST serviceaccounts/{name}/token: a bound token, as ``kubectl create token`` asks for."""
    if not isinstance(body, dict):
        body = {}
    spec = dict(body.get("spec") or {})
    expiration = spec.get("expirationSeconds")
    expiration = DEFAULT_EXPIRATION if expiration is None else expiration
    if not isinstance(expiration, int) or isinstance(expiration, bool) or expiration < MIN_EXPIRATION:
        raise errors.invalid(
            "TokenRequest",
            "authentication.k8s.io",
            sa["metadata"]["name"],
            [
                errors.cause(
                    "spec.expirationSeconds", "Invalid value: may not specify a duration less than 10 minutes"
                )
            ],
        )
    bound = spec.get("boundObjectRef")
    if isinstance(bound, dict):
        storage = {"Secret": "secrets", "Pod": "pods"}.get(bound.get("kind", ""))
        target = (
            store_get(storage, sa["metadata"].get("namespace", ""), bound.get("name", ""))
            if storage
            else None
        )
        if target is None:
            raise errors.not_found((storage or "objects"), "", bound.get("name", ""))
        bound = {**bound, "uid": bound.get("uid") or target.meta.get("uid", "")}
    audiences = list(spec.get("audiences") or [ISSUER])
    token, exp = authenticator.issue(sa, audiences, expiration, bound if isinstance(bound, dict) else None)
    spec.update({"audiences": audiences, "expirationSeconds": expiration})
    if isinstance(bound, dict):
        spec["boundObjectRef"] = bound
    meta = {"name": sa["metadata"]["name"], "namespace": sa["metadata"].get("namespace", ""),
            "creationTimestamp": objects.now_iso()}  # fmt: skip
    return {
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": meta,
        "spec": spec,
        "status": {
            "token": token,
            "expirationTimestamp": datetime.fromtimestamp(exp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
    }
