"""Install the CRDs into the sandbox and wait until they are served (the production path is
``kubectl apply -f crds/``)."""

from __future__ import annotations

from typing import Any, cast

from kubernetes import client

from mcm_sandbox.procs import wait_until
from mcm_tasks.api.constants import VERSION
from mcm_tasks.api.crds import all_crds


def install_crds(api_client: Any, timeout: float = 30.0) -> None:
    """Create or update the CRDs through a ``kubernetes.client.ApiClient`` and wait until every kind
    can be listed (served), so callers can create objects right after."""
    extensions = client.ApiextensionsV1Api(api_client)
    for crd in all_crds():
        try:
            extensions.create_custom_resource_definition(cast(Any, crd))
        except client.ApiException as err:
            if err.status != 409:
                raise
            current: Any = extensions.read_custom_resource_definition(crd["metadata"]["name"])
            updated = {
                **crd,
                "metadata": {**crd["metadata"], "resourceVersion": current.metadata.resource_version},
            }
            extensions.replace_custom_resource_definition(crd["metadata"]["name"], cast(Any, updated))
    objects = client.CustomObjectsApi(api_client)

    def served() -> bool:
        for crd in all_crds():
            try:
                group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
                objects.list_cluster_custom_object(group, VERSION, plural, limit=1)
            except client.ApiException as err:
                if err.status == 404:
                    return False
                raise
        return True

    wait_until(served, timeout, what="the CRDs served")
