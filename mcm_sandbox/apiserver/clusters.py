"""Many clusters in one API-server process: virtual clusters under ``/clusters/<name>/``.

A seed hosts one to two hundred shoots, and the multi-namespace mode (issue 33) needs a target
cluster per shoot namespace. A sandbox API-server process per target cluster would cost tens of
megabytes each and a core's share of idle wake-ups; here one process serves a root cluster at
``/`` (the control cluster, exactly as a single-cluster server) and any number of virtual clusters,
each a whole :class:`~mcm_sandbox.apiserver.app.Server` of its own: its own store (objects,
resourceVersion counter, watch history), registry (CRDs), watches, fault rules, token signing key
and a static bearer token of its own, so a token of one cluster is 401 in another. A virtual
cluster is reached at ``<url>/clusters/<name>`` (kubectl and the official client take a server URL
with a path, as Rancher's ``/k8s/clusters/<id>`` does), and the request goes on to its server with
that prefix removed, so every path below it is the Kubernetes REST layout unchanged.

Clusters are added at start (``mcm-tasks sandbox apiserver --virtual-cluster NAME`` or
``--virtual-clusters N``) or while running through the root cluster's admin endpoint
``/sandbox/clusters`` (GET lists them, POST ``{"name": …}`` adds one and answers its server URL and
token, DELETE ``/sandbox/clusters/<name>`` removes one and ends its watches), which the root
cluster's credential guards (with RBAC: a ``system:masters`` user). An idle virtual cluster runs no
timer of its own: its cost is the memory of its bootstrap objects (measured by
``bench/sandbox_clusters.py``).
"""

from __future__ import annotations

import dataclasses
import re
import secrets
from pathlib import Path
from typing import Any

from aiohttp import web
from yarl import URL

from mcm_sandbox.apiserver import errors, wire
from mcm_sandbox.apiserver.app import Server
from mcm_sandbox.apiserver.authn import CURRENT_USER
from mcm_sandbox.apiserver.kubeconfig import write_kubeconfig
from mcm_sandbox.apiserver.store import loads

PREFIX = "/clusters/"
ADMIN_PATH = "/sandbox/clusters"
#: a DNS label, as a namespace name: it is a URL path segment and a file name
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
#: what the root's admin user belongs to (kube-apiserver's superuser group)
MASTERS = "system:masters"


class ClusterHost:
    """The root server and the virtual clusters, behind one aiohttp route."""

    def __init__(self, root: Server, kubeconfig_dir: Path | None = None) -> None:
        self.root = root
        self.clusters: dict[str, Server] = {}
        #: where each virtual cluster's kubeconfig is written (``<name>.kubeconfig``), if anywhere
        self.kubeconfig_dir = kubeconfig_dir
        self.url = ""  # the root's URL, known once the process listens
        self.ca_pem = b""
        self._served: tuple[str, int] | None = None  # host and port, once listening

    # --- clusters ----------------------------------------------------------------------------

    def add(self, name: str, token: str = "") -> Server:
        """A new virtual cluster with the root's options and a token of its own (random unless
        given). Before the process listens it is bootstrapped at start-up, else at once (on the
        loop: its controllers schedule work there)."""
        if not _NAME.match(name):
            raise errors.bad_request(f"invalid cluster name {name!r}: must be a DNS label (a-z, 0-9, '-')")
        if name in self.clusters:
            raise errors.already_exists("clusters", "sandbox", name)
        opts = dataclasses.replace(self.root.opts, token=token or secrets.token_urlsafe(24))
        server = Server(opts)
        self.clusters[name] = server
        if self._served is not None:
            self._start(name)
        return server

    def remove(self, name: str) -> None:
        server = self.clusters.pop(name, None)
        if server is None:
            raise errors.not_found("clusters", "sandbox", name)
        for watcher in list(server.watchers):
            watcher.cut_now()
        path = self.kubeconfig_path(name)
        if path is not None:
            path.unlink(missing_ok=True)

    def cluster_url(self, name: str) -> str:
        return f"{self.url}{PREFIX}{name}"

    def kubeconfig_path(self, name: str) -> Path | None:
        return self.kubeconfig_dir / f"{name}.kubeconfig" if self.kubeconfig_dir is not None else None

    def _start(self, name: str) -> None:
        server = self.clusters[name]
        server.opts.server_address = self.root.opts.server_address
        server.bootstrap()
        assert self._served is not None
        server.publish_kubernetes_service(*self._served)
        path = self.kubeconfig_path(name)
        if path is not None:
            write_kubeconfig(path, self.cluster_url(name), server.opts.token, name=name, ca_pem=self.ca_pem)

    def serving(self, host: str, port: int, url: str, ca_pem: bytes = b"") -> None:
        """The process listens: publish ``default/kubernetes`` in every cluster, bootstrap the
        virtual clusters added before start (the root bootstraps on the app's start-up) and write
        their kubeconfigs."""
        self._served = (host, port)
        self.url = url
        self.ca_pem = ca_pem
        self.root.publish_kubernetes_service(host, port)
        for name in self.clusters:
            self._start(name)

    # --- HTTP --------------------------------------------------------------------------------

    def make_app(self) -> web.Application:
        app = web.Application(client_max_size=wire.MAX_BODY + 1)
        app.router.add_route("*", "/{tail:.*}", self.dispatch)

        async def on_startup(_: web.Application) -> None:
            self.root.bootstrap()

        async def on_shutdown(_: web.Application) -> None:
            for server in (self.root, *self.clusters.values()):
                for watcher in list(server.watchers):
                    watcher.cut_now()

        app.on_startup.append(on_startup)
        app.on_shutdown.append(on_shutdown)
        return app

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        raw = request.rel_url.raw_path
        if raw.startswith(PREFIX):
            name, _, rest = raw[len(PREFIX) :].partition("/")
            server = self.clusters.get(name)
            if server is None:
                err = errors.not_found_path()
                return wire.json_response(err.status(), err.code)
            inner = URL.build(path="/" + rest, query_string=request.rel_url.raw_query_string, encoded=True)
            return await server.dispatch(request.clone(rel_url=inner))
        if raw.rstrip("/") == ADMIN_PATH or raw.startswith(ADMIN_PATH + "/"):
            try:
                return await self._admin(request)
            except errors.ApiError as exc:
                return wire.json_response(exc.status(), exc.code, exc.headers)
        return await self.root.dispatch(request)

    async def _admin(self, request: web.Request) -> web.Response:
        user = self.root.authenticate(request)
        CURRENT_USER.set(user)
        if self.root.authorizer is not None and MASTERS not in user.groups:
            raise errors.forbidden("clusters", "sandbox", "", f'User "{user.name}" is not in {MASTERS}')
        parts = [p for p in request.rel_url.path.split("/") if p]
        if request.method == "GET" and len(parts) == 2:
            return wire.json_response({"items": [self.describe(n) for n in sorted(self.clusters)]})
        if request.method == "POST" and len(parts) == 2:
            try:
                body = loads(await request.read())
            except ValueError as exc:
                raise errors.bad_request(f"invalid body: {exc}") from exc
            if not isinstance(body, dict) or not isinstance(body.get("name"), str):
                raise errors.bad_request('the body must be {"name": "<cluster name>"}')
            token = body.get("token") or ""
            if not isinstance(token, str):
                raise errors.bad_request("token must be a string")
            self.add(body["name"], token)
            return wire.json_response(self.describe(body["name"], with_token=True), 201)
        if request.method == "DELETE" and len(parts) == 3:
            self.remove(parts[2])
            return wire.json_response(errors.success())
        raise errors.method_not_allowed()

    def describe(self, name: str, with_token: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {"name": name, "server": self.cluster_url(name)}
        if with_token:
            out["token"] = self.clusters[name].opts.token
        return out
