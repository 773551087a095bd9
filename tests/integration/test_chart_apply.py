"""The chart's manifests, rendered for the default values and every value set in
helm/mcm-tasks/ci/, are accepted by the sandbox API server (which serves apps/v1, policy/v1,
autoscaling/v2, rbac.authorization.k8s.io/v1, networking.k8s.io/v1) and read back unchanged in kind
and name. Add-on kinds (KEDA, prometheus-operator) are left out: their CRDs come with the add-ons."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import dynamic

from tests.chart_support import VALUE_SETS, render, render_file
from tests.e2e.chart_world import ADDON_KINDS, apply

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("values", [None, *VALUE_SETS], ids=lambda v: v.name if v else "default")
def test_rendered_chart_applies_to_the_sandbox(apiserver, kube_api, values: Path | None) -> None:  # type: ignore[no-untyped-def]
    release = f"r-{values.stem if values else 'default'}"[:40]
    args = ("--release-name", release, "--namespace", f"ns-{release}")
    docs = render_file(values, *args) if values else render(None, *args)
    created = apply(apiserver.kubeconfig, docs)
    assert len(created) == len([d for d in docs if d["kind"] not in ADDON_KINDS])
    client = dynamic.DynamicClient(kube_api)
    for doc in docs:
        if doc["kind"] in ADDON_KINDS:
            continue
        api = client.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        meta = doc["metadata"]
        found = api.get(name=meta["name"], namespace=meta.get("namespace"))
        assert found.metadata.name == meta["name"]
        if doc["kind"] in ("Role", "ClusterRole"):
            assert [r.to_dict() for r in found.rules] == doc["rules"]
