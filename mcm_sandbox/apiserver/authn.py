"""Authentication: who a request is, as kube-apiserver's authenticator chain decides it.

Three credentials exist: the static admin token of the kubeconfig the sandbox writes (user
``kubernetes-admin`` in ``system:masters``), service-account tokens (JWTs issued by TokenRequest,
``kubectl create token``, or written into legacy ``kubernetes.io/service-account-token`` Secrets),
and nothing (``system:anonymous``). Service-account tokens are checked the way upstream's
``serviceaccount.JWTTokenAuthenticator`` checks them: signature, expiry, audience, and that the
ServiceAccount (and the Secret or Pod the token is bound to) still exists with the same uid.
Impersonation headers (``kubectl --as``) are honoured when the caller may ``impersonate``.
"""

from __future__ import annotations

import contextvars
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

import jwt

from mcm_sandbox.apiserver.store import Store

ISSUER = "https://kubernetes.default.svc.cluster.local"
LEGACY_ISSUER = "kubernetes/serviceaccount"
SA_PREFIX = "system:serviceaccount:"
AUTHENTICATED = "system:authenticated"
TOKEN_SECRET_TYPE = "kubernetes.io/service-account-token"
SA_NAME_ANNOTATION = "kubernetes.io/service-account.name"
SA_UID_ANNOTATION = "kubernetes.io/service-account.uid"


@dataclass(frozen=True)
class UserInfo:
    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: dict[str, list[str]] = field(default_factory=dict, hash=False, compare=False)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"username": self.name, "groups": list(self.groups)}
        if self.uid:
            out["uid"] = self.uid
        if self.extra:
            out["extra"] = self.extra
        return out


ANONYMOUS = UserInfo("system:anonymous", ("system:unauthenticated",))
#: The user of the request being served (escalation checks need it deep in a write).
CURRENT_USER: contextvars.ContextVar[UserInfo | None] = contextvars.ContextVar("current_user", default=None)
ADMIN = UserInfo("kubernetes-admin", ("system:masters", AUTHENTICATED))


def service_account_user(namespace: str, name: str, uid: str = "") -> UserInfo:
    return UserInfo(
        f"{SA_PREFIX}{namespace}:{name}",
        ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", AUTHENTICATED),
        uid,
    )


def split_service_account(username: str) -> tuple[str, str] | None:
    """``system:serviceaccount:ns:name`` → (ns, name), else None."""
    if not username.startswith(SA_PREFIX):
        return None
    parts = username[len(SA_PREFIX) :].split(":")
    return (parts[0], parts[1]) if len(parts) == 2 and all(parts) else None


class InvalidToken(Exception):
    """A bearer token was sent but proves nothing: the request gets 401."""


class Authenticator:
    def __init__(self, store: Store, static_token: str) -> None:
        self.store = store
        self.static_token = static_token
        self._key = secrets.token_bytes(32)  # tokens die with the server, like a new cluster's

    # --- authenticate ------------------------------------------------------------------------

    def authenticate(self, authorization: str) -> UserInfo:
        if not authorization:
            return ANONYMOUS
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise InvalidToken()
        if self.static_token and secrets.compare_digest(token, self.static_token):
            return ADMIN
        return self.review(token)

    def review(self, token: str) -> UserInfo:
        """The service account a token stands for (TokenReview's answer), or InvalidToken."""
        try:
            claims = jwt.decode(
                token,
                self._key,
                algorithms=["HS256"],
                options={"verify_aud": False, "require": ["iss", "sub"]},
            )
        except jwt.PyJWTError as exc:
            raise InvalidToken() from exc
        if claims["iss"] == LEGACY_ISSUER:
            return self._legacy_user(token, claims)
        if claims["iss"] != ISSUER or ISSUER not in _audiences(claims):
            raise InvalidToken()
        k8s = claims.get("kubernetes.io") or {}
        namespace, sa = k8s.get("namespace", ""), k8s.get("serviceaccount") or {}
        self._check_exists("serviceaccounts", namespace, sa.get("name", ""), sa.get("uid", ""))
        for kind, storage in (("secret", "secrets"), ("pod", "pods")):
            bound = k8s.get(kind)
            if bound:
                self._check_exists(storage, namespace, bound.get("name", ""), bound.get("uid", ""))
        return service_account_user(namespace, sa.get("name", ""), sa.get("uid", ""))

    def _legacy_user(self, token: str, claims: dict[str, Any]) -> UserInfo:
        namespace = claims.get("kubernetes.io/serviceaccount/namespace", "")
        name = claims.get("kubernetes.io/serviceaccount/service-account.name", "")
        uid = claims.get("kubernetes.io/serviceaccount/service-account.uid", "")
        self._check_exists("serviceaccounts", namespace, name, uid)
        secret = self.store.get(
            "secrets", namespace, claims.get("kubernetes.io/serviceaccount/secret.name", "")
        )
        if secret is None:
            raise InvalidToken()
        import base64

        stored = (secret.obj.get("data") or {}).get("token", "")
        if not stored or base64.b64decode(stored).decode(errors="replace") != token:
            raise InvalidToken()
        return service_account_user(namespace, name, uid)

    def _check_exists(self, storage: str, namespace: str, name: str, uid: str) -> None:
        entry = self.store.get(storage, namespace, name)
        if entry is None or (uid and entry.meta.get("uid") != uid):
            raise InvalidToken()

    # --- issue -------------------------------------------------------------------------------

    def issue(
        self,
        sa: dict[str, Any],
        audiences: list[str],
        expiration_seconds: int,
        bound: dict[str, Any] | None = None,
    ) -> tuple[str, int]:
        """A bound token for a ServiceAccount (TokenRequest); returns the token and its expiry."""
        meta = sa["metadata"]
        now = int(time.time())
        exp = now + expiration_seconds
        k8s: dict[str, Any] = {
            "namespace": meta.get("namespace", ""),
            "serviceaccount": {"name": meta["name"], "uid": meta.get("uid", "")},
        }
        if bound and bound.get("kind") in ("Secret", "Pod"):
            k8s[bound["kind"].lower()] = {"name": bound.get("name", ""), "uid": bound.get("uid", "")}
        claims = {
            "aud": audiences or [ISSUER],
            "exp": exp,
            "iat": now,
            "nbf": now,
            "iss": ISSUER,
            "jti": secrets.token_hex(16),
            "sub": f"{SA_PREFIX}{meta.get('namespace', '')}:{meta['name']}",
            "kubernetes.io": k8s,
        }
        return jwt.encode(claims, self._key, algorithm="HS256"), exp

    def legacy_token(self, sa: dict[str, Any], secret_name: str) -> str:
        """The never-expiring token the tokens controller writes into a service-account-token Secret."""
        meta = sa["metadata"]
        namespace = meta.get("namespace", "")
        claims = {
            "iss": LEGACY_ISSUER,
            "sub": f"{SA_PREFIX}{namespace}:{meta['name']}",
            "kubernetes.io/serviceaccount/namespace": namespace,
            "kubernetes.io/serviceaccount/secret.name": secret_name,
            "kubernetes.io/serviceaccount/service-account.name": meta["name"],
            "kubernetes.io/serviceaccount/service-account.uid": meta.get("uid", ""),
        }
        return jwt.encode(claims, self._key, algorithm="HS256")


def _audiences(claims: dict[str, Any]) -> list[str]:
    aud = claims.get("aud") or []
    return [aud] if isinstance(aud, str) else list(aud)


def impersonation_requested(headers: Any) -> bool:
    return any(h.lower().startswith("impersonate-") for h in headers)
