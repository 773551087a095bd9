"""A shoot namespace's target cluster read from the control cluster as Gardener lays it out
(``mcm_tasks/kube/target_secret_io.py``), against one sandbox API-server process whose root cluster
is the control cluster (the seed) and whose virtual cluster ``shoot-x`` is the shoot: the namespace's
``Cluster`` names the hash-suffixed generic token kubeconfig, whose ``tokenFile`` is resolved from
the shoot access Secret, and the resolved kubeconfig reaches the shoot with the official client."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from mcm_sandbox.procs import ApiServer, wait_until
from mcm_tasks.kube import clients
from mcm_tasks.kube.target_secret import (
    GENERIC_TOKEN_KUBECONFIG,
    GENERIC_TOKEN_KUBECONFIG_ANNOTATION,
    SHOOT_ACCESS_SECRET,
    SHOOT_TOKEN_PATH,
    TargetSecretError,
)
from mcm_tasks.kube.target_secret_io import read_target
from mcm_tasks.settings import configure, reset_settings
from mcm_tasks.tenancy import serving

pytestmark = pytest.mark.integration

SHOOT = "shoot-x"
HASHED = f"{GENERIC_TOKEN_KUBECONFIG}-0a1b2c3d"

#: gardener's ``extensions.gardener.cloud/v1alpha1`` Cluster, cut to what the test needs
CLUSTER_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "clusters.extensions.gardener.cloud"},
    "spec": {
        "group": "extensions.gardener.cloud",
        "scope": "Cluster",
        "names": {"plural": "clusters", "singular": "cluster", "kind": "Cluster", "listKind": "ClusterList"},
        "versions": [
            {
                "name": "v1alpha1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                },
            }
        ],
    },
}


@pytest.fixture(scope="module")
def seed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    server = ApiServer(
        tmp_path_factory.mktemp("seed"), name="seed", extra_args=["--virtual-cluster", SHOOT]
    ).start()
    yield server
    server.stop()


@pytest.fixture(name="control")
def control_fixture(seed: ApiServer) -> Iterator[client.ApiClient]:
    api = config.new_client_from_config(config_file=str(seed.kubeconfig))
    yield api
    api.close()


def b64(value: str | bytes) -> str:
    return base64.b64encode(value if isinstance(value, bytes) else value.encode()).decode()


def shoot_kubeconfig(seed: ApiServer) -> tuple[str, str, str]:
    """The shoot's server URL, CA (base64) and token, from the kubeconfig the sandbox wrote."""
    doc = yaml.safe_load(seed.cluster_kubeconfig(SHOOT).read_text())
    cluster = doc["clusters"][0]["cluster"]
    return cluster["server"], cluster["certificate-authority-data"], doc["users"][0]["user"]["token"]


def lay_out(control: client.ApiClient, seed: ApiServer, namespace: str, secret_name: str, token: str) -> None:
    """What gardenlet leaves in a shoot namespace: the generic token kubeconfig (its user only a
    ``tokenFile``) and the shoot access Secret with the token."""
    server, ca, _ = shoot_kubeconfig(seed)
    generic = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": namespace,
        "clusters": [{"name": namespace, "cluster": {"server": server, "certificate-authority-data": ca}}],
        "contexts": [{"name": namespace, "context": {"cluster": namespace, "user": namespace}}],
        "users": [{"name": namespace, "user": {"tokenFile": SHOOT_TOKEN_PATH}}],
    }
    core = client.CoreV1Api(control)
    core.create_namespace({"metadata": {"name": namespace}})
    core.create_namespaced_secret(
        namespace, {"metadata": {"name": secret_name}, "data": {"kubeconfig": b64(yaml.safe_dump(generic))}}
    )
    core.create_namespaced_secret(
        namespace, {"metadata": {"name": SHOOT_ACCESS_SECRET}, "data": {"token": b64(token)}}
    )


def test_the_target_cluster_named_by_the_cluster_resource_reaches_the_shoot(
    control: client.ApiClient, seed: ApiServer
) -> None:
    _, _, token = shoot_kubeconfig(seed)
    lay_out(control, seed, SHOOT, HASHED, token)
    client.ApiextensionsV1Api(control).create_custom_resource_definition(CLUSTER_CRD)
    custom = client.CustomObjectsApi(control)
    cluster = {
        "apiVersion": "extensions.gardener.cloud/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": SHOOT, "annotations": {GENERIC_TOKEN_KUBECONFIG_ANNOTATION: HASHED}},
    }

    def created() -> bool:
        try:
            custom.create_cluster_custom_object("extensions.gardener.cloud", "v1alpha1", "clusters", cluster)
        except client.ApiException as exc:
            if exc.status == 404:  # the CRD is not served yet
                return False
            raise
        return True

    wait_until(created, 15, what="the Cluster resource")
    target = read_target(control, SHOOT)
    assert target is not None
    assert HASHED in target.source and target.token == token
    shoot = config.new_client_from_config_dict(target.kubeconfig)
    try:
        client.CoreV1Api(shoot).create_node({"metadata": {"name": "in-the-shoot"}})
        assert "in-the-shoot" in [n.metadata.name for n in client.CoreV1Api(shoot).list_node().items]
    finally:
        shoot.close()
    assert "in-the-shoot" not in [n.metadata.name for n in client.CoreV1Api(control).list_node().items]


def test_a_rotated_token_changes_the_versions_and_a_stale_one_is_refused(
    control: client.ApiClient, seed: ApiServer
) -> None:
    namespace = "shoot-rotating"
    _, _, token = shoot_kubeconfig(seed)
    lay_out(control, seed, namespace, GENERIC_TOKEN_KUBECONFIG, token)
    before = read_target(control, namespace)  # no Cluster for it: the static name
    assert before is not None
    assert read_target(control, namespace, known=before.versions) is None  # unchanged: not parsed again
    core = client.CoreV1Api(control)
    core.patch_namespaced_secret(SHOOT_ACCESS_SECRET, namespace, {"data": {"token": b64("revoked-token")}})
    after = read_target(control, namespace, known=before.versions)
    assert (
        after is not None
        and after.versions[0] == before.versions[0]
        and after.versions[1] != before.versions[1]
    )
    shoot = config.new_client_from_config_dict(after.kubeconfig)
    try:
        with pytest.raises(client.ApiException) as refused:
            client.CoreV1Api(shoot).list_namespace()
        assert refused.value.status == 401
    finally:
        shoot.close()


def test_a_namespace_without_the_secrets_is_a_clear_error(control: client.ApiClient) -> None:
    client.CoreV1Api(control).create_namespace({"metadata": {"name": "shoot-empty"}})
    with pytest.raises(
        TargetSecretError, match=f"Secret shoot-empty/{GENERIC_TOKEN_KUBECONFIG} does not exist"
    ):
        read_target(control, "shoot-empty")


def test_a_worker_follows_the_secret_versions_the_informer_publishes(
    control: client.ApiClient, seed: ApiServer
) -> None:
    """Seed mode: every process read every namespace's Secrets once a minute. A worker now follows
    the versions the informer publishes in the registry: agreeing versions keep its clients past
    the minute; versions that moved on make it read the Secrets at its next use."""
    namespace = "shoot-followed"
    lay_out(control, seed, namespace, GENERIC_TOKEN_KUBECONFIG, shoot_kubeconfig(seed)[2])
    settings = configure({"control_kubeconfig": str(seed.kubeconfig), "namespaces": namespace})
    try:
        with serving(namespace, settings) as view:
            first = clients.tenant_clusters(view)
            published = clients.tenant_versions(namespace)
            assert published is not None
            clients.note_published_versions({namespace: published})  # the informer read the same
            client.CoreV1Api(control).patch_namespaced_secret(
                SHOOT_ACCESS_SECRET, namespace, {"data": {"token": b64("rotated-token")}}
            )
            clients._tenants[namespace].checked_at -= clients.TENANT_RECHECK + 1  # a minute on
            assert clients.tenant_clusters(view) is first, "followed: not read again each minute"
            rotated = read_target(control, namespace)
            assert rotated is not None and rotated.versions != published
            clients.note_published_versions({namespace: rotated.versions})  # the informer saw it
            assert clients.tenant_clusters(view) is not first
            assert clients.tenant_versions(namespace) == rotated.versions
    finally:
        clients.forget_tenant(namespace)
        reset_settings()


def test_a_401_from_the_target_makes_the_tenants_secrets_read_again_at_once(
    control: client.ApiClient, seed: ApiServer
) -> None:
    """The Secrets are read again every five minutes, and at once when the target refuses the token
    (a rotated one): the next use builds clients from the Secrets as they are now."""
    namespace = "shoot-refused"
    lay_out(control, seed, namespace, GENERIC_TOKEN_KUBECONFIG, "revoked-token")
    settings = configure({"control_kubeconfig": str(seed.kubeconfig), "namespaces": namespace})
    try:
        with serving(namespace, settings) as view:
            first = clients.tenant_clusters(view)
            assert first.target is not None
            with pytest.raises(client.ApiException) as refused:
                client.CoreV1Api(first.target.api).list_namespace()
            assert refused.value.status == 401
            client.CoreV1Api(control).patch_namespaced_secret(
                SHOOT_ACCESS_SECRET, namespace, {"data": {"token": b64(shoot_kubeconfig(seed)[2])}}
            )
            second = clients.tenant_clusters(view)
            assert second is not first and second.target is not None
            assert client.CoreV1Api(second.target.api).list_namespace().items is not None
            assert clients.tenant_clusters(view) is second  # read once, not at every use
    finally:
        clients.forget_tenant(namespace)
        reset_settings()
