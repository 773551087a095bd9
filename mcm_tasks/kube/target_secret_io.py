"""Reads a shoot namespace's target Secrets from the control cluster and resolves them
(``target_secret`` decides). Groundwork of the seed mode, not wired into any process yet (see
``target_secret``'s docstring).

Three reads, each a GET: the namespace's ``extensions.gardener.cloud/v1alpha1`` ``Cluster`` (only
when no Secret name is configured: it names the hash-suffixed generic kubeconfig Secret; a cluster
without that resource, or an installation not allowed to read it, falls back to the static name, as
upstream does without the annotation), the generic kubeconfig Secret, and the shoot access Secret
when the kubeconfig's ``tokenFile`` asks for it. A missing Secret is a :class:`TargetSecretError`;
any other API error is raised as it came (the caller retries those).
"""

from __future__ import annotations

from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from mcm_tasks.kube import errors, rest
from mcm_tasks.kube.target_secret import (
    SHOOT_ACCESS_SECRET,
    SecretRef,
    TargetConfig,
    kubeconfig_secret_name,
    resolve,
    unchanged_versions,
)

#: the cluster-scoped ``Cluster`` resource gardenlet keeps per shoot namespace (named as it)
CLUSTER_PATH = "/apis/extensions.gardener.cloud/v1alpha1/clusters/{namespace}"


def read_cluster_annotations(api: ApiClient, namespace: str) -> dict[str, Any]:
    """The annotations of the namespace's ``Cluster``; none when it (or its CRD) does not exist or
    may not be read."""
    try:
        cluster = rest.request(api, "GET", CLUSTER_PATH.format(namespace=namespace))
    except ApiException as err:
        if errors.is_not_found(err) or errors.is_forbidden(err):
            return {}
        raise
    meta = (cluster or {}).get("metadata") if isinstance(cluster, dict) else None
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    return annotations if isinstance(annotations, dict) else {}


def read_secret(api: ApiClient, ref: SecretRef) -> dict[str, Any] | None:
    """A Secret as the API returns it, or None when it does not exist."""
    try:
        secret = rest.request(api, "GET", f"/api/v1/namespaces/{ref.namespace}/secrets/{ref.name}")
    except ApiException as err:
        if errors.is_not_found(err):
            return None
        raise
    return secret if isinstance(secret, dict) else None


def read_target(
    api: ApiClient,
    namespace: str,
    kubeconfig_secret: str = "",
    token_secret: str = SHOOT_ACCESS_SECRET,
    known: tuple[str, ...] = (),
) -> TargetConfig | None:
    """Namespace ``namespace``'s target cluster: ``kubeconfig_secret`` is ``--target-kubeconfig-secret``
    (empty: as Gardener names it), ``token_secret`` the shoot access Secret a ``tokenFile`` reads.
    None when the Secrets' resourceVersions are still ``known`` (a resolved target's ``versions``):
    the periodic re-read then costs the reads, not the parse."""
    annotations = {} if kubeconfig_secret else read_cluster_annotations(api, namespace)
    kubeconfig_ref = SecretRef(namespace, kubeconfig_secret_name(kubeconfig_secret, annotations))
    token_ref = SecretRef(namespace, token_secret)
    kubeconfig = read_secret(api, kubeconfig_ref)
    token = read_secret(api, token_ref) if kubeconfig is not None else None
    if known and known == unchanged_versions(kubeconfig, token)[: len(known)]:
        return None
    return resolve(namespace, kubeconfig, token, kubeconfig_ref, token_ref)
