"""The sandbox's field manager: managedFields on every write, as kube-apiserver keeps them (issue 15)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mcm_sandbox.apiserver import apply, errors, lastapplied
from mcm_sandbox.apiserver import fieldsets as fs
from mcm_sandbox.apiserver import managed_fields as mf
from mcm_sandbox.apiserver.resources import Registry

REGISTRY = Registry()
DEPLOYMENTS = REGISTRY.get("apps", "v1", "deployments")
CONFIGMAPS = REGISTRY.get("", "v1", "configmaps")
assert DEPLOYMENTS is not None and CONFIGMAPS is not None
DEP_SCHEMA = apply.schema_for(DEPLOYMENTS)
CM_SCHEMA = apply.schema_for(CONFIGMAPS)


def deployment(replicas: int = 1, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "ns", "uid": "u1", "resourceVersion": "5", **meta},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "nginx", "ports": [{"containerPort": 80}]}]},
            },
        },
    }


def update(
    old: dict[str, Any] | None, new: dict[str, Any], manager: str, sub: str | None = None
) -> dict[str, Any]:
    mf.record_update(old, new, DEP_SCHEMA, manager, "apps/v1", sub, has_status=True, crd=False)
    return new


def entries(obj: dict[str, Any]) -> dict[tuple[str, str, str], set[fs.Path]]:
    return {
        (e["manager"], e["operation"], e.get("subresource", "")): fs.decode(e["fieldsV1"])
        for e in obj["metadata"].get("managedFields") or []
    }


# --- FieldsV1 trees ---------------------------------------------------------------------------


def test_fieldsv1_marks_members_with_children_by_a_dot() -> None:
    paths = {("f:data",), ("f:data", "f:a"), ("f:spec", "f:x")}
    tree = fs.encode(paths)
    assert tree == {"f:data": {".": {}, "f:a": {}}, "f:spec": {"f:x": {}}}
    assert fs.decode(tree) == paths


def test_discard_prunes_empty_prefixes_and_keeps_members() -> None:
    tree = fs.encode({("f:data",), ("f:data", "f:a"), ("f:spec", "f:x")})
    fs.discard(tree, ("f:data", "f:a"))
    fs.discard(tree, ("f:spec", "f:x"))
    assert tree == {"f:data": {}}  # still a member; the bare prefix went
    fs.discard(tree, ("f:data",))
    assert tree == {}


def test_compare_finds_added_modified_removed_and_new_maps() -> None:
    old = {"spec": {"a": 1, "b": 2}}
    new = {"spec": {"a": 9}, "data": {"k": "v"}}
    changed, removed = fs.compare(old, new, {})
    assert set(changed) == {("f:spec", "f:a"), ("f:data",), ("f:data", "f:k")}
    assert removed == [("f:spec", "f:b")]


def test_list_map_items_are_keyed_with_defaulted_keys() -> None:
    fields = fs.field_set(deployment(), DEP_SCHEMA)
    port = ("f:spec", "f:template", "f:spec", "f:containers", 'k:{"name":"c"}', "f:ports")
    assert (*port, 'k:{"containerPort":80,"protocol":"TCP"}') in fields  # protocol: TCP by default


def test_crd_list_map_key_defaults_come_from_the_schema() -> None:
    schema = {
        "type": "object",
        "properties": {
            "rules": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name", "zone"],
                "items": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}, "zone": {"type": "string", "default": "a"}},
                },
            }
        },
    }
    assert fs.field_set({"rules": [{"name": "r"}]}, schema) == {
        ("f:rules", 'k:{"name":"r","zone":"a"}'),
        ("f:rules", 'k:{"name":"r","zone":"a"}', "f:name"),
    }
    merged = apply.merge({"rules": [{"name": "r", "zone": "a", "x": 1}]}, {"rules": [{"name": "r"}]}, schema)
    assert merged == {"rules": [{"name": "r", "zone": "a", "x": 1}]}  # one item, matched by default


# --- the Update operation ---------------------------------------------------------------------


def test_a_create_owns_every_field_it_set_but_not_server_metadata() -> None:
    created = update(None, deployment(), "kubectl-create")
    (entry,) = created["metadata"]["managedFields"]
    assert list(entry) == ["manager", "operation", "apiVersion", "time", "fieldsType", "fieldsV1"]
    assert (entry["manager"], entry["operation"], entry["apiVersion"]) == (
        "kubectl-create",
        "Update",
        "apps/v1",
    )
    tree = entry["fieldsV1"]
    assert "f:metadata" not in tree  # name, namespace, uid, resourceVersion: stripped
    assert "." not in tree["f:spec"]  # a Go struct exists in the empty object: not owned itself
    assert tree["f:spec"]["f:replicas"] == {}
    container = tree["f:spec"]["f:template"]["f:spec"]["f:containers"]['k:{"name":"c"}']
    assert next(iter(container)) == "."  # the item is a member, written first


def test_an_update_takes_changed_fields_from_their_owner() -> None:
    old = update(None, deployment(1), "creator")
    new = update(old, {**json.loads(json.dumps(old)), "spec": {**old["spec"], "replicas": 3}}, "scaler")
    owned = entries(new)
    assert owned[("scaler", "Update", "")] == {("f:spec", "f:replicas")}
    assert ("f:spec", "f:replicas") not in owned[("creator", "Update", "")]


def test_removed_fields_leave_every_owner_and_empty_entries_go() -> None:
    old = update(None, deployment(1, labels={"a": "1"}), "creator")
    relabeled = json.loads(json.dumps(old))
    relabeled["metadata"]["labels"] = {"a": "2"}
    relabeled = update(old, relabeled, "labeler")
    dropped = json.loads(json.dumps(relabeled))
    del dropped["metadata"]["labels"]
    dropped = update(relabeled, dropped, "creator")
    assert ("labeler", "Update", "") not in entries(dropped)


def test_an_update_that_changes_nothing_keeps_entries_and_times() -> None:
    old = update(None, deployment(), "creator")
    old["metadata"]["managedFields"][0]["time"] = "2020-01-01T00:00:00Z"
    same = update(
        old, json.loads(json.dumps({**old, "metadata": {**old["metadata"], "managedFields": []}})), "x"
    )
    assert same["metadata"]["managedFields"] == old["metadata"]["managedFields"]


def test_status_writes_are_a_status_subresource_entry() -> None:
    old = update(None, deployment(), "creator")
    new = json.loads(json.dumps(old))
    new["status"] = {"replicas": 1}
    new = update(old, new, "controller", sub="status")
    entry = next(e for e in new["metadata"]["managedFields"] if e["manager"] == "controller")
    assert entry["subresource"] == "status" and entry["fieldsV1"] == {"f:status": {".": {}, "f:replicas": {}}}


def test_a_request_can_replace_or_clear_managed_fields() -> None:
    old = update(None, deployment(), "creator")
    cleared = json.loads(json.dumps(old))
    cleared["metadata"]["managedFields"] = [{}]
    assert "managedFields" not in update(old, cleared, "x")["metadata"]
    garbage = json.loads(json.dumps(old))
    garbage["metadata"]["managedFields"] = [{"manager": "x"}]  # invalid: the live ones stay
    assert update(old, garbage, "x")["metadata"]["managedFields"] == old["metadata"]["managedFields"]


def test_update_managers_are_capped_into_ancient_changes() -> None:
    obj = update(None, deployment(), "m00")
    for i in range(1, 13):
        new = json.loads(json.dumps(obj))
        new["metadata"]["annotations"] = {**(obj["metadata"].get("annotations") or {}), f"k{i}": "v"}
        for e in obj["metadata"]["managedFields"]:
            e["time"] = f"2020-01-01T00:00:{i:02d}Z"
        obj = update(obj, new, f"m{i:02d}")
    managers = [e["manager"] for e in obj["metadata"]["managedFields"]]
    assert len(managers) == mf.MAX_UPDATE_MANAGERS and "ancient-changes" in managers
    assert "m12" in managers and "m00" not in managers


def test_entries_sort_applies_first_then_by_time() -> None:
    out = mf.finish(
        [
            mf.make_entry("b", "Update", "v1", "2020-01-01T00:00:02Z", {"f:a": {}}, ""),
            mf.make_entry("a", "Update", "v1", "2020-01-01T00:00:03Z", {"f:b": {}}, ""),
            mf.make_entry("z", "Apply", "v1", "2020-01-01T00:00:09Z", {"f:c": {}}, ""),
        ]
    )
    assert [e["manager"] for e in out] == ["z", "b", "a"]


# --- the Apply operation against Update managers ----------------------------------------------


def applied(replicas: int) -> dict[str, Any]:
    body = deployment(replicas)
    for key in ("uid", "resourceVersion", "namespace"):
        del body["metadata"][key]
    return body


def test_apply_conflicts_with_an_update_manager_and_force_takes_the_field() -> None:
    live = update(None, deployment(1), "creator")
    scaled = json.loads(json.dumps(live))
    scaled["spec"]["replicas"] = 5
    scaled = update(live, scaled, "kubectl", sub="scale")
    with pytest.raises(errors.ApiError) as info:
        apply.apply(scaled, applied(2), DEP_SCHEMA, "ci", "apps/v1", False, None, True)
    manager = '"kubectl" with subresource "scale" using apps/v1'
    assert info.value.message == f"Apply failed with 1 conflict: conflict with {manager}: .spec.replicas"
    result = apply.apply(scaled, applied(2), DEP_SCHEMA, "ci", "apps/v1", True, None, True)
    owned = entries(result)
    assert ("kubectl", "Update", "scale") not in owned  # its only field went to the applier
    assert ("f:spec", "f:replicas") in owned[("ci", "Apply", "")]
    assert result["spec"]["replicas"] == 2


def test_equal_values_are_shared_not_conflicts() -> None:
    live = update(None, deployment(2), "creator")
    result = apply.apply(live, applied(2), DEP_SCHEMA, "ci", "apps/v1", False, None, True)
    owned = entries(result)
    assert ("f:spec", "f:replicas") in owned[("ci", "Apply", "")] & owned[("creator", "Update", "")]


def test_conflict_paths_print_keys_as_upstream() -> None:
    path = ("f:spec", "f:ports", 'k:{"port":80,"protocol":"TCP"}', "f:targetPort")
    assert apply._path_text(path) == '.spec.ports[port=80,protocol="TCP"].targetPort'
    assert apply._path_text(("f:metadata", "f:finalizers", 'v:"a"')) == '.metadata.finalizers[="a"]'


# --- client-side apply to server-side apply ---------------------------------------------------


def client_side_applied(replicas: int) -> dict[str, Any]:
    config = applied(replicas)
    obj = deployment(replicas)
    obj["metadata"]["annotations"] = {lastapplied.ANNOTATION: lastapplied.go_json(config) + "\n"}
    return update(None, obj, "kubectl-client-side-apply")


def test_kubectl_takes_over_fields_its_client_side_apply_set() -> None:
    live = client_side_applied(2)
    result = apply.apply(live, applied(3), DEP_SCHEMA, "kubectl", "apps/v1", False, None, True)
    assert result["spec"]["replicas"] == 3
    assert ("f:spec", "f:replicas") not in entries(result)[("kubectl-client-side-apply", "Update", "")]
    annotation = json.loads(result["metadata"]["annotations"][lastapplied.ANNOTATION])
    assert annotation["spec"]["replicas"] == 3  # the annotation follows what kubectl applied


def test_other_managers_and_drifted_fields_still_conflict() -> None:
    live = client_side_applied(2)
    with pytest.raises(errors.ApiError):
        apply.apply(live, applied(3), DEP_SCHEMA, "ci", "apps/v1", False, None, True)
    drifted = json.loads(json.dumps(live))
    drifted["spec"]["replicas"] = 7  # changed since the client-side apply, by someone else
    drifted = update(live, drifted, "hpa")
    with pytest.raises(errors.ApiError) as info:
        apply.apply(drifted, applied(3), DEP_SCHEMA, "kubectl", "apps/v1", False, None, True)
    assert '"hpa" using apps/v1' in info.value.message


def test_go_json_escapes_html_and_sorts_keys() -> None:
    assert lastapplied.go_json({"b": "<&>", "a": "é"}) == '{"a":"é","b":"\\u003c\\u0026\\u003e"}'


def test_configmap_data_keys_are_fields() -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}}
    mf.record_update(None, cm, CM_SCHEMA, "m", "v1", None, has_status=False, crd=False)
    assert cm["metadata"]["managedFields"][0]["fieldsV1"] == {"f:data": {".": {}, "f:a": {}}}


@pytest.mark.parametrize(
    "obj",
    [
        deployment(2, labels={"a": "1"}, finalizers=["x", "y"]),
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "c"},
            "data": {"a": "1"},
            "binaryData": {},
        },
        {**deployment(), "spec": {}},
    ],
)
def test_the_create_shortcut_owns_what_the_general_diff_does(obj: dict[str, Any]) -> None:
    """A create builds its tree directly; it must equal the diff against the empty Go object."""
    for crd in (False, True):
        fast = json.loads(json.dumps(obj))
        mf.record_update(None, fast, DEP_SCHEMA, "m", "apps/v1", None, has_status=True, crd=crd)
        changed, removed = mf.changes(None, obj, DEP_SCHEMA, None, True, crd)
        assert not removed
        expected = fs.encode(set(changed)) if changed else None
        got = fast["metadata"].get("managedFields")
        assert (got[0]["fieldsV1"] if got else None) == (fs.sorted_tree(expected) if expected else None)


def test_an_applier_owns_the_metadata_it_applies() -> None:
    live = update(None, deployment(1), "creator")
    config = applied(1)
    config["metadata"]["annotations"] = {"a": "1"}
    result = apply.apply(live, config, DEP_SCHEMA, "annotator", "apps/v1", False, None, True)
    owned = entries(result)[("annotator", "Apply", "")]
    assert ("f:metadata", "f:annotations", "f:a") in owned
    assert not {p for p in owned if p[:2] in {("f:metadata", "f:name"), ("f:metadata", "f:namespace")}}


def test_pruning_a_map_keeps_what_other_managers_own_under_it() -> None:
    config = applied(1)
    config["metadata"]["annotations"] = {"a": "1", "b": "2"}
    live = update(None, deployment(1), "creator")
    live = apply.apply(live, config, DEP_SCHEMA, "one", "apps/v1", False, None, True)
    other = applied(1)
    other["metadata"]["annotations"] = {"b": "2"}
    live = apply.apply(live, other, DEP_SCHEMA, "two", "apps/v1", False, None, True)
    del config["metadata"]["annotations"]  # "one" stops applying annotations
    result = apply.apply(live, config, DEP_SCHEMA, "one", "apps/v1", False, None, True)
    assert result["metadata"]["annotations"] == {"b": "2"}


def test_times_a_client_sends_back_are_read_as_metav1_time() -> None:
    old = update(None, deployment(), "creator")
    echoed = json.loads(json.dumps(old))
    stamp = echoed["metadata"]["managedFields"][0]["time"]
    echoed["metadata"]["managedFields"][0]["time"] = stamp.replace("Z", "+00:00")  # the Python client
    assert update(old, echoed, "x")["metadata"]["managedFields"] == old["metadata"]["managedFields"]
