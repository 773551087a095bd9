from __future__ import annotations

import copy
from typing import Any

import pytest

from mcm_sandbox.patch import (
    MAX_JSON_PATCH_OPERATIONS,
    PRIMITIVE,
    PatchError,
    json_patch,
    merge_keys_for,
    merge_patch,
    strategic_merge_patch,
)


def _pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "labels": {"app": "web", "tier": "front"},
            "finalizers": ["a", "b"],
            "ownerReferences": [{"uid": "u1", "name": "rs1", "kind": "ReplicaSet"}],
        },
        "spec": {
            "containers": [
                {
                    "name": "c1",
                    "image": "i1",
                    "env": [{"name": "A", "value": "1"}],
                    "ports": [{"containerPort": 80, "protocol": "TCP"}],
                },
                {"name": "c2", "image": "i2"},
            ],
            "volumes": [{"name": "v1", "emptyDir": {}}],
            "tolerations": [{"key": "t1", "operator": "Exists"}],
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "PodScheduled", "status": "True"},
            ],
        },
    }


def _node() -> dict[str, Any]:
    return {
        "kind": "Node",
        "metadata": {"name": "n"},
        "spec": {"taints": [{"key": "k1", "effect": "NoSchedule"}], "podCIDRs": ["10.0.0.0/24"]},
        "status": {
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
            "conditions": [{"type": "Ready", "status": "True"}],
            "volumesAttached": [{"name": "vol-1", "devicePath": "/dev/a"}],
        },
    }


# --------------------------------------------------------------------------- merge patch (RFC 7386)


@pytest.mark.parametrize(
    ("target", "patch", "expected"),
    [
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
        ({"a": {"b": 1}}, {}, {"a": {"b": 1}}),
    ],
)
def test_merge_patch_rfc7386_examples(target: dict, patch: dict, expected: dict) -> None:
    before = copy.deepcopy(target)
    assert merge_patch(target, patch) == expected
    assert target == before


@pytest.mark.parametrize("patch", [["a"], "x", 3, None])
def test_merge_patch_non_object_is_400(patch: Any) -> None:
    with pytest.raises(PatchError) as err:
        merge_patch({"a": 1}, patch)
    assert err.value.status_code == 400 and err.value.reason == "BadRequest"


def test_merge_patch_does_not_share_structure_with_the_patch() -> None:
    patch = {"spec": {"list": [1, 2]}}
    result = merge_patch({}, patch)
    result["spec"]["list"].append(3)
    assert patch == {"spec": {"list": [1, 2]}}


# --------------------------------------------------------------------------- JSON patch (RFC 6902)


def test_json_patch_applies_ops_in_order_without_mutating() -> None:
    pod = _pod()
    ops = [
        {"op": "test", "path": "/metadata/name", "value": "p"},
        {"op": "replace", "path": "/metadata/name", "value": "q"},
        {"op": "add", "path": "/metadata/finalizers/-", "value": "c"},
        {"op": "remove", "path": "/metadata/labels/tier"},
        {"op": "copy", "from": "/metadata/name", "path": "/metadata/annotations"},
        {"op": "move", "from": "/metadata/annotations", "path": "/metadata/generateName"},
    ]
    result = json_patch(pod, ops)
    assert result["metadata"]["name"] == "q"
    assert result["metadata"]["finalizers"] == ["a", "b", "c"]
    assert result["metadata"]["labels"] == {"app": "web"}
    assert result["metadata"]["generateName"] == "q" and "annotations" not in result["metadata"]
    assert pod == _pod()


@pytest.mark.parametrize(
    ("ops", "code"),
    [
        ([{"op": "test", "path": "/metadata/name", "value": "other"}], 422),
        ([{"op": "remove", "path": "/metadata/missing"}], 422),
        ([{"op": "replace", "path": "/nope/deeper", "value": 1}], 422),
        ([{"op": "add", "path": "/spec/containers/9", "value": {}}], 422),
        ([{"op": "frobnicate", "path": "/a"}], 422),
        ([{"path": "/a", "value": 1}], 422),
        ([{"op": "add", "path": "", "value": [1]}], 422),
        ({"op": "add", "path": "/a", "value": 1}, 400),
        (["add"], 400),
        ("not a patch", 400),
    ],
)
def test_json_patch_errors_use_kubes_codes(ops: Any, code: int) -> None:
    with pytest.raises(PatchError) as err:
        json_patch(_pod(), ops)
    assert err.value.status_code == code
    if code == 422:
        assert err.value.reason == "Invalid"
        assert str(err.value) == "the server rejected our request due to an error in our request"
        assert err.value.detail


def test_json_patch_too_many_operations_is_413() -> None:
    ops = [{"op": "test", "path": "/kind", "value": "Pod"}] * (MAX_JSON_PATCH_OPERATIONS + 1)
    with pytest.raises(PatchError) as err:
        json_patch(_pod(), ops)
    assert err.value.status_code == 413 and err.value.reason == "RequestEntityTooLarge"


def test_json_patch_failed_test_applies_nothing() -> None:
    pod = _pod()
    with pytest.raises(PatchError):
        json_patch(
            pod, [{"op": "remove", "path": "/metadata/labels"}, {"op": "test", "path": "/kind", "value": "X"}]
        )
    assert pod == _pod()


# --------------------------------------------------------------------------- strategic merge patch


def test_merge_keys_come_from_the_published_openapi_extensions() -> None:
    assert merge_keys_for("Service")["spec.ports"] == "port"  # kubectl apply of a two-port Service
    deployment = merge_keys_for("Deployment", "apps/v1")
    assert deployment["spec.template.spec.containers"] == "name"
    assert deployment["spec.template.spec.containers.ports"] == "containerPort"
    assert merge_keys_for("DaemonSet", "apps/v1")["status.conditions"] == "type"
    assert merge_keys_for("Event", "v1") == merge_keys_for("Secret")
    pod = merge_keys_for("Pod")
    assert pod["metadata.finalizers"] is PRIMITIVE
    assert pod["metadata.ownerReferences"] == "uid"
    assert pod["spec.containers"] == "name"
    assert pod["spec.initContainers"] == "name"
    assert pod["spec.containers.env"] == "name"
    assert pod["spec.containers.ports"] == "containerPort"
    assert pod["spec.volumes"] == "name"
    assert pod["status.conditions"] == "type"
    assert "spec.tolerations" not in pod
    node = merge_keys_for("Node")
    assert node["status.addresses"] == "type" and node["status.conditions"] == "type"
    assert "spec.taints" not in node and "status.volumesAttached" not in node
    assert merge_keys_for("PodDisruptionBudget")["status.conditions"] == "type"
    assert merge_keys_for("Secret") == {"metadata.finalizers": PRIMITIVE, "metadata.ownerReferences": "uid"}


def _smp(patch: dict[str, Any], obj: dict[str, Any] | None = None, kind: str = "Pod") -> dict[str, Any]:
    return strategic_merge_patch(obj if obj is not None else _pod(), patch, kind)


def test_smp_maps_merge_and_null_deletes() -> None:
    result = _smp({"metadata": {"labels": {"tier": None, "new": "x"}, "annotations": {"a": "b"}}})
    assert result["metadata"]["labels"] == {"app": "web", "new": "x"}
    assert result["metadata"]["annotations"] == {"a": "b"}
    assert result["metadata"]["finalizers"] == ["a", "b"]


def test_smp_does_not_mutate_inputs() -> None:
    pod, patch = _pod(), {"spec": {"containers": [{"name": "c1", "$patch": "delete"}]}}
    frozen = copy.deepcopy(patch)
    _smp(patch, pod)
    assert pod == _pod() and patch == frozen


def test_smp_primitive_merge_list_is_a_set_union_new_items_first() -> None:
    assert _smp({"metadata": {"finalizers": ["c", "a"]}})["metadata"]["finalizers"] == ["c", "a", "b"]


def test_smp_delete_from_primitive_list() -> None:
    patch = {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a", "zz"]}}
    assert _smp(patch)["metadata"]["finalizers"] == ["b"]


def test_smp_set_element_order_for_primitives_and_maps() -> None:
    result = _smp({"metadata": {"$setElementOrder/finalizers": ["b", "a"]}})
    assert result["metadata"]["finalizers"] == ["b", "a"]
    patch = {"spec": {"$setElementOrder/containers": [{"name": "c2"}, {"name": "c1"}]}}
    assert [c["name"] for c in _smp(patch)["spec"]["containers"]] == ["c2", "c1"]
    patch = {
        "spec": {
            "$setElementOrder/containers": [{"name": "c2"}, {"name": "c3"}, {"name": "c1"}],
            "containers": [{"name": "c3", "image": "i3"}],
        }
    }
    assert [c["name"] for c in _smp(patch)["spec"]["containers"]] == ["c2", "c3", "c1"]


def test_smp_keyed_list_merges_by_name_and_recurses() -> None:
    patch = {"spec": {"containers": [{"name": "c1", "image": "new", "env": [{"name": "B", "value": "2"}]}]}}
    c1 = _smp(patch)["spec"]["containers"][0]
    assert c1["image"] == "new"
    assert c1["env"] == [{"name": "B", "value": "2"}, {"name": "A", "value": "1"}]
    assert c1["ports"] == [{"containerPort": 80, "protocol": "TCP"}]


def test_smp_keyed_list_new_element_added_and_delete_directive() -> None:
    result = _smp(
        {"spec": {"containers": [{"name": "c3", "image": "i3"}, {"name": "c2", "$patch": "delete"}]}}
    )
    assert [c["name"] for c in result["spec"]["containers"]] == ["c3", "c1"]


def test_smp_ports_merge_by_container_port() -> None:
    patch = {"spec": {"containers": [{"name": "c1", "ports": [{"containerPort": 80, "name": "http"}]}]}}
    ports = _smp(patch)["spec"]["containers"][0]["ports"]
    assert ports == [{"containerPort": 80, "protocol": "TCP", "name": "http"}]


def test_smp_list_replace_directive() -> None:
    patch = {"status": {"conditions": [{"$patch": "replace"}, {"type": "Only", "status": "True"}]}}
    assert _smp(patch)["status"]["conditions"] == [{"type": "Only", "status": "True"}]


def test_smp_conditions_merge_by_type() -> None:
    patch = {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Down"}]}}
    conditions = _smp(patch)["status"]["conditions"]
    assert conditions == [
        {"type": "Ready", "status": "False", "reason": "Down"},
        {"type": "PodScheduled", "status": "True"},
    ]


def test_smp_owner_references_merge_by_uid() -> None:
    patch = {"metadata": {"ownerReferences": [{"uid": "u2", "name": "m", "kind": "Machine"}]}}
    refs = _smp(patch)["metadata"]["ownerReferences"]
    assert {r["uid"] for r in refs} == {"u1", "u2"}


def test_smp_atomic_lists_are_replaced() -> None:
    assert _smp({"spec": {"tolerations": [{"key": "t2"}]}})["spec"]["tolerations"] == [{"key": "t2"}]
    node = _smp({"spec": {"taints": [{"key": "k2", "effect": "NoExecute"}]}}, _node(), "Node")
    assert node["spec"]["taints"] == [{"key": "k2", "effect": "NoExecute"}]
    node = _smp({"status": {"volumesAttached": []}}, _node(), "Node")
    assert node["status"]["volumesAttached"] == []


def test_smp_node_addresses_and_pod_cidrs() -> None:
    patch = {
        "spec": {"podCIDRs": ["10.0.1.0/24"]},
        "status": {"addresses": [{"type": "Hostname", "address": "n"}]},
    }
    node = _smp(patch, _node(), "Node")
    assert node["spec"]["podCIDRs"] == ["10.0.1.0/24", "10.0.0.0/24"]
    assert {a["type"] for a in node["status"]["addresses"]} == {"InternalIP", "Hostname"}


def test_smp_map_directives() -> None:
    assert _smp({"metadata": {"labels": {"$patch": "replace", "only": "x"}}})["metadata"]["labels"] == {
        "only": "x"
    }
    assert _smp({"metadata": {"labels": {"$patch": "delete"}}})["metadata"]["labels"] == {}
    merged = _smp({"metadata": {"labels": {"$patch": "merge", "more": "y"}}})["metadata"]["labels"]
    assert merged == {"app": "web", "tier": "front", "more": "y"}


def test_smp_retain_keys_clears_other_fields() -> None:
    patch = {
        "spec": {"volumes": [{"name": "v1", "$retainKeys": ["name", "hostPath"], "hostPath": {"path": "/x"}}]}
    }
    assert _smp(patch)["spec"]["volumes"] == [{"name": "v1", "hostPath": {"path": "/x"}}]


@pytest.mark.parametrize(
    ("patch", "code"),
    [
        ({"spec": {"volumes": [{"name": "v1", "$retainKeys": ["name"], "hostPath": {}}]}}, 400),
        ({"spec": {"volumes": [{"name": "v1", "$retainKeys": "name"}]}}, 400),
        ({"metadata": {"$deleteFromPrimitiveList/finalizers": "a"}}, 400),
        ({"metadata": {"$deleteFromPrimitiveList": ["a"]}}, 400),
        ({"metadata": {"$setElementOrder/finalizers": "a"}}, 400),
        ({"metadata": {"finalizers": [["nested"]]}}, 422),
        ({"spec": {"containers": [{"image": "no-name"}]}}, 500),
        ({"spec": {"containers": [{"$patch": "delete"}]}}, 500),
        ({"spec": {"containers": [{"name": "c1", "$patch": "bogus"}]}}, 500),
        ({"metadata": {"labels": {"$patch": "bogus"}}}, 500),
    ],
)
def test_smp_malformed_patches(patch: dict[str, Any], code: int) -> None:
    with pytest.raises(PatchError) as err:
        _smp(patch)
    assert err.value.status_code == code


def test_smp_non_object_patch_is_400() -> None:
    with pytest.raises(PatchError) as err:
        strategic_merge_patch(_pod(), ["x"], "Pod")
    assert err.value.status_code == 400


def test_smp_new_subtrees_lose_directives_and_nulls() -> None:
    result = _smp(
        {"spec": {"nodeSelector": {"a": "b", "gone": None}}, "status": {"hostIPs": [{"ip": "1.2.3.4"}]}}
    )
    assert result["spec"]["nodeSelector"] == {"a": "b"}
    assert result["status"]["hostIPs"] == [{"ip": "1.2.3.4"}]
