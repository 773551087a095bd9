"""Where the sandbox differed from kube-apiserver when the upstream Go MCM ran against it (issue 33):
a metadata-only or identical PUT bumped generation (compared before CRD pruning and defaulting) and
was committed, a LIST with resourceVersion=0&limit=N came in pages, and bookmarks came every 5 s."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.dynamic import DynamicClient

from tests.sandbox.apiserver_support import GROUP, raw_request

pytestmark = pytest.mark.integration

#: A Go client's typed MachineDeployment in miniature: a pod-like template whose ObjectMeta
#: serializes ``creationTimestamp: null``, and a spec field with a schema default.
GADGET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "properties": {
                "replicas": {"type": "integer"},
                "strategy": {"type": "string", "default": "RollingUpdate"},
                "template": {
                    "type": "object",
                    "properties": {
                        "metadata": {
                            "type": "object",
                            "properties": {
                                "creationTimestamp": {"type": "string", "format": "date-time"},
                                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                            },
                        },
                    },
                },
            },
        },
        "status": {"type": "object", "properties": {"replicas": {"type": "integer"}}},
    },
}


@pytest.fixture(scope="module")
def parityrigs(session_api: client.ApiClient, tmp_path_factory: pytest.TempPathFactory) -> Any:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"parityrigs.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": "parityrigs", "singular": "parityrig", "kind": "ParityRig"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": GADGET_SCHEMA},
                    "subresources": {"status": {}},
                }
            ],
        },
    }
    try:
        client.ApiextensionsV1Api(session_api).create_custom_resource_definition(crd)
    except client.ApiException as exc:
        if exc.status != 409:
            raise
    cache = tmp_path_factory.mktemp("discovery") / "cache.json"
    return DynamicClient(session_api, cache_file=str(cache)).resources.get(
        api_version=f"{GROUP}/v1", kind="ParityRig"
    )


def _path(ns: str, name: str = "") -> str:
    return f"/apis/{GROUP}/v1/namespaces/{ns}/parityrigs" + (f"/{name}" if name else "")


def _put(api: client.ApiClient, ns: str, obj: dict[str, Any]) -> dict[str, Any]:
    """PUT these exact bytes (nulls included, as a Go client encodes them)."""
    code, out = raw_request(api, "PUT", _path(ns, obj["metadata"]["name"]), json.dumps(obj).encode())
    assert code == 200, out
    return out  # type: ignore[no-any-return]


def _get(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    code, out = raw_request(api, "GET", _path(ns, name))
    assert code == 200, out
    return out  # type: ignore[no-any-return]


@pytest.fixture()
def parityrig(session_api: client.ApiClient, parityrigs: Any, ns: str) -> Iterator[dict[str, Any]]:
    """A stored ParityRig: its template's creationTimestamp pruned away, its strategy defaulted."""
    body = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ParityRig",
        "metadata": {"name": "g"},
        "spec": {"replicas": 1, "template": {"metadata": {"creationTimestamp": None, "labels": {"a": "b"}}}},
    }
    parityrigs.create(body=body, namespace=ns)
    stored = _get(session_api, ns, "g")
    assert "creationTimestamp" not in stored["spec"]["template"]["metadata"]
    assert stored["spec"]["strategy"] == "RollingUpdate" and stored["metadata"]["generation"] == 1
    yield stored


def _events_after(api: client.ApiClient, ns: str, rv: str) -> list[tuple[str, str]]:
    """Every event on the namespace's parityrigs since ``rv`` (a watch replays them from history)."""
    stream = watch.Watch().stream(
        client.CustomObjectsApi(api).list_namespaced_custom_object,
        GROUP, "v1", ns, "parityrigs", resource_version=rv, timeout_seconds=1,
    )  # fmt: skip
    return [(ev["type"], ev["raw_object"]["metadata"]["resourceVersion"]) for ev in stream]


def test_a_go_clients_nulls_and_omitted_defaults_are_no_spec_change(
    session_api: client.ApiClient, parityrig: dict[str, Any], ns: str
) -> None:
    """The body a Go client PUTs back (``creationTimestamp: null`` in the template, a defaulted field
    left out) prunes and defaults to the stored spec: a label change keeps generation 1."""
    body = json.loads(json.dumps(parityrig))
    body["spec"]["template"]["metadata"]["creationTimestamp"] = None
    del body["spec"]["strategy"]
    body["metadata"]["labels"] = {"touched": "yes"}
    out = _put(session_api, ns, body)
    assert out["metadata"]["labels"] == {"touched": "yes"}
    assert out["metadata"]["generation"] == 1, "a metadata-only PUT is no spec change"
    assert out["metadata"]["resourceVersion"] != parityrig["metadata"]["resourceVersion"]
    # a real spec change still counts
    out["spec"]["replicas"] = 2
    assert _put(session_api, ns, out)["metadata"]["generation"] == 2


def test_a_put_identical_after_pruning_is_skipped(
    session_api: client.ApiClient, parityrig: dict[str, Any], ns: str
) -> None:
    """kube-apiserver skips an update whose stored bytes would not change: same resourceVersion,
    no watch event. The next real change is the watch's first event."""
    rv = parityrig["metadata"]["resourceVersion"]
    assert _put(session_api, ns, parityrig)["metadata"]["resourceVersion"] == rv, "identical PUT"
    go_body = json.loads(json.dumps(parityrig))
    go_body["spec"]["template"]["metadata"]["creationTimestamp"] = None
    del go_body["spec"]["strategy"]
    same = _put(session_api, ns, go_body)
    assert same["metadata"]["resourceVersion"] == rv and same["metadata"]["generation"] == 1
    go_body["metadata"]["labels"] = {"now": "changed"}
    changed = _put(session_api, ns, go_body)["metadata"]["resourceVersion"]
    assert _events_after(session_api, ns, rv) == [("MODIFIED", changed)], "the no-op PUTs sent no event"


def test_list_with_resource_version_0_ignores_the_limit(core: client.CoreV1Api, ns: str) -> None:
    """``resourceVersion=0&limit=N`` is served whole from kube-apiserver's watch cache (a Go
    reflector's first list); any other resourceVersion semantics still page."""
    for i in range(5):
        core.create_namespaced_config_map(ns, {"metadata": {"name": f"c{i}"}})
    whole = core.list_namespaced_config_map(ns, resource_version="0", limit=2)
    assert len(whole.items) == 5 and not whole.metadata._continue
    assert whole.metadata.remaining_item_count is None
    paged = core.list_namespaced_config_map(ns, limit=2)
    assert len(paged.items) == 2 and paged.metadata._continue and paged.metadata.remaining_item_count == 3
    rest = core.list_namespaced_config_map(ns, limit=10, _continue=paged.metadata._continue)
    assert len(rest.items) == 3 and not rest.metadata._continue


def test_bookmarks_come_about_once_a_minute(core: client.CoreV1Api, ns: str) -> None:
    """The session's server runs with the default cadence: a quiet 7 s watch gets no periodic
    bookmark (it used to get one every 5 s), only the one as it times out."""
    rv = core.list_namespaced_config_map(ns).metadata.resource_version
    began = time.monotonic()
    events = list(
        watch.Watch().stream(
            core.list_namespaced_config_map,
            ns,
            resource_version=rv,
            allow_watch_bookmarks=True,
            timeout_seconds=7,
        )
    )
    assert time.monotonic() - began >= 6.5, "the watch ran its course"
    assert [e["type"] for e in events] == ["BOOKMARK"]
    # the store's version: at least the list's (another namespace's writes may have moved it on)
    assert int(events[0]["raw_object"]["metadata"]["resourceVersion"]) >= int(rv)


def test_the_bookmark_interval_default_is_kube_apiservers() -> None:
    from mcm_sandbox.apiserver.app import ServerOptions
    from mcm_sandbox.apiserver.watch import DEFAULT_BOOKMARK_INTERVAL

    assert DEFAULT_BOOKMARK_INTERVAL == 60.0 and ServerOptions().bookmark_interval == 60.0
