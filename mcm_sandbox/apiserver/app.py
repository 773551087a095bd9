"""The HTTP edge of one cluster: authenticates, negotiates, reads bodies and turns errors into Status
objects, then hands the parsed request to the verbs (``endpoints.serve``). ``clusters.ClusterHost``
routes a process's requests to its clusters' servers (one, unless virtual clusters are added)."""

from __future__ import annotations

import ipaddress
import logging
import secrets
import traceback
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from mcm_sandbox.apiserver import (
    discovery,
    endpoints,
    errors,
    openapi,
    rbac,
    wire,
)
from mcm_sandbox.apiserver.admission import Admission
from mcm_sandbox.apiserver.authn import ANONYMOUS, CURRENT_USER, Authenticator, InvalidToken, UserInfo
from mcm_sandbox.apiserver.controllers import Controllers
from mcm_sandbox.apiserver.defaults import SERVICE_CIDR
from mcm_sandbox.apiserver.deletion import Deleter, PodGraceMode
from mcm_sandbox.apiserver.disruption import Disruption
from mcm_sandbox.apiserver.faultgate import DropConnection, FaultGate
from mcm_sandbox.apiserver.handlers import Api
from mcm_sandbox.apiserver.impersonation import impersonate
from mcm_sandbox.apiserver.resources import Registry
from mcm_sandbox.apiserver.routing import Discovery, Target, resolve
from mcm_sandbox.apiserver.store import DEFAULT_HISTORY_WINDOW, Store
from mcm_sandbox.apiserver.watch import DEFAULT_BOOKMARK_INTERVAL, Watcher

log = logging.getLogger("mcm_sandbox.apiserver")

PUBLIC_PATHS = ("/healthz", "/readyz", "/livez", "/version")
BOOT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


@dataclass
class ServerOptions:
    token: str = ""
    history_window: int = DEFAULT_HISTORY_WINDOW
    pod_grace_mode: PodGraceMode = PodGraceMode.TIMER
    # kube-apiserver's cadence; tests that need bookmarks sooner ask for a shorter one
    bookmark_interval: float = DEFAULT_BOOKMARK_INTERVAL
    server_address: str = "127.0.0.1:6443"
    # kube-apiserver's --authorization-mode: AlwaysAllow (the default here) or RBAC.
    authorization_mode: str = "AlwaysAllow"
    # Also serve HTTPS on this port (0: any free one), and point the kubeconfig there.
    secure_port: int | None = None
    # Serve pods/eviction (and list it in discovery); off, a cluster without the subresource.
    eviction: bool = True


class Server:
    def __init__(self, opts: ServerOptions) -> None:
        self.opts = opts
        self.store = Store(opts.history_window)
        self.registry = Registry()
        if not opts.eviction:
            self.registry.drop_eviction()
        self.api = Api(self.store, self.registry, Admission(self.store, self.registry))
        self.deleter = Deleter(self.api, opts.pod_grace_mode)
        self.watchers: set[Watcher] = set()
        self.faults = FaultGate(self.watchers)
        self.ready = False
        if opts.authorization_mode == "RBAC" and not opts.token:
            opts.token = secrets.token_urlsafe(32)  # the admin kubeconfig needs a credential
        self.authenticator = Authenticator(self.store, opts.token)
        self.authorizer = rbac.Authorizer(self.store) if opts.authorization_mode == "RBAC" else None
        self.api.admission.tokens = self.authenticator
        self.api.admission.authorizer = self.authorizer

    def bootstrap(self) -> None:
        """Runs on the loop (controllers schedule work with it): the namespaces a cluster starts with."""
        self.controllers = Controllers(self.deleter)
        self.disruption = Disruption(self.deleter)
        ns_rt = self.registry.get("", "v1", "namespaces")
        assert ns_rt is not None
        for name in BOOT_NAMESPACES:
            self.api.create(ns_rt, None, {"metadata": {"name": name}}, manager="kube-apiserver")
        for plural, body in rbac.bootstrap_objects():
            rt = self.registry.get(rbac.RBAC_GROUP, "v1", plural)
            assert rt is not None
            self.api.create(rt, None, body, manager="kube-apiserver")
        self.ready = True

    def publish_kubernetes_service(self, host: str, port: int) -> None:
        """``default/kubernetes``: the Service and Endpoints kube-apiserver keeps for itself
        (``kubernetesservice`` and the endpoint reconciler), so clients that list endpoints or
        resolve the API server from inside find it. Called once the serving port is known."""
        try:
            ip = str(ipaddress.ip_address(host))
        except ValueError:
            ip = "127.0.0.1"
        labels = {"component": "apiserver", "provider": "kubernetes"}
        https = {"name": "https", "protocol": "TCP"}
        svc_rt = self.registry.get("", "v1", "services")
        ep_rt = self.registry.get("", "v1", "endpoints")
        assert svc_rt is not None and ep_rt is not None
        first_ip = str(next(SERVICE_CIDR.hosts()))
        svc_spec = {
            "type": "ClusterIP",
            "clusterIP": first_ip,
            "ports": [{**https, "port": 443, "targetPort": port}],
        }
        self.api.create(
            svc_rt,
            "default",
            {"metadata": {"name": "kubernetes", "labels": labels}, "spec": svc_spec},
            manager="kube-apiserver",
        )
        endpoints = {
            "metadata": {"name": "kubernetes", "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
            "subsets": [{"addresses": [{"ip": ip}], "ports": [{**https, "port": port}]}],
        }
        self.api.create(ep_rt, "default", endpoints, manager="kube-apiserver")

    # --- request entry -----------------------------------------------------------------------

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        try:
            return await self._dispatch(request)
        except errors.ApiError as exc:
            return wire.json_response(exc.status(), exc.code, exc.headers)
        except DropConnection:
            if request.transport is not None:
                request.transport.close()
            return web.Response(status=503)
        except web.HTTPRequestEntityTooLarge:
            too_large = errors.too_large()
            return wire.json_response(too_large.status(), too_large.code)
        except Exception as exc:  # a bug must answer 500, never take the server down
            log.error("internal error on %s %s:\n%s", request.method, request.path, traceback.format_exc())
            err = errors.internal(f"{type(exc).__name__}: {exc}")
            return wire.json_response(err.status(), err.code)

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        if path in PUBLIC_PATHS or path.startswith(("/readyz/", "/livez/", "/healthz/")):
            return self._health(path)
        user = self.authenticate(request)
        CURRENT_USER.set(user)
        found: Target | Discovery | None = None
        missing: errors.ApiError | None = None
        if not path.startswith(("/sandbox/", "/openapi")):
            try:
                found = resolve(self.registry, path)
            except errors.ApiError as exc:  # authorized as a path first, as upstream does
                missing = exc
        query = wire.query_of(request)
        verb = (
            self._verb(request.method, found, query) if isinstance(found, Target) else request.method.lower()
        )
        self._authorize(user, path, verb, found)
        if missing is not None:
            raise missing
        if path.startswith("/sandbox/faults"):
            return await self.faults.admin(request)
        if path.rstrip("/") == "/openapi/v3":
            return wire.document(openapi.index(self.registry))
        if path.startswith("/openapi/v3/"):
            doc = openapi.group_version_bytes(self.registry, path[len("/openapi/v3/") :])
            if doc is None:
                raise errors.not_found_path()
            return wire.document(doc)
        if path.rstrip("/") == "/openapi/v2":
            # kubectl asks for protobuf only (and copes without it); JSON clients get the document
            if "json" not in request.headers.get(
                "Accept", "application/json"
            ) and "*/*" not in request.headers.get("Accept", ""):
                raise errors.not_acceptable(request.headers.get("Accept", ""))
            return wire.document(openapi.swagger_v2(self.registry))
        if path.startswith("/openapi/") or found is None:
            raise errors.not_found_path()
        if isinstance(found, Discovery):
            return self._discovery(found)
        await self.faults.gate(verb, found.resource)
        return await endpoints.serve(self, request, found, verb, query, user)

    def _health(self, path: str) -> web.Response:
        if path == "/version":
            return wire.document(discovery.VERSION_INFO)
        if not self.ready:
            return web.Response(status=503, text="not ready")
        return web.Response(text="ok", content_type="text/plain")

    def authenticate(self, request: web.Request) -> UserInfo:
        """Who is asking: 401 for a bad credential, or for none when a token is required without RBAC
        (with RBAC the request goes on as system:anonymous, and RBAC decides)."""
        try:
            user = self.authenticator.authenticate(request.headers.get("Authorization", ""))
        except InvalidToken:
            raise errors.unauthorized() from None
        if user is ANONYMOUS and self.opts.token and self.authorizer is None:
            raise errors.unauthorized()
        return impersonate(user, request.headers, self.authorizer)

    def _authorize(self, user: UserInfo, path: str, verb: str, found: Target | Discovery | None) -> None:
        if self.authorizer is None:
            return
        if isinstance(found, Target):
            rt = found.rt
            namespace = found.namespace or ""
            if rt.storage == "namespaces" and found.name:
                namespace = found.name  # upstream's RequestInfo: a namespace is inside itself
            attrs = rbac.Attributes(
                user, verb, namespace, rt.group, rt.plural, found.sub or "", found.name or "", path
            )
        else:
            attrs = rbac.Attributes(user, verb, path=path, resource_request=False)
        allowed, reason = self.authorizer.authorize(attrs)
        if not allowed:
            raise errors.rbac_forbidden(attrs, reason)

    def _discovery(self, found: Discovery) -> web.Response:
        body: dict[str, Any] | None
        if found.legacy and found.group is None:
            body = discovery.api_versions(self.opts.server_address)
        elif found.group is None:
            body = discovery.api_group_list(self.registry)
        elif found.version is None:
            body = discovery.api_group(self.registry, found.group)
        else:
            body = discovery.api_resource_list(self.registry, found.group, found.version)
        if body is None:
            raise errors.not_found_path()
        return wire.json_response(body)

    @staticmethod
    def _verb(method: str, t: Target, query: dict[str, str]) -> str:
        if method == "GET":
            if t.name is None:
                return "watch" if t.watch_path or query.get("watch", "").lower() in ("true", "1") else "list"
            return "get"
        verbs = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
        verb = verbs.get(method)
        if verb is None:
            raise errors.method_not_allowed()
        if verb == "delete" and t.name is None:
            return "deletecollection"
        return verb
