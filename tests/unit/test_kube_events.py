"""What counts as "the same event", the involved object, and the Event body; no server."""

from __future__ import annotations

import pytest

from mcm_tasks.kube import events
from mcm_tasks.kube.events import ObjectRef

MACHINE = {
    "apiVersion": "machine.sapcloud.io/v1alpha1",
    "kind": "Machine",
    "metadata": {"name": "m-1", "namespace": "shoot", "uid": "u-1", "resourceVersion": "5"},
    "spec": {"class": {"kind": "MachineClass", "name": "c"}},
}


def ref(**meta: str) -> ObjectRef:
    return ObjectRef.of({**MACHINE, "metadata": {**MACHINE["metadata"], **meta}})  # type: ignore[dict-item]


def key(r: ObjectRef, type_: str = "Warning", reason: str = "FailedCreate", message: str = "boom") -> str:
    return events.event_key(r, type_, reason, message, "machine-controller-manager")


def test_involved_object_is_identity_only() -> None:
    r = ObjectRef.of(MACHINE)
    assert r.as_involved_object() == {
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "Machine",
        "name": "m-1",
        "namespace": "shoot",
        "uid": "u-1",
        "resourceVersion": "5",
    }


def test_same_event_same_key_whatever_the_resource_version() -> None:
    assert key(ref()) == key(ref(resourceVersion="99"))
    assert events.digest(key(ref())) == events.digest(key(ref(resourceVersion="6")))


@pytest.mark.parametrize(
    "other",
    [
        key(ref(), type_="Normal"),
        key(ref(), reason="FailedDelete"),
        key(ref(), message="boom!"),
        key(ref(uid="u-2")),
        key(ref(name="m-2")),
        key(ref(namespace="other")),
        events.event_key(ref(), "Warning", "FailedCreate", "boom", "machine-controller"),
        events.event_key(ref(), "Warning", "FailedCreate", "boom", "machine-controller-manager", "host-a"),
    ],
)
def test_any_difference_makes_another_event(other: str) -> None:
    assert other != key(ref())


def test_fields_cannot_run_into_each_other() -> None:
    a = events.event_key(ref(), "Warning", "a b", "c", "x")
    b = events.event_key(ref(), "Warning", "a", "b c", "x")
    assert a != b


def test_spam_key_ignores_reason_and_message() -> None:
    assert events.spam_key(ref(), "mcm") == events.spam_key(ref(resourceVersion="9"), "mcm")
    assert events.spam_key(ref(), "mcm") != events.spam_key(ref(name="m-2"), "mcm")


def test_secrets_and_anonymous_objects_are_refused() -> None:
    with pytest.raises(TypeError):
        ObjectRef.of(
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"userData": "x"}}
        )
    with pytest.raises(ValueError):
        ObjectRef.of({"metadata": {"name": "x"}})
    with pytest.raises(ValueError):
        ObjectRef.of({"apiVersion": "v1", "kind": "Node", "metadata": {}})


def test_event_body_and_cluster_scoped_namespace() -> None:
    node = ObjectRef.of({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n-1", "uid": "nu"}})
    assert node.event_namespace == "default"
    name = events.event_name(node, 0x1234)
    assert name == "n-1.1234"
    body = events.new_event(
        node, "Normal", "Ready", "node is ready", name=name, count=1,
        first=events.rfc3339(0), last=events.rfc3339(61.9), component="machine-controller",
    )  # fmt: skip
    assert body["metadata"] == {"name": "n-1.1234", "namespace": "default"}
    assert body["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "n-1", "uid": "nu"}
    assert body["source"] == {"component": "machine-controller"}
    assert (body["count"], body["firstTimestamp"], body["lastTimestamp"]) == (
        1, "1970-01-01T00:00:00Z", "1970-01-01T00:01:01Z",
    )  # fmt: skip
    assert "reportingInstance" not in body


def test_recorder_for_is_one_per_client_and_component() -> None:
    from kubernetes.client import ApiClient

    from mcm_tasks.kube.events import recorder_for

    api, other = ApiClient(), ApiClient()
    first = recorder_for(api, "machine-controller")
    assert recorder_for(api, "machine-controller") is first
    assert recorder_for(api, "machine-controller-manager") is not first
    assert recorder_for(other, "machine-controller") is not first
