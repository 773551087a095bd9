"""Clients of the control cluster (Machines, MachineSets, … and their Secrets) and the target
cluster (Nodes, Pods, volumes), built the way MCM builds them from its flags.

``--control-kubeconfig`` / ``--target-kubeconfig``: a path, ``inClusterConfig`` (upstream's word) or
``""`` for the pod's ServiceAccount, or (target only) ``none`` for no target cluster. Each cluster
gets one ``ApiClient`` per process, rate limited through the cluster's shared bucket in Redis (``ratelimit``).

Processes fork (Celery prefork): a urllib3 pool inherited from the parent would share sockets with
it, so ``get_clusters()`` builds new clients in each process and never hands a child its
parent's.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from kubernetes import client
from kubernetes import config as k8s_config
from kubernetes.client import ApiClient, Configuration
from kubernetes.client.exceptions import ApiException

from mcm_tasks import kinds
from mcm_tasks.kube import credentials_io, rest
from mcm_tasks.kube.credentials import IN_CLUSTER, ClusterConfigError
from mcm_tasks.kube.errors import is_not_found
from mcm_tasks.kube.ratelimit import cluster_bucket, install_rate_limit
from mcm_tasks.kube.resources import MACHINE_API_VERSION, Resource
from mcm_tasks.kube.target_secret import TargetConfig, TargetSecretError
from mcm_tasks.kube.target_secret_io import read_target
from mcm_tasks.settings import SCOPED, Settings, get_settings
from mcm_tasks.tenancy import is_tenant

log = logging.getLogger(__name__)

TARGET_DISABLED = "none"
__all__ = ["IN_CLUSTER", "ClusterConfigError", "ControlPlaneNotReady", "load_configuration"]
CONTROL = "control"
TARGET = "target"


class ControlPlaneNotReady(RuntimeError):
    """The control cluster is unreachable, unhealthy, or does not serve MCM's resources."""


def load_configuration(kubeconfig: str, setting: str, environ: dict[str, str] | None = None) -> Configuration:
    """A client configuration from a kubeconfig path, or the pod's ServiceAccount for
    ``inClusterConfig`` (and for an empty path inside a pod), carrying credentials that the request
    edge keeps current (``credentials_io``: token files re-read, exec plugins re-run, a 401 retried).

    Outside a pod an empty path is an error, as it is for MCM (clientcmd falls back to an empty
    configuration there, which cannot reach anything).
    """
    return credentials_io.load_configuration(kubeconfig, setting, environ)


@dataclass
class Cluster:
    """One cluster's ``ApiClient`` and the typed APIs over it (all sharing its pool and limit)."""

    name: str
    api: ApiClient

    @cached_property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @cached_property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    @cached_property
    def policy(self) -> client.PolicyV1Api:
        return client.PolicyV1Api(self.api)

    @cached_property
    def storage(self) -> client.StorageV1Api:
        return client.StorageV1Api(self.api)

    @cached_property
    def coordination(self) -> client.CoordinationV1Api:
        return client.CoordinationV1Api(self.api)

    @property
    def host(self) -> str:
        return str(self.api.configuration.host)

    def close(self) -> None:
        self.api.close()


@dataclass
class Clusters:
    control: Cluster
    #: None in no-target mode (``--target-kubeconfig=none``)
    target: Cluster | None
    pid: int = field(default_factory=os.getpid)

    def require_target(self) -> Cluster:
        if self.target is None:
            raise ClusterConfigError("no target cluster: --target-kubeconfig=none")
        return self.target

    def close(self) -> None:
        self.control.close()
        if self.target is not None and self.target is not self.control:
            self.target.close()


def new_cluster(name: str, kubeconfig: str, settings: Settings) -> Cluster:
    """A cluster client; rate limited through Redis unless no Redis URL is configured."""
    return cluster_of(name, load_configuration(kubeconfig, f"{name}_kubeconfig"), settings)


def cluster_of(name: str, configuration: Configuration, settings: Settings) -> Cluster:
    """A client over ``configuration`` with the request edge, rate limited through the cluster's
    bucket in Redis (the settings' key prefix: a seed-mode tenant's own) unless no Redis URL is
    configured."""
    api = ApiClient(configuration)
    api.user_agent = f"mcm-tasks/{name}"
    if settings.redis_url:
        bucket = cluster_bucket(name, settings.kube_api_qps, settings.kube_api_burst, settings.redis_url)
        install_rate_limit(api, bucket)
    else:
        rest.install_edge(api)
    return Cluster(name, api)


def leader_election_client(settings: Settings) -> ApiClient:
    """The control cluster's client for leader election, outside the shared request budget, as
    upstream MCM builds a client of its own for it (``leaderElectionClient``, with a limiter of its
    own). A renewal must not wait behind the fleet's requests for a token (past
    ``--leader-elect-renew-deadline`` the leader steps down), and its pace is fixed (a GET and a PUT
    per ``--leader-elect-retry-period``), too slow to burden the API server. Through the shared
    bucket each renewal cost two Redis scripts, every 2 s, at rest."""
    api = ApiClient(load_configuration(settings.control_kubeconfig, "control_kubeconfig"))
    api.user_agent = "mcm-tasks/leader-election"
    rest.install_edge(api)
    return api


def build_clusters(settings: Settings | None = None) -> Clusters:
    s = settings or get_settings()
    control = new_cluster(CONTROL, s.control_kubeconfig, s)
    target = None if s.target_kubeconfig == TARGET_DISABLED else new_cluster(TARGET, s.target_kubeconfig, s)
    return Clusters(control, target)


_lock = threading.Lock()
_current: Clusters | None = None


def get_clusters() -> Clusters:
    """This process's clients, built on first use from the settings; a forked child builds its own.
    While a seed-mode tenant's work runs (``mcm_tasks.tenancy``), the tenant's clients."""
    scoped = SCOPED.get()
    if scoped is not None and is_tenant(scoped):
        return tenant_clusters(scoped)
    global _current
    found = _current
    if found is not None and found.pid == os.getpid():
        return found
    with _lock:
        if _current is None or _current.pid != os.getpid():
            # the parent's clients are dropped, not closed: closing would touch sockets it still uses
            _current = build_clusters()
        return _current


def reset_clusters() -> None:
    """Close and forget this process's clients (settings changed; tests)."""
    global _current
    with _lock:
        if _current is not None and _current.pid == os.getpid():
            _current.close()
        _current = None
        _tenants.clear()
        _published.clear()


# --- seed mode: a tenant's clients --------------------------------------------------------------

#: a tenant's target Secrets are read again this often (a moved API server, a CA rotated), and at
#: once after its target answered 401 (a rotated token: Gardener renews it hours before the old one
#: expires); a minute made every process read every namespace's Secrets 50 times a minute in a seed
TENANT_RECHECK = 300.0
#: a tenant whose Secrets could not be read is tried again after this (its passes fail meanwhile)
TENANT_RETRY = 5.0
#: a worker that follows the versions the informer publishes (``note_published_versions``) reads a
#: tenant's Secrets itself this seldom, as a backstop: the informer reads them every TENANT_RECHECK
TENANT_RECHECK_FOLLOWED = 900.0
#: published versions older than this are not followed (the registry is no longer being read)
PUBLISHED_FRESH = 30.0


@dataclass
class _Tenant:
    clusters: Clusters | None
    versions: tuple[str, ...]
    checked_at: float
    problem: Exception | None = None


_tenants: dict[str, _Tenant] = {}
#: namespace → (its target Secrets' resourceVersions as the informer last published them, when noted)
_published: dict[str, tuple[tuple[str, ...], float]] = {}


def note_published_versions(versions: Mapping[str, Sequence[str]]) -> None:
    """The target Secrets' resourceVersions as the informer read them, per namespace (seed mode's
    registry, followed by the workers' ``seed_queues``). Every process used to read every tenant's
    Secrets once a minute; a worker now follows the informer's reads: a tenant whose published
    versions moved on from those its clients were built from is read again at its next use, and
    one whose versions agree only every ``TENANT_RECHECK_FOLLOWED``."""
    now = time.monotonic()
    for namespace, raw in versions.items():
        current = tuple(str(v) for v in raw)
        before = _published.get(namespace)
        _published[namespace] = (current, now)
        found = _tenants.get(namespace)
        if before is not None and before[0] != current and found is not None and found.versions != current:
            found.checked_at = -math.inf  # rotated: read at the next use
    for namespace in set(_published) - set(versions):
        _published.pop(namespace, None)


def tenant_versions(namespace: str) -> tuple[str, ...] | None:
    """The resourceVersions of the target Secrets this process's clients of ``namespace`` were
    built from; None when it has none."""
    found = _tenants.get(namespace)
    return found.versions if found is not None and found.clusters is not None else None


def _recheck_period(namespace: str, found: _Tenant, now: float) -> float:
    if found.problem is not None:
        return TENANT_RETRY
    published = _published.get(namespace)
    if published is not None and now - published[1] < PUBLISHED_FRESH and published[0] == found.versions:
        return TENANT_RECHECK_FOLLOWED
    return TENANT_RECHECK


def target_from_config(config: TargetConfig, settings: Settings) -> Cluster:
    """A client of a tenant's target cluster from its resolved kubeconfig (the token inline: read
    from the Secret, never from a file), rate limited by the tenant's own bucket. A 401 from it
    makes the tenant's Secrets be read again at the next use (``tenant_unauthorized``)."""
    configuration = Configuration()
    k8s_config.load_kube_config_from_dict(config.kubeconfig, client_configuration=configuration)
    cluster = cluster_of(TARGET, configuration, settings)
    edge = cluster.api.rest_client
    if isinstance(edge, rest.EdgeRESTClient):
        edge.on_unauthorized = functools.partial(tenant_unauthorized, config.namespace, cluster)
    return cluster


def tenant_unauthorized(namespace: str, target: Cluster) -> None:
    """The tenant's target refused the token of ``target`` (rotated in its Secret): read the Secrets
    at the next ``tenant_clusters``, unless clients from newer Secrets are already in use."""
    found = _tenants.get(namespace)
    if found is not None and found.clusters is not None and found.clusters.target is target:
        if found.checked_at != -math.inf:
            log.warning(
                "namespace %s: the target cluster answered 401: its Secrets are read again", namespace
            )
        found.checked_at = -math.inf


_seed_control: tuple[int, str, Configuration] | None = None


def tenant_control(settings: Settings) -> Cluster:
    """A tenant's client of the control cluster: the process's one configuration (its credentials
    re-read once for all tenants, not once per tenant) and its one connection pool
    (``rest.share_pool``), with a rate-limit bucket of its own."""
    global _seed_control
    if _seed_control is None or _seed_control[:2] != (os.getpid(), settings.control_kubeconfig):
        configuration = load_configuration(settings.control_kubeconfig, "control_kubeconfig")
        _seed_control = (os.getpid(), settings.control_kubeconfig, configuration)
    cluster = cluster_of(CONTROL, _seed_control[2], settings)
    rest.share_pool(cluster.api)
    return cluster


def tenant_clusters(settings: Settings) -> Clusters:
    """The tenant's clients: the control cluster's through the tenant's own budget (each namespace
    gets the request rate one Go MCM would) and the target cluster from the namespace's Secrets,
    read again every ``TENANT_RECHECK`` and rebuilt when either changed. A namespace whose Secrets
    are missing or refused raises ``TargetSecretError`` (its passes fail and back off, its queue
    only)."""
    namespace = settings.namespace
    now = time.monotonic()
    found = _tenants.get(namespace)
    if found is not None and now - found.checked_at < _recheck_period(namespace, found, now):
        if found.problem is not None:  # the cached refusal, without the last raise's traceback
            raise found.problem.with_traceback(None)
        assert found.clusters is not None
        return found.clusters
    with _lock:
        found = _tenants.get(namespace)
        if found is not None and found.clusters is not None and found.clusters.pid != os.getpid():
            found = None  # the parent's, in a forked child
        control = found.clusters.control if found is not None and found.clusters is not None else None
        if control is None:
            control = tenant_control(settings)
        known = found.versions if found is not None and found.clusters is not None else ()
        try:
            config = read_target(control.api, namespace, settings.target_kubeconfig_secret, known=known)
        except (TargetSecretError, ApiException) as err:
            if found is not None and found.clusters is not None and not isinstance(err, TargetSecretError):
                found.checked_at = now  # a blip: keep the clients in use, look again later
                return found.clusters
            _tenants[namespace] = _Tenant(None, (), now, err)
            raise
        if config is None or (
            found is not None and found.clusters is not None and found.versions == config.versions
        ):
            assert found is not None and found.clusters is not None
            found.checked_at = now
            return found.clusters
        # the old clients are dropped, not closed: a pass of another thread may be using them
        clusters = Clusters(control, target_from_config(config, settings))
        _tenants[namespace] = _Tenant(clusters, config.versions, now)
        log.info("namespace %s: target cluster %s from %s", namespace, config.server, config.source)
        return clusters


def forget_tenant(namespace: str) -> None:
    """Drop a namespace no longer served (its clients go with the last pass using them)."""
    with _lock:
        _tenants.pop(namespace, None)
        _published.pop(namespace, None)


# --- start-up check ------------------------------------------------------------------------------


def wait_for_healthz(cluster: Cluster, timeout: float = 10.0, interval: float = 1.0) -> None:
    """Poll ``/healthz`` until it answers 200, like MCM's start-up (1 s poll, 10 s)."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while True:
        try:
            code, text = rest.get_text(cluster.api, "/healthz", timeout=max(interval, 1.0))
            if code == 200:
                return
            last = f"{code} {text.strip()[:200]}"
        except Exception as err:  # connection refused, DNS, TLS: all mean "not yet"
            last = f"{type(err).__name__}: {err}"
        if time.monotonic() >= deadline:
            raise ControlPlaneNotReady(
                f"{cluster.name} cluster API server {cluster.host} not healthy after {timeout:g}s: {last}"
            )
        time.sleep(interval)


def served_resources(cluster: Cluster, group_version: str) -> set[str]:
    """Plurals the server lists under a group/version (discovery); empty when it is not served."""
    path = f"/apis/{group_version}" if "/" in group_version else f"/api/{group_version}"
    try:
        doc: dict[str, Any] = rest.request(cluster.api, "GET", path)
    except ApiException as err:
        if is_not_found(err):
            return set()
        raise
    return {str(r.get("name")) for r in doc.get("resources") or [] if "/" not in str(r.get("name"))}


def check_control_cluster(
    clusters: Clusters,
    *,
    timeout: float = 10.0,
    interval: float = 1.0,
    required: tuple[Resource, ...] = kinds.MCM_RESOURCES,
) -> None:
    """MCM's start-up check: the control API server is healthy and serves MCM's resources.

    Worker and informer commands call this before anything else, so a missing CRD is one clear
    message at start instead of a stream of 404s later.
    """
    wait_for_healthz(clusters.control, timeout, interval)
    served = served_resources(clusters.control, MACHINE_API_VERSION)
    missing = sorted(r.plural for r in required if r.plural not in served)
    if missing:
        raise ControlPlaneNotReady(
            f"control cluster {clusters.control.host} does not serve {MACHINE_API_VERSION} "
            f"{', '.join(missing)}: install the CRDs (`mcm-tasks crds | kubectl apply -f -`)"
        )
    log.info("control cluster %s ready, serving %s", clusters.control.host, MACHINE_API_VERSION)
