"""Built-in types beyond pods and config maps, through the official typed clients: events.k8s.io/v1
Events (create, get, list, watch), the status subresource of PersistentVolumes, claims,
VolumeAttachments and PodDisruptionBudgets, the generation rule for Pods and PDBs, Lease
optimistic concurrency, and the ``/apis/{group}`` discovery document."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client, watch

from mcm_sandbox.crds import install_crds
from mcm_sandbox.procs import wait_until
from mcm_tasks.api import GROUP as MCM_GROUP
from mcm_tasks.api import VERSION as MCM_VERSION
from tests.sandbox.apiserver_support import (
    WIDGET_SCHEMA,
    pod,
    status_of,
    unique,
)

pytestmark = pytest.mark.integration

WAIT = 10.0
#: a condition type no emulated controller knows, so only a client's /status write can set it
TEST_CONDITION = "SandboxTestCondition"


# --- events.k8s.io/v1 ------------------------------------------------------------------------------


def _event(ns: str, name: str, note: str, when: datetime, labels: dict[str, str]) -> client.EventsV1Event:
    return client.EventsV1Event(
        metadata=client.V1ObjectMeta(name=name, labels=labels),
        event_time=when,
        reporting_controller="sandbox.example.com/tests",
        reporting_instance="tests-1",
        action="Testing",
        reason="Probe",
        note=note,
        type="Normal",
        regarding=client.V1ObjectReference(api_version="v1", kind="Pod", namespace=ns, name="target"),
    )


def test_events_v1_create_get_list_delete(kube_api: client.ApiClient, ns: str) -> None:
    events = client.EventsV1Api(kube_api)
    when = datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    made = events.create_namespaced_event(ns, _event(ns, "e1", "first note", when, {"set": "a"}))
    assert isinstance(made, client.EventsV1Event)
    assert made.api_version == "events.k8s.io/v1" and made.kind == "Event"
    assert made.metadata.uid and made.metadata.resource_version and made.metadata.namespace == ns
    assert made.event_time == when  # MicroTime comes back with its microseconds
    assert made.regarding.name == "target" and made.reporting_controller == "sandbox.example.com/tests"

    got = events.read_namespaced_event("e1", ns)
    assert got.metadata.uid == made.metadata.uid and got.note == "first note" and got.reason == "Probe"

    events.create_namespaced_event(ns, _event(ns, "e2", "second note", when, {"set": "b"}))
    listed = events.list_namespaced_event(ns)
    assert isinstance(listed, client.EventsV1EventList)
    assert [e.metadata.name for e in listed.items] == ["e1", "e2"]
    assert int(listed.metadata.resource_version) >= int(made.metadata.resource_version)
    assert [e.metadata.name for e in events.list_namespaced_event(ns, label_selector="set=b").items] == ["e2"]
    everywhere = events.list_event_for_all_namespaces(label_selector="set")
    assert {e.metadata.name for e in everywhere.items if e.metadata.namespace == ns} == {"e1", "e2"}

    patched = events.patch_namespaced_event("e1", ns, {"note": "edited"})
    assert patched.note == "edited"
    assert int(patched.metadata.resource_version) > int(made.metadata.resource_version)
    events.delete_namespaced_event("e1", ns)
    with pytest.raises(client.ApiException) as err:
        events.read_namespaced_event("e1", ns)
    assert err.value.status == 404 and status_of(err.value)["details"]["group"] == "events.k8s.io"


def test_events_v1_watch(kube_api: client.ApiClient, ns: str) -> None:
    events = client.EventsV1Api(kube_api)
    start = events.list_namespaced_event(ns).metadata.resource_version
    when = datetime.now(UTC)
    events.create_namespaced_event(ns, _event(ns, "w", "created", when, {}))
    events.patch_namespaced_event("w", ns, {"note": "updated"})
    seen: list[tuple[str, str, str]] = []
    w = watch.Watch()
    for event in w.stream(
        events.list_namespaced_event, ns, resource_version=start, timeout_seconds=5, _request_timeout=15
    ):
        obj = event["object"]
        assert isinstance(obj, client.EventsV1Event)  # typed by the official client's watch
        seen.append((event["type"], obj.metadata.name, obj.note))
        if len(seen) == 2:
            w.stop()
    assert seen == [("ADDED", "w", "created"), ("MODIFIED", "w", "updated")]


# --- status subresources ---------------------------------------------------------------------------


def test_persistent_volume_status_subresource(kube_api: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_api)
    name = unique("pv")
    pv = core.create_persistent_volume(
        {
            "metadata": {"name": name},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "hostPath": {"path": "/tmp/pv"},
                "persistentVolumeReclaimPolicy": "Retain",
            },
            "status": {"phase": "Bound"},
        }
    )
    assert pv.status.phase == "Pending"  # status is the server's on create
    # PUT to the main endpoint: spec and metadata change, status does not
    pv.spec.persistent_volume_reclaim_policy = "Delete"
    pv.metadata.labels = {"tier": "a"}
    pv.status.phase = "Failed"
    after = core.replace_persistent_volume(name, pv)
    assert after.spec.persistent_volume_reclaim_policy == "Delete" and after.metadata.labels == {"tier": "a"}
    assert after.status.phase == "Pending"
    # PATCH to the main endpoint: the status part of the patch is dropped
    after = core.patch_persistent_volume(
        name, {"status": {"phase": "Failed"}, "metadata": {"labels": {"b": "c"}}}
    )
    assert after.status.phase == "Pending" and after.metadata.labels == {"tier": "a", "b": "c"}
    # PATCH and PUT to /status: only status changes
    after = core.patch_persistent_volume_status(
        name, {"status": {"phase": "Available"}, "spec": {"persistentVolumeReclaimPolicy": "Recycle"}}
    )
    assert after.status.phase == "Available" and after.spec.persistent_volume_reclaim_policy == "Delete"
    after.status.phase = "Released"
    after.spec.persistent_volume_reclaim_policy = "Retain"
    after.metadata.labels = {"dropped": "yes"}
    after = core.replace_persistent_volume_status(name, after)
    assert after.status.phase == "Released" and after.spec.persistent_volume_reclaim_policy == "Delete"
    assert after.metadata.labels == {"tier": "a", "b": "c"}
    stored = core.read_persistent_volume_status(name)
    assert stored.status.phase == "Released" and stored.spec.persistent_volume_reclaim_policy == "Delete"


def test_persistent_volume_claim_status_subresource(core: client.CoreV1Api, ns: str) -> None:
    claim = core.create_namespaced_persistent_volume_claim(
        ns,
        {
            "metadata": {"name": "c"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Bound"},
        },
    )
    assert claim.status.phase == "Pending"
    # main endpoint: the PV binder's spec.volumeName write lands, a status in the same body does not
    after = core.patch_namespaced_persistent_volume_claim(
        "c", ns, {"spec": {"volumeName": "pv-1"}, "status": {"phase": "Lost"}}
    )
    assert after.spec.volume_name == "pv-1" and after.status.phase == "Pending"
    after.status.phase = "Lost"
    after.metadata.annotations = {"a": "b"}
    after = core.replace_namespaced_persistent_volume_claim("c", ns, after)
    assert after.status.phase == "Pending" and after.metadata.annotations == {"a": "b"}
    # /status: phase and capacity change, a spec change in the same body does not
    after.status.phase = "Bound"
    after.status.capacity = {"storage": "1Gi"}
    after.spec.volume_name = "pv-2"
    after = core.replace_namespaced_persistent_volume_claim_status("c", ns, after)
    assert after.status.phase == "Bound" and after.status.capacity == {"storage": "1Gi"}
    assert after.spec.volume_name == "pv-1"
    after = core.patch_namespaced_persistent_volume_claim_status(
        "c", ns, {"status": {"phase": "Lost"}, "metadata": {"labels": {"x": "y"}}}
    )
    assert after.status.phase == "Lost" and not after.metadata.labels
    assert core.read_namespaced_persistent_volume_claim("c", ns).status.phase == "Lost"


def test_volume_attachment_status_subresource(kube_api: client.ApiClient) -> None:
    storage = client.StorageV1Api(kube_api)
    name = unique("va")
    made = storage.create_volume_attachment(
        client.V1VolumeAttachment(
            metadata=client.V1ObjectMeta(name=name),
            spec=client.V1VolumeAttachmentSpec(
                attacher="csi.example.com",
                node_name="node-a",
                source=client.V1VolumeAttachmentSource(persistent_volume_name="pv-a"),
            ),
            status=client.V1VolumeAttachmentStatus(attached=True),
        )
    )
    assert made.status.attached is False  # reset on create
    after = storage.patch_volume_attachment(
        name, {"metadata": {"labels": {"k": "v"}}, "status": {"attached": True}}
    )
    assert after.metadata.labels == {"k": "v"} and after.status.attached is False
    after.status.attached = True
    after.metadata.labels = {"k": "w"}
    after = storage.replace_volume_attachment(name, after)
    assert after.metadata.labels == {"k": "w"} and after.status.attached is False
    after = storage.patch_volume_attachment_status(
        name,
        {
            "status": {"attached": True, "attachmentMetadata": {"devicePath": "/dev/xvdf"}},
            "spec": {"nodeName": "node-b"},
        },
    )
    assert after.status.attached is True and after.status.attachment_metadata == {"devicePath": "/dev/xvdf"}
    assert after.spec.node_name == "node-a"
    after.status.attached = False
    after.status.detach_error = client.V1VolumeError(message="busy")
    after.spec.attacher = "other.example.com"
    after = storage.replace_volume_attachment_status(name, after)
    assert after.status.attached is False and after.status.detach_error.message == "busy"
    assert after.spec.attacher == "csi.example.com"
    stored = storage.read_volume_attachment_status(name)
    assert stored.status.detach_error.message == "busy" and stored.spec.node_name == "node-a"


def _test_condition(message: str) -> dict[str, Any]:
    return {
        "type": TEST_CONDITION,
        "status": "True",
        "reason": "SetByTest",
        "message": message,
        "lastTransitionTime": "2025-01-01T00:00:00Z",
    }


def _typed_condition(message: str) -> client.V1Condition:
    return client.V1Condition(
        type=TEST_CONDITION,
        status="True",
        reason="SetByTest",
        message=message,
        last_transition_time=datetime(2025, 1, 1, tzinfo=UTC),
    )


def _condition_types(pdb: client.V1PodDisruptionBudget) -> set[str]:
    return {c.type for c in (pdb.status.conditions or [])}


def _ready_pod(core: client.CoreV1Api, ns: str, name: str, labels: dict[str, str]) -> None:
    core.create_namespaced_pod(ns, pod(name, node="n1", labels=labels))
    core.patch_namespaced_pod_status(
        name, ns, {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    )


def test_pod_disruption_budget_status_subresource(
    kube_api: client.ApiClient, core: client.CoreV1Api, ns: str
) -> None:
    """The sandbox's disruption controller recomputes the counts on every change, so the test uses a
    condition of a type that controller keeps but never writes: it can only come from a client."""
    policy = client.PolicyV1Api(kube_api)
    made = policy.create_namespaced_pod_disruption_budget(
        ns,
        {
            "metadata": {"name": "b"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "x"}}},
            "status": {"disruptionsAllowed": 9, "conditions": [_test_condition("on create")]},
        },
    )
    assert made.status.disruptions_allowed == 0 and TEST_CONDITION not in _condition_types(made)
    # main endpoint: labels land; counts and conditions in the body do not (the response is the write)
    after = policy.patch_namespaced_pod_disruption_budget(
        "b",
        ns,
        {
            "metadata": {"labels": {"l": "1"}},
            "status": {"disruptionsAllowed": 7, "conditions": [_test_condition("via main")]},
        },
    )
    assert after.metadata.labels == {"l": "1"}
    assert after.status.disruptions_allowed == 0 and TEST_CONDITION not in _condition_types(after)
    after = policy.read_namespaced_pod_disruption_budget("b", ns)
    after.status.conditions = [*(after.status.conditions or []), _typed_condition("via main PUT")]
    after = policy.replace_namespaced_pod_disruption_budget("b", ns, after)
    assert TEST_CONDITION not in _condition_types(after)
    # /status: the condition lands, a spec change in the same body does not
    current = policy.read_namespaced_pod_disruption_budget("b", ns)
    current.status.conditions = [
        *(current.status.conditions or []),
        _typed_condition("via status"),
    ]
    current.spec.max_unavailable = 3
    after = policy.replace_namespaced_pod_disruption_budget_status("b", ns, current)
    assert TEST_CONDITION in _condition_types(after) and after.spec.max_unavailable == 1
    assert after.metadata.generation == 1
    # ...and survives the disruption controller's next recompute (one ready pod: one disruption allowed)
    _ready_pod(core, ns, "p1", {"app": "x"})

    def recomputed() -> bool:
        return policy.read_namespaced_pod_disruption_budget("b", ns).status.current_healthy == 1

    wait_until(recomputed, WAIT, what="the disruption controller to count the ready pod")
    final = policy.read_namespaced_pod_disruption_budget("b", ns)
    assert final.status.disruptions_allowed == 1 and final.spec.max_unavailable == 1
    kept = [c for c in final.status.conditions if c.type == TEST_CONDITION]
    assert [c.message for c in kept] == ["via status"]


# --- generation --------------------------------------------------------------------------------------


def test_pdb_generation_bumps_only_for_spec(kube_api: client.ApiClient, ns: str) -> None:
    policy = client.PolicyV1Api(kube_api)
    made = policy.create_namespaced_pod_disruption_budget(
        ns,
        {"metadata": {"name": "g"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "g"}}}},
    )
    assert made.metadata.generation == 1

    def observed(generation: int) -> bool:
        return policy.read_namespaced_pod_disruption_budget("g", ns).status.observed_generation == generation

    wait_until(lambda: observed(1), WAIT, what="observedGeneration 1")
    assert (
        policy.patch_namespaced_pod_disruption_budget(
            "g", ns, {"metadata": {"labels": {"a": "b"}}}
        ).metadata.generation
        == 1
    )
    assert (
        policy.patch_namespaced_pod_disruption_budget(
            "g", ns, {"metadata": {"annotations": {"c": "d"}}}
        ).metadata.generation
        == 1
    )
    after = policy.patch_namespaced_pod_disruption_budget_status(
        "g", ns, {"status": {"conditions": [_test_condition("status write")]}}
    )
    assert after.metadata.generation == 1
    after = policy.patch_namespaced_pod_disruption_budget("g", ns, {"spec": {"minAvailable": 1}})
    assert after.metadata.generation == 1  # the same spec is no change
    after = policy.patch_namespaced_pod_disruption_budget("g", ns, {"spec": {"minAvailable": 2}})
    assert after.metadata.generation == 2
    # the disruption controller catches up with a status write, which leaves generation alone
    wait_until(lambda: observed(2), WAIT, what="observedGeneration 2")
    assert policy.read_namespaced_pod_disruption_budget("g", ns).metadata.generation == 2


def test_pod_generation_bumps_only_for_spec(core: client.CoreV1Api, ns: str) -> None:
    made = core.create_namespaced_pod(ns, pod("g", node="n1"))
    assert made.metadata.generation == 1
    assert core.patch_namespaced_pod("g", ns, {"metadata": {"labels": {"a": "b"}}}).metadata.generation == 1
    assert (
        core.patch_namespaced_pod("g", ns, {"metadata": {"annotations": {"c": "d"}}}).metadata.generation == 1
    )
    after = core.patch_namespaced_pod_status("g", ns, {"status": {"phase": "Running"}})
    assert after.status.phase == "Running" and after.metadata.generation == 1
    after.spec.containers[0].image = "busybox:2"
    after = core.replace_namespaced_pod("g", ns, after)
    assert after.spec.containers[0].image == "busybox:2" and after.metadata.generation == 2
    after = core.patch_namespaced_pod("g", ns, {"spec": {"activeDeadlineSeconds": 60}})
    assert after.metadata.generation == 3
    assert core.read_namespaced_pod("g", ns).metadata.generation == 3


# --- leases ------------------------------------------------------------------------------------------


def test_lease_update_with_stale_resource_version_conflicts(kube_api: client.ApiClient, ns: str) -> None:
    leases = client.CoordinationV1Api(kube_api)
    acquired = datetime(2025, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)
    made = leases.create_namespaced_lease(
        ns,
        client.V1Lease(
            metadata=client.V1ObjectMeta(name="lock"),
            spec=client.V1LeaseSpec(
                holder_identity="a",
                lease_duration_seconds=15,
                acquire_time=acquired,
                renew_time=acquired,
                lease_transitions=0,
            ),
        ),
    )
    assert made.spec.holder_identity == "a" and made.spec.renew_time == acquired
    stale = leases.read_namespaced_lease("lock", ns)
    assert stale.metadata.resource_version == made.metadata.resource_version

    made.spec.renew_time = acquired + timedelta(seconds=2)
    renewed = leases.replace_namespaced_lease("lock", ns, made)
    assert renewed.spec.renew_time == acquired + timedelta(seconds=2)
    assert int(renewed.metadata.resource_version) > int(made.metadata.resource_version)

    # a second candidate that read before the renewal must not take the lease over
    stale.spec.holder_identity = "b"
    stale.spec.lease_transitions = 1
    with pytest.raises(client.ApiException) as err:
        leases.replace_namespaced_lease("lock", ns, stale)
    status = status_of(err.value)
    assert err.value.status == 409 and status["reason"] == "Conflict"
    assert status["details"] == {"name": "lock", "group": "coordination.k8s.io", "kind": "leases"}
    with pytest.raises(client.ApiException) as err:
        leases.patch_namespaced_lease(
            "lock",
            ns,
            {
                "metadata": {"resourceVersion": made.metadata.resource_version},
                "spec": {"holderIdentity": "b"},
            },
        )
    assert err.value.status == 409
    assert leases.read_namespaced_lease("lock", ns).spec.holder_identity == "a"

    # with the current resourceVersion the takeover goes through
    current = leases.read_namespaced_lease("lock", ns)
    current.spec.holder_identity = "b"
    current.spec.lease_transitions = 1
    taken = leases.replace_namespaced_lease("lock", ns, current)
    assert taken.spec.holder_identity == "b" and taken.spec.lease_transitions == 1


# --- /apis/{group} -----------------------------------------------------------------------------------


def _api_group(api: client.ApiClient, group: str) -> client.V1APIGroup:
    """GET /apis/{group} for any group, decoded by the official client as its typed groups are."""
    request = api.param_serialize(
        "GET",
        "/apis/{group}/",
        path_params={"group": group},
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
    )
    response = api.call_api(*request)
    response.read()
    found: client.V1APIGroup = api.response_deserialize(response, {"200": "V1APIGroup"}).data
    return found


def _versions(group: client.V1APIGroup) -> list[str]:
    return [v.group_version for v in group.versions]


def test_api_group_documents_for_builtin_groups(kube_api: client.ApiClient) -> None:
    for typed, name in (
        (client.CoordinationApi, "coordination.k8s.io"),
        (client.PolicyApi, "policy"),
        (client.StorageApi, "storage.k8s.io"),
        (client.EventsApi, "events.k8s.io"),
    ):
        group = typed(kube_api).get_api_group()
        assert isinstance(group, client.V1APIGroup) and group.kind == "APIGroup"
        assert group.name == name and _versions(group) == [f"{name}/v1"]
        assert group.preferred_version.group_version == f"{name}/v1"
    with pytest.raises(client.ApiException) as err:
        _api_group(kube_api, "no-such-group.example.com")
    assert err.value.status == 404


def test_api_group_document_for_mcm_crds(kube_api: client.ApiClient) -> None:
    install_crds(kube_api)
    group = _api_group(kube_api, MCM_GROUP)
    assert group.kind == "APIGroup" and group.name == MCM_GROUP
    assert _versions(group) == [f"{MCM_GROUP}/{MCM_VERSION}"]
    assert group.preferred_version.version == MCM_VERSION


def test_api_group_lists_crd_versions_by_priority(kube_api: client.ApiClient) -> None:
    """apiextensions sorts a group's versions kube-aware (GA, then beta, then alpha; higher first)
    and prefers the first, whatever order the CRD declares them in."""
    group_name = f"{unique('g')}.example.com"
    declared = ["v1alpha1", "v1beta1", "v1", "v2beta1"]
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"things.{group_name}"},
        "spec": {
            "group": group_name,
            "scope": "Namespaced",
            "names": {"plural": "things", "singular": "thing", "kind": "Thing"},
            "versions": [
                {
                    "name": v,
                    "served": True,
                    "storage": v == "v1beta1",
                    "schema": {"openAPIV3Schema": WIDGET_SCHEMA},
                }
                for v in declared
            ],
        },
    }
    ext = client.ApiextensionsV1Api(kube_api)
    ext.create_custom_resource_definition(crd)
    try:
        group = _api_group(kube_api, group_name)
        assert _versions(group) == [f"{group_name}/{v}" for v in ("v1", "v2beta1", "v1beta1", "v1alpha1")]
        assert group.preferred_version.version == "v1"
        listed = {g.name: g for g in client.ApisApi(kube_api).get_api_versions().groups}
        assert _versions(listed[group_name]) == _versions(group)
    finally:
        ext.delete_custom_resource_definition(f"things.{group_name}")
