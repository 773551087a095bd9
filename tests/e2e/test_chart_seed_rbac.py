"""The chart's seed-mode RBAC, enforced: its ServiceAccounts, Roles and bindings applied to a sandbox
API server that runs with --authorization-mode=RBAC, and requests sent with the ServiceAccounts'
tokens. With seed.namespaces a process reads the Secrets of a listed namespace and is refused them
in any other; with seed.namespaceSelector the same grants hold in every namespace (why a list is
tighter, docs/install/seed.md). Both read Namespaces (the selector) and nothing else cluster-wide."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from mcm_sandbox.apiserver.kubeconfig import service_account_kubeconfig
from tests.chart_support import render
from tests.e2e.chart_world import Cluster, apply, start_cluster

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

RELEASE_NS = "mcm-system"
LISTED = ["shoot--dev--alpha", "shoot--dev--beta"]
OTHER = "shoot--dev--other"
SECRET = "generic-token-kubeconfig"
RBAC_KINDS = {"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    started = start_cluster(tmp_path, "seed")
    try:
        yield started
    finally:
        started.process.stop()


def _install(cluster: Cluster, tmp: Path, release: str, seed: dict[str, object]) -> None:
    docs = render(
        {"seed": {"enabled": True, **seed}}, "--namespace", RELEASE_NS, "--release-name", release, tmp=tmp
    )
    apply(cluster.admin, [d for d in docs if d["kind"] in RBAC_KINDS])


def _as(cluster: Cluster, tmp: Path, account: str) -> client.ApiClient:
    kubeconfig = service_account_kubeconfig(cluster.admin, RELEASE_NS, account, tmp / f"{account}.kubeconfig")
    return config.new_client_from_config(config_file=str(kubeconfig))


def _status(call: Callable[..., object], *args: object) -> int:
    """The status of the API server's error for ``call(*args)``, or 200 when it succeeded."""
    try:
        call(*args)
    except client.ApiException as err:
        return int(err.status)
    return 200


def test_seed_service_accounts_read_secrets_only_where_the_chart_grants(
    cluster: Cluster, tmp_path: Path
) -> None:
    _install(cluster, tmp_path, "mcm-tasks", {"namespaces": LISTED})
    _install(cluster, tmp_path, "wide", {"namespaceSelector": "gardener.cloud/role=shoot"})
    admin = client.CoreV1Api(config.new_client_from_config(config_file=str(cluster.admin)))
    for ns in [*LISTED, OTHER]:
        if ns == OTHER:  # the listed ones came with their Roles
            admin.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
        body = client.V1Secret(metadata=client.V1ObjectMeta(name=SECRET), string_data={"kubeconfig": "{}"})
        admin.create_namespaced_secret(ns, body)

    for component in ("informer", "worker"):
        api = _as(cluster, tmp_path, f"mcm-tasks-{component}")
        listed = client.CoreV1Api(api)
        for ns in LISTED:
            assert _status(listed.read_namespaced_secret, SECRET, ns) == 200, (component, ns)
            assert _status(listed.list_namespaced_secret, ns) == 200, (component, ns)
        assert _status(listed.read_namespaced_secret, SECRET, OTHER) == 403, component
        assert _status(listed.list_namespaced_secret, OTHER) == 403, component
        assert _status(listed.list_secret_for_all_namespaces) == 403, component
        assert _status(listed.list_namespace) == 200, component
        leases = client.CoordinationV1Api(api)
        lease = {"metadata": {"name": f"{component}-lease"}, "spec": {}}
        expected = 200 if component == "informer" else 403  # the informer's Lease, in the release namespace
        assert _status(leases.create_namespaced_lease, RELEASE_NS, lease) == expected, component
        assert _status(leases.create_namespaced_lease, LISTED[0], lease) == 403, component

        wide = client.CoreV1Api(_as(cluster, tmp_path, f"wide-mcm-tasks-{component}"))
        for ns in [*LISTED, OTHER]:
            assert _status(wide.read_namespaced_secret, SECRET, ns) == 200, (component, ns)
        assert _status(wide.list_secret_for_all_namespaces) == 200, component
