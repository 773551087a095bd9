"""Operations helpers, the start-up check and fork safety against a sandbox API server of our own
(its own, because this module installs the MCM CRDs)."""

from __future__ import annotations

import multiprocessing as mp
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import ApiClient, Configuration
from kubernetes.client.exceptions import ApiException

from mcm_sandbox.procs import ApiServer, free_port, wait_until
from mcm_tasks import kinds
from mcm_tasks.kube import clients, ops
from mcm_tasks.kube.errors import is_conflict, is_not_found
from mcm_tasks.kube.resources import MACHINE_GROUP, Resource
from mcm_tasks.settings import configure, load_settings, reset_settings

pytestmark = pytest.mark.integration

CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False)
CRD_DIR = Path(__file__).resolve().parents[2] / "crds"
NS = "default"


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    server = ApiServer(tmp_path_factory.mktemp("kube-ops"), name="kube-ops").start()
    yield server
    server.stop()


@pytest.fixture()
def control(sandbox: ApiServer, redis_url: str) -> Iterator[clients.Cluster]:
    s = load_settings(
        {"control_kubeconfig": str(sandbox.kubeconfig), "target_kubeconfig": "none", "redis_url": redis_url}
    )
    cluster = clients.new_cluster("control", str(sandbox.kubeconfig), s)
    yield cluster
    cluster.close()


def install_crds(cluster: clients.Cluster) -> None:
    for path in sorted(CRD_DIR.glob("*.yaml")):
        try:
            ops.create(cluster.api, CRDS, yaml.safe_load(path.read_text()))
        except ApiException as err:
            if err.status != 409:
                raise
    wait_until(
        lambda: (
            {r.plural for r in kinds.MCM_RESOURCES}
            <= clients.served_resources(cluster, "machine.sapcloud.io/v1alpha1")
        ),
        15,
        what="MCM CRDs served",
    )


@pytest.fixture()
def crds(control: clients.Cluster) -> clients.Cluster:
    install_crds(control)
    return control


def machine(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "Machine",
        "metadata": {"name": name, "namespace": NS, "labels": {"pool": "a"}},
        "spec": {"class": {"kind": "MachineClass", "name": "cls"}},
    }


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_startup_check(control: clients.Cluster) -> None:
    clusters = clients.Clusters(control, None)
    gizmos = Resource(MACHINE_GROUP, "v1alpha1", "gizmos", "Gizmo")
    with pytest.raises(clients.ControlPlaneNotReady, match="gizmos"):
        clients.check_control_cluster(clusters, required=(*kinds.MCM_RESOURCES, gizmos))
    install_crds(control)
    clients.check_control_cluster(clusters)


def test_unreachable_control_plane_fails_within_its_timeout() -> None:
    dead = clients.Cluster("control", ApiClient(Configuration(host=f"http://127.0.0.1:{free_port()}")))
    with pytest.raises(clients.ControlPlaneNotReady, match=r"not healthy after 0\.5s"):
        clients.wait_for_healthz(dead, timeout=0.5, interval=0.1)
    dead.close()


def test_stale_update_conflicts_and_retry_on_conflict_reapplies(crds: clients.Cluster) -> None:
    api = crds.api
    name = uniq("m")
    created = ops.create(api, kinds.MACHINE.resource, machine(name))
    assert created["metadata"]["resourceVersion"]
    stale = ops.get(api, kinds.MACHINE.resource, name, NS)
    assert stale is not None

    # someone else writes in between
    fresh = ops.get(api, kinds.MACHINE.resource, name, NS)
    assert fresh is not None
    fresh["metadata"]["labels"]["other"] = "writer"
    ops.update(api, kinds.MACHINE.resource, fresh)

    stale["metadata"]["labels"]["mine"] = "1"
    with pytest.raises(ApiException) as info:
        ops.update(api, kinds.MACHINE.resource, stale)
    assert is_conflict(info.value)

    calls: list[str] = []

    def add_label() -> dict[str, Any]:
        current = ops.get(api, kinds.MACHINE.resource, name, NS)
        assert current is not None
        if not calls:  # the first attempt loses a race once more
            racer = dict(
                current,
                metadata=dict(current["metadata"], labels={**current["metadata"]["labels"], "r": "2"}),
            )
            ops.update(api, kinds.MACHINE.resource, racer)
        calls.append(current["metadata"]["resourceVersion"])
        current["metadata"]["labels"]["mine"] = "1"
        return ops.update(api, kinds.MACHINE.resource, current)

    result = ops.retry_on_conflict(add_label, attempts=5, backoff=0.01)
    assert len(calls) == 2
    assert result["metadata"]["labels"] == {"pool": "a", "other": "writer", "r": "2", "mine": "1"}


def test_status_patches_delete_preconditions(crds: clients.Cluster) -> None:
    api = crds.api
    name = uniq("m")
    obj = ops.create(api, kinds.MACHINE.resource, machine(name))

    obj["status"] = {"lastOperation": {"description": "Creating", "state": "Processing", "type": "Create"}}
    obj["spec"]["providerID"] = "ignored-by-status-write"
    after = ops.update_status(api, kinds.MACHINE.resource, obj)
    assert after["status"]["lastOperation"]["state"] == "Processing"
    assert "providerID" not in after["spec"]

    merged = ops.patch(
        api, kinds.MACHINE.resource, name, {"metadata": {"labels": {"pool": None, "b": "1"}}}, NS
    )
    assert merged["metadata"]["labels"] == {"b": "1"}
    jsoned = ops.patch(
        api, kinds.MACHINE.resource, name,
        [{"op": "add", "path": "/metadata/annotations", "value": {"x": "y"}}], NS,
        patch_type=ops.PatchType.JSON,
    )  # fmt: skip
    assert jsoned["metadata"]["annotations"] == {"x": "y"}
    stale_rv = {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"], "labels": {"c": "1"}}}
    with pytest.raises(ApiException) as info:
        ops.patch(api, kinds.MACHINE.resource, name, stale_rv, NS)
    assert is_conflict(info.value)

    with pytest.raises(ApiException) as info:
        ops.delete(api, kinds.MACHINE.resource, name, NS, uid="not-the-uid")
    assert is_conflict(info.value)
    ops.delete(
        api,
        kinds.MACHINE.resource,
        name,
        NS,
        uid=obj["metadata"]["uid"],
        propagation_policy=ops.Propagation.BACKGROUND,
    )
    assert ops.get(api, kinds.MACHINE.resource, name, NS, missing_ok=True) is None
    assert ops.delete(api, kinds.MACHINE.resource, name, NS, missing_ok=True) is None
    with pytest.raises(ApiException) as info:
        ops.get(api, kinds.MACHINE.resource, name, NS)
    assert is_not_found(info.value)


def test_core_objects_strategic_patch_and_paged_list(control: clients.Cluster) -> None:
    api = control.api
    label = uniq("batch")
    names = [uniq("node") for _ in range(5)]
    for n in names:
        ops.create(api, kinds.NODE.resource, {"metadata": {"name": n, "labels": {"batch": label}}})
    patched = ops.patch(
        api,
        kinds.NODE.resource,
        names[0],
        {"metadata": {"labels": {"extra": "1"}}},
        patch_type=ops.PatchType.STRATEGIC,
    )
    assert patched["metadata"]["labels"] == {"batch": label, "extra": "1"}
    listed = ops.list_(api, kinds.NODE.resource, label_selector=f"batch={label}", page_size=2)
    assert sorted(i["metadata"]["name"] for i in listed["items"]) == sorted(names)
    assert listed["metadata"]["resourceVersion"]
    for n in names:
        ops.delete(api, kinds.NODE.resource, n)


def _child(out: Any, parent_id: int) -> None:
    clusters = clients.get_clusters()
    nodes = ops.list_(clusters.control.api, kinds.NODE.resource)
    out.put((id(clusters.control.api) != parent_id, isinstance(nodes.get("items"), list)))


def test_forked_children_build_their_own_clients(sandbox: ApiServer, redis_url: str) -> None:
    configure(
        {"control_kubeconfig": str(sandbox.kubeconfig), "target_kubeconfig": "none", "redis_url": redis_url}
    )
    try:
        parent = clients.get_clusters()
        assert clients.get_clusters() is parent
        ops.list_(parent.control.api, kinds.NODE.resource)  # the parent's pool now holds a connection
        ctx = mp.get_context("fork")
        out = ctx.Queue()
        procs = [ctx.Process(target=_child, args=(out, id(parent.control.api))) for _ in range(2)]
        for p in procs:
            p.start()
        results = [out.get(timeout=30) for _ in procs]
        for p in procs:
            p.join(10)
        assert results == [(True, True), (True, True)]
        ops.list_(parent.control.api, kinds.NODE.resource)  # and still works after the children used theirs
    finally:
        clients.reset_clusters()
        reset_settings()


def test_models_go_in_and_come_back(crds: clients.Cluster) -> None:
    from mcm_tasks.api import Machine

    model = Machine.model_validate(machine(uniq("m")))
    created = ops.from_dict(Machine, ops.create(crds.api, kinds.MACHINE.resource, model))
    name = created.metadata.name
    assert name and created.metadata.uid and created.metadata.resource_version
    fetched = ops.get(crds.api, kinds.MACHINE.resource, name, NS)
    assert fetched is not None and ops.from_dict(Machine, fetched) == created
    ops.delete(crds.api, kinds.MACHINE.resource, name, NS)


def test_watch_yields_dicts_from_a_resource_version(control: clients.Cluster) -> None:
    api = control.api
    label = uniq("w")
    start = ops.list_(api, kinds.NODE.resource, label_selector=f"batch={label}")["metadata"][
        "resourceVersion"
    ]
    names = [uniq("wn") for _ in range(3)]
    for n in names:
        ops.create(api, kinds.NODE.resource, {"metadata": {"name": n, "labels": {"batch": label}}})
    ops.delete(api, kinds.NODE.resource, names[0])
    seen: list[tuple[str, str]] = []
    stream = ops.watch(
        api, kinds.NODE.resource, resource_version=start, label_selector=f"batch={label}", timeout_seconds=5
    )
    for kind, obj in stream:
        if kind != "BOOKMARK":
            seen.append((kind, obj["metadata"]["name"]))
        if len(seen) == 4:
            break
    stream.close()
    assert seen == [("ADDED", n) for n in names] + [("DELETED", names[0])]
    assert ops.list_(api, kinds.NODE.resource, label_selector=f"batch={label}")[
        "items"
    ]  # the pool still works
    for n in names[1:]:
        ops.delete(api, kinds.NODE.resource, n)
