"""List and watch: selectors, pagination over a snapshot, resourceVersion replay, 410, bookmarks, timeouts."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from kubernetes import client, watch

from tests.sandbox.apiserver_support import (
    pod,
    widget,
)

pytestmark = pytest.mark.integration


def _names(items: Any) -> list[str]:
    return sorted(i.metadata.name for i in items)


def test_label_selectors(core: client.CoreV1Api, ns: str) -> None:
    for name, labels in (("a", {"env": "prod", "tier": "web"}), ("b", {"env": "dev"}), ("c", {})):
        core.create_namespaced_config_map(ns, {"metadata": {"name": name, "labels": labels}})
    cases = {
        "env=prod": ["a"],
        "env==dev": ["b"],
        "env!=prod": ["b", "c"],
        "env in (prod,dev)": ["a", "b"],
        "env notin (prod)": ["b", "c"],
        "tier": ["a"],
        "!tier": ["b", "c"],
        "env=prod,tier=web": ["a"],
    }
    for selector, expected in cases.items():
        assert _names(core.list_namespaced_config_map(ns, label_selector=selector).items) == expected, (
            selector
        )
    with pytest.raises(client.ApiException) as err:
        core.list_namespaced_config_map(ns, label_selector="env in (")
    assert err.value.status == 400


def test_field_selectors(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_pod(ns, pod("on-n1", node="n1"))
    core.create_namespaced_pod(ns, pod("on-n2", node="n2"))
    core.patch_namespaced_pod_status("on-n2", ns, {"status": {"phase": "Running"}})
    assert _names(core.list_namespaced_pod(ns, field_selector="spec.nodeName=n1").items) == ["on-n1"]
    assert _names(core.list_namespaced_pod(ns, field_selector="status.phase=Running").items) == ["on-n2"]
    assert _names(core.list_namespaced_pod(ns, field_selector="metadata.name!=on-n1").items) == ["on-n2"]
    everywhere = core.list_pod_for_all_namespaces(field_selector=f"metadata.namespace={ns},spec.nodeName=n2")
    assert _names(everywhere.items) == ["on-n2"]
    core.create_namespaced_event(
        ns, {"metadata": {"name": "e1"}, "involvedObject": {"kind": "Pod", "name": "on-n1"}, "reason": "Test"}
    )
    assert _names(core.list_namespaced_event(ns, field_selector="involvedObject.name=on-n1").items) == ["e1"]
    with pytest.raises(client.ApiException) as err:
        core.list_namespaced_config_map(ns, field_selector="data.x=1")
    assert err.value.status == 400


def test_pagination_is_a_consistent_snapshot(core: client.CoreV1Api, ns: str) -> None:
    for i in range(7):
        core.create_namespaced_config_map(ns, {"metadata": {"name": f"p{i}"}})
    first = core.list_namespaced_config_map(ns, limit=3)
    assert len(first.items) == 3 and first.metadata._continue and first.metadata.remaining_item_count == 4
    core.create_namespaced_config_map(ns, {"metadata": {"name": "p9-late"}})
    core.delete_namespaced_config_map("p6", ns)
    seen = _names(first.items)
    token = first.metadata._continue
    while token:
        page = core.list_namespaced_config_map(ns, limit=3, _continue=token)
        assert page.metadata.resource_version == first.metadata.resource_version
        seen += _names(page.items)
        token = page.metadata._continue
    assert seen == [f"p{i}" for i in range(7)]


def test_watch_replays_from_resource_version_in_order(core: client.CoreV1Api, ns: str) -> None:
    start = core.list_namespaced_config_map(ns).metadata.resource_version
    core.create_namespaced_config_map(ns, {"metadata": {"name": "w"}, "data": {"v": "1"}})
    core.patch_namespaced_config_map("w", ns, {"data": {"v": "2"}})
    core.delete_namespaced_config_map("w", ns)
    seen = []
    for event in watch.Watch().stream(
        core.list_namespaced_config_map, ns, resource_version=start, timeout_seconds=1
    ):
        seen.append((event["type"], (event["object"].data or {}).get("v")))
        rv = int(event["object"].metadata.resource_version)
        assert rv > int(start)
        start = str(rv)
    assert seen == [("ADDED", "1"), ("MODIFIED", "2"), ("DELETED", "2")]


def test_watch_without_resource_version_starts_with_current_state(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_config_map(ns, {"metadata": {"name": "now"}})
    events = list(watch.Watch().stream(core.list_namespaced_config_map, ns, timeout_seconds=1))
    assert [(e["type"], e["object"].metadata.name) for e in events] == [("ADDED", "now")]


def test_watch_follows_live_changes(core: client.CoreV1Api, ns: str) -> None:
    start = core.list_namespaced_config_map(ns).metadata.resource_version
    w = watch.Watch()
    seen: list[str] = []

    def writer() -> None:  # races the watch's connect on purpose: replay from ``start`` covers both orders
        core.create_namespaced_config_map(ns, {"metadata": {"name": "live"}})

    threading.Thread(target=writer).start()
    for event in w.stream(core.list_namespaced_config_map, ns, resource_version=start, timeout_seconds=5):
        seen.append(event["object"].metadata.name)
        w.stop()
    assert seen == ["live"]


def test_watch_too_old_resource_version_is_410(own_server: Any) -> None:
    _, api = own_server("--history-window", "5", name="short")
    core = client.CoreV1Api(api)
    start = core.list_namespaced_config_map("default").metadata.resource_version
    for i in range(10):
        core.create_namespaced_config_map("default", {"metadata": {"name": f"x{i}"}})
    with pytest.raises(client.ApiException) as err:
        for _ in watch.Watch().stream(
            core.list_namespaced_config_map, "default", resource_version=start, timeout_seconds=2
        ):
            pass
    assert err.value.status == 410 and "Expired" in str(err.value.reason)
    resp = core.list_namespaced_config_map(
        "default", resource_version=start, watch=True, _preload_content=False
    )
    line = resp.readline()
    import json

    event = json.loads(line)
    assert (
        event["type"] == "ERROR" and event["object"]["code"] == 410 and event["object"]["reason"] == "Expired"
    )


def test_bookmarks_and_timeout(own_server: Any) -> None:
    _, api = own_server("--bookmark-interval", "0.2", name="bookmarks")
    core = client.CoreV1Api(api)
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    began = time.monotonic()
    events = list(
        watch.Watch().stream(
            core.list_namespaced_config_map,
            "default",
            resource_version=rv,
            allow_watch_bookmarks=True,
            timeout_seconds=1,
        )
    )
    assert time.monotonic() - began < 10  # the stream ended by itself
    assert events and all(e["type"] == "BOOKMARK" for e in events)
    assert events[-1]["raw_object"]["metadata"]["resourceVersion"] == rv


def test_selector_enter_and_leave(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_config_map(ns, {"metadata": {"name": "m", "labels": {"pick": "no"}}})
    start = core.list_namespaced_config_map(ns).metadata.resource_version
    core.patch_namespaced_config_map("m", ns, {"metadata": {"labels": {"pick": "yes"}}})
    core.patch_namespaced_config_map("m", ns, {"data": {"x": "1"}})
    core.patch_namespaced_config_map("m", ns, {"metadata": {"labels": {"pick": "no"}}})
    core.patch_namespaced_config_map("m", ns, {"data": {"x": "2"}})
    events = [
        e["type"]
        for e in watch.Watch().stream(
            core.list_namespaced_config_map,
            ns,
            label_selector="pick=yes",
            resource_version=start,
            timeout_seconds=1,
        )
    ]
    assert events == ["ADDED", "MODIFIED", "DELETED"]


def test_dynamic_client_watch(widgets: Any, ns: str) -> None:
    start = widgets.get(namespace=ns).metadata.resourceVersion
    widgets.create(body=widget("dw"), namespace=ns)
    events = list(widgets.watch(namespace=ns, resource_version=start, timeout=1))
    assert [(e["type"], e["object"].metadata.name) for e in events] == [("ADDED", "dw")]


def test_list_across_namespaces(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_config_map(ns, {"metadata": {"name": "everywhere", "labels": {"t": ns}}})
    found = core.list_config_map_for_all_namespaces(label_selector=f"t={ns}")
    assert [(i.metadata.namespace, i.metadata.name) for i in found.items] == [(ns, "everywhere")]
