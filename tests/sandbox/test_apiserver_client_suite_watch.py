"""The kubernetes-client/python e2e suite's ``test_watch.py`` and ``test_informer.py``, ported:
``kubernetes.watch.Watch`` resuming from a list's resourceVersion, and the client's own
``kubernetes.informer.SharedInformer`` (list, watch, cache, resync) against the sandbox.

Each upstream test -> ours:

    test_watch.py
      test_watch_configmaps                          -> test_watch_from_list_resource_version
    test_informer.py (TestSharedInformerE2E)
      test_cache_populated_after_start               -> test_informer_lists_existing_objects
      test_added_event_and_cache_entry               -> test_informer_added
      test_modified_event_and_cache_refresh          -> test_informer_modified
      test_deleted_event_removes_from_cache          -> test_informer_deleted
      test_resource_version_advances                 -> test_informer_resource_version_advances
      test_resync_fires_modified_for_existing_objects -> test_informer_resync
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.informer import ADDED, DELETED, MODIFIED, SharedInformer

from mcm_sandbox.procs import wait_until

pytestmark = pytest.mark.integration

DEFAULT = "default"
LABEL = "inf-e2e=1"
WAIT = 15.0


def short_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def config_map(name: str, labels: dict[str, str], data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels},
        "data": data,
    }


def test_watch_from_list_resource_version(suite_api: client.ApiClient) -> None:
    """A watch from a list's resourceVersion replays exactly what happened after that list."""
    core = client.CoreV1Api(suite_api)
    labels = {"e2e-tests": "true"}
    name_a, name_b = short_name("configmap-a"), short_name("configmap-b")
    core.create_namespaced_config_map(DEFAULT, config_map(name_a, labels, {"key": "a", "config": "dummy"}))
    rv = core.list_namespaced_config_map(DEFAULT, label_selector="e2e-tests=true").metadata.resource_version
    b = config_map(name_b, labels, {"key": "b", "config": "dummy"})
    core.create_namespaced_config_map(DEFAULT, b)
    b["data"]["config"] = "{}"
    core.patch_namespaced_config_map(name_b, DEFAULT, b)
    core.delete_collection_namespaced_config_map(DEFAULT, label_selector="e2e-tests=true")
    seen = [
        (event["type"], event["object"].metadata.name)
        for event in watch.Watch().stream(
            core.list_namespaced_config_map, DEFAULT, resource_version=rv, timeout_seconds=2,
            label_selector="e2e-tests=true",
        )
    ]  # fmt: skip
    assert seen[:2] == [("ADDED", name_b), ("MODIFIED", name_b)]
    assert sorted(seen[2:]) == [("DELETED", name_a), ("DELETED", name_b)]  # collection order is free


@pytest.fixture(name="informers")
def informers_fixture(suite_api: client.ApiClient) -> Iterator[Callable[..., SharedInformer]]:
    """Informers on labelled ConfigMaps in ``default``, stopped after the test.

    ``SharedInformer.stop`` joins its thread, which sits in a watch until the next event; a
    labelled ConfigMap written after the stop request is that event.
    """
    core = client.CoreV1Api(suite_api)
    started: list[SharedInformer] = []

    def make(resync: float = 0) -> SharedInformer:
        inf = SharedInformer(
            list_func=core.list_namespaced_config_map, namespace=DEFAULT, label_selector=LABEL,
            resync_period=resync,
        )  # fmt: skip
        started.append(inf)
        return inf

    yield make
    for inf in started:
        stopper = threading.Thread(target=inf.stop)
        stopper.start()
        poke = short_name("inf-stop")
        core.create_namespaced_config_map(DEFAULT, config_map(poke, {"inf-e2e": "1"}, {}))
        stopper.join(WAIT)
        assert not stopper.is_alive(), "informer did not stop"
        core.delete_namespaced_config_map(poke, DEFAULT)
    core.delete_collection_namespaced_config_map(DEFAULT, label_selector=LABEL)


def fired(inf: SharedInformer, kind: str, name: str) -> threading.Event:
    seen = threading.Event()
    inf.add_event_handler(kind, lambda obj: seen.set() if obj.metadata.name == name else None)
    return seen


def listed(inf: SharedInformer) -> None:
    wait_until(lambda: inf._resource_version is not None, WAIT, what="informer's initial list")


def cached(inf: SharedInformer, name: str) -> Any:
    return inf.cache.get_by_key(f"{DEFAULT}/{name}")


def test_informer_lists_existing_objects(suite_api: client.ApiClient, informers: Any) -> None:
    core = client.CoreV1Api(suite_api)
    name = short_name("inf-pre")
    core.create_namespaced_config_map(DEFAULT, config_map(name, {"inf-e2e": "1"}, {"k": "v"}))
    inf = informers()
    inf.start()
    wait_until(lambda: cached(inf, name) is not None, WAIT, what="pre-existing object cached")
    assert cached(inf, name).data == {"k": "v"}


def test_informer_added(suite_api: client.ApiClient, informers: Any) -> None:
    name = short_name("inf-add")
    inf = informers()
    seen = fired(inf, ADDED, name)
    inf.start()
    listed(inf)
    client.CoreV1Api(suite_api).create_namespaced_config_map(
        DEFAULT, config_map(name, {"inf-e2e": "1"}, {"k": "v"})
    )
    assert seen.wait(WAIT) and cached(inf, name) is not None


def test_informer_modified(suite_api: client.ApiClient, informers: Any) -> None:
    core = client.CoreV1Api(suite_api)
    name = short_name("inf-mod")
    inf = informers()
    seen = fired(inf, MODIFIED, name)
    inf.start()
    core.create_namespaced_config_map(DEFAULT, config_map(name, {"inf-e2e": "1"}, {"k": "v"}))
    wait_until(lambda: cached(inf, name) is not None, WAIT, what="object cached")
    core.patch_namespaced_config_map(name, DEFAULT, {"data": {"k": "updated"}})
    assert seen.wait(WAIT) and cached(inf, name).data == {"k": "updated"}


def test_informer_deleted(suite_api: client.ApiClient, informers: Any) -> None:
    core = client.CoreV1Api(suite_api)
    name = short_name("inf-del")
    inf = informers()
    seen = fired(inf, DELETED, name)
    inf.start()
    core.create_namespaced_config_map(DEFAULT, config_map(name, {"inf-e2e": "1"}, {"k": "v"}))
    wait_until(lambda: cached(inf, name) is not None, WAIT, what="object cached")
    core.delete_namespaced_config_map(name, DEFAULT)
    assert seen.wait(WAIT) and cached(inf, name) is None


def test_informer_resource_version_advances(suite_api: client.ApiClient, informers: Any) -> None:
    name = short_name("inf-rv")
    inf = informers()
    seen = fired(inf, ADDED, name)
    inf.start()
    listed(inf)
    before = int(inf._resource_version)
    client.CoreV1Api(suite_api).create_namespaced_config_map(
        DEFAULT, config_map(name, {"inf-e2e": "1"}, {"k": "v"})
    )
    assert seen.wait(WAIT) and int(inf._resource_version) > before


def test_informer_resync(suite_api: client.ApiClient, informers: Any) -> None:
    """With a resync period the informer's watch carries timeoutSeconds; the server ends it on
    time, the informer re-lists and fires MODIFIED for what it already holds."""
    name = short_name("inf-rsync")
    client.CoreV1Api(suite_api).create_namespaced_config_map(
        DEFAULT, config_map(name, {"inf-e2e": "1"}, {"k": "v"})
    )
    inf = informers(resync=1)
    added, resynced = fired(inf, ADDED, name), fired(inf, MODIFIED, name)
    inf.start()
    assert added.wait(WAIT) and resynced.wait(WAIT)
    assert cached(inf, name).data == {"k": "v"}
