"""The CRDs are generated from the models, are structural, match upstream's names and columns, accept
the upstream-format manifests, refuse wrong types, and the checked-in copy under crds/ is current."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from mcm_sandbox import schema as oapi
from mcm_tasks.api import Machine, MachineClass, MachineDeployment, MachineSet
from mcm_tasks.api.crds import all_crds, crd_file_name, crd_for, crds_command, openapi_schema, render
from mcm_tasks.api.meta import K8sObject

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "tests" / "manifests"


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((MANIFESTS / name).read_text())
    return data


# --- drift ---


def test_checked_in_crds_match_the_models() -> None:
    """If this fails, regenerate: ``mcm-tasks crds --out crds/``."""
    expected = {crd_file_name(crd): render(crd) for crd in all_crds()}
    present = {p.name: p.read_text() for p in (ROOT / "crds").glob("*.yaml")}
    assert sorted(present) == sorted(expected)
    for name, text in expected.items():
        assert present[name] == text, f"crds/{name} drifted from the models; run `mcm-tasks crds --out crds/`"


def test_crds_command_prints_all_documents_or_writes_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    crds_command("")
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["metadata"]["name"] for d in docs] == [c["metadata"]["name"] for c in all_crds()]
    crds_command(str(tmp_path / "out"))
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert written == [
        "machine.sapcloud.io_machineclasses.yaml",
        "machine.sapcloud.io_machinedeployments.yaml",
        "machine.sapcloud.io_machines.yaml",
        "machine.sapcloud.io_machinesets.yaml",
        "mcm-tasks.io_machinedrainrules.yaml",
    ]


# --- names, columns, subresources ---


@pytest.mark.parametrize(
    ("model", "plural", "short", "list_kind"),
    [
        (Machine, "machines", "mc", "MachineList"),
        (MachineSet, "machinesets", "mcs", "MachineSetList"),
        (MachineDeployment, "machinedeployments", "mcd", "MachineDeploymentList"),
        (MachineClass, "machineclasses", "mcc", "MachineClassList"),
    ],
)
def test_names_scope_and_version(model: type[K8sObject], plural: str, short: str, list_kind: str) -> None:
    crd = crd_for(model)
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["metadata"]["name"] == f"{plural}.machine.sapcloud.io"
    spec = crd["spec"]
    assert spec["group"] == "machine.sapcloud.io" and spec["scope"] == "Namespaced"
    assert spec["names"] == {"kind": model.__name__, "listKind": list_kind, "plural": plural,
                             "singular": plural[:-2] if plural.endswith("sses") else plural[:-1],
                             "shortNames": [short]}  # fmt: skip
    [version] = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)


def columns(model: type[K8sObject]) -> list[tuple[str, str, str, int]]:
    version = crd_for(model)["spec"]["versions"][0]
    return [
        (c["name"], c["type"], c["jsonPath"], c.get("priority", 0))
        for c in version.get("additionalPrinterColumns", [])
    ]


AGE = ("Age", "date", ".metadata.creationTimestamp", 0)


def test_printer_columns_are_upstreams() -> None:
    assert columns(Machine) == [
        ("Status", "string", ".status.currentStatus.phase", 0),
        AGE,
        ("Node", "string", ".metadata.labels.node", 0),
        ("ProviderID", "string", ".spec.providerID", 1),
    ]
    assert columns(MachineSet) == [
        ("Desired", "integer", ".spec.replicas", 0),
        ("Current", "integer", ".status.replicas", 0),
        ("Ready", "integer", ".status.readyReplicas", 0),
        AGE,
    ]
    assert columns(MachineDeployment) == [
        ("Ready", "integer", ".status.readyReplicas", 0),
        ("Desired", "integer", ".spec.replicas", 0),
        ("Up-to-date", "integer", ".status.updatedReplicas", 0),
        ("Available", "integer", ".status.availableReplicas", 0),
        AGE,
    ]
    assert columns(MachineClass) == []


def test_subresources() -> None:
    scale = {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}
    sub = {
        m: crd_for(m)["spec"]["versions"][0].get("subresources")
        for m in (Machine, MachineSet, MachineDeployment, MachineClass)
    }
    assert sub[Machine] == {"status": {}}
    assert sub[MachineSet] == sub[MachineDeployment] == {"status": {}, "scale": scale}
    assert sub[MachineClass] is None
    assert "status" not in openapi_schema(MachineClass)["properties"]


# --- structural schema ---


def walk(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for key, sub in schema.get("properties", {}).items():
        yield from walk(sub, f"{path}.{key}")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], f"{path}.*")
    if "items" in schema:
        yield from walk(schema["items"], f"{path}[]")


@pytest.mark.parametrize("model", [Machine, MachineSet, MachineDeployment, MachineClass])
def test_schemas_are_structural(model: type[K8sObject]) -> None:
    schema = openapi_schema(model)
    assert schema["properties"]["metadata"] == {"type": "object"}
    for path, node in walk(schema):
        assert "type" in node or node.get("x-kubernetes-int-or-string"), path
        assert not ("properties" in node and "additionalProperties" in node), path
        assert not ({"$ref", "title", "default", "allOf", "oneOf"} & set(node)), path
        if "anyOf" in node:
            assert node.get("x-kubernetes-int-or-string") and node["anyOf"] == [
                {"type": "integer"},
                {"type": "string"},
            ]


def at(schema: dict[str, Any], dotted: str) -> dict[str, Any]:
    node = schema
    for key in dotted.split("."):
        node = node["items"] if key == "[]" else node["properties"][key]
    return node


def test_schema_details() -> None:
    machine = openapi_schema(Machine)
    assert at(machine, "spec.drainTimeout") == {"type": "string"}
    assert at(machine, "spec.inPlaceUpdateTimeout") == {"type": "string"}
    assert at(machine, "spec.maxEvictRetries") == {"type": "integer", "format": "int32"}
    assert at(machine, "status.currentStatus.lastUpdateTime") == {"type": "string", "format": "date-time"}
    assert at(machine, "status")["x-kubernetes-preserve-unknown-fields"] is True
    assert at(machine, "spec.nodeTemplate.spec")["x-kubernetes-preserve-unknown-fields"] is True
    assert at(machine, "spec.nodeTemplate.metadata.labels") == {
        "type": "object",
        "additionalProperties": {"type": "string"},
    }
    assert at(machine, "spec.nodeTemplate.spec.taints.[]")["required"] == ["key", "effect"]
    assert at(machine, "spec.class.name") == {"type": "string"}
    machine_class = openapi_schema(MachineClass)
    assert at(machine_class, "providerSpec") == {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
    }
    assert machine_class["required"] == ["providerSpec"]
    assert at(machine_class, "nodeTemplate")["required"] == ["capacity", "instanceType", "region", "zone"]
    assert (
        at(machine_class, "nodeTemplate.capacity")["additionalProperties"]["x-kubernetes-int-or-string"]
        is True
    )
    deployment = openapi_schema(MachineDeployment)
    assert at(deployment, "spec.strategy.rollingUpdate.maxSurge")["x-kubernetes-int-or-string"] is True
    assert at(deployment, "spec")["required"] == ["template"]
    assert at(deployment, "status.conditions.[]")["required"] == ["type", "status"]
    machine_set = openapi_schema(MachineSet)
    assert "machineSetCondition" in at(machine_set, "status")["properties"]
    assert at(machine_set, "spec.template.metadata")["x-kubernetes-preserve-unknown-fields"] is True


# --- acceptance ---


def schema_problems(obj: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """What the sandbox API server's OpenAPI validator (the project's own) finds wrong."""
    return [str(problem) for problem in oapi.validate(obj, schema)]


KIND_MODELS: dict[str, type[K8sObject]] = {
    m.__name__: m for m in (Machine, MachineSet, MachineDeployment, MachineClass)
}


@pytest.mark.parametrize("path", sorted(MANIFESTS.glob("*.yaml")), ids=lambda p: p.name)
def test_schema_accepts_the_manifests_and_prunes_nothing(path: Path) -> None:
    data = yaml.safe_load(path.read_text())
    schema = openapi_schema(KIND_MODELS[data["kind"]])
    assert schema_problems(data, schema) == []
    assert oapi.prune(data, schema) == data


def test_server_keeps_unknown_fields_only_where_the_models_preserve_them() -> None:
    data = load("machine.yaml")
    data["spec"]["nodeTemplate"]["spec"]["configSource"] = {"configMap": {"name": "c"}}
    data["status"]["futureStatus"] = {"x": 1}
    data["spec"]["typo"] = 1
    pruned = oapi.prune(data, openapi_schema(Machine))
    assert pruned["spec"]["nodeTemplate"]["spec"]["configSource"] == {"configMap": {"name": "c"}}
    assert pruned["status"]["futureStatus"] == {"x": 1}
    assert "typo" not in pruned["spec"]


@pytest.mark.parametrize("crd", all_crds(), ids=lambda c: c["metadata"]["name"])
def test_the_sandbox_finds_the_schemas_structural(crd: dict[str, Any]) -> None:
    assert oapi.check_structural(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]) == []


WRONG_TYPES = [
    ("machineset.yaml", ["spec", "replicas"], "three"),
    ("machineset.yaml", ["spec", "template", "metadata", "labels"], {"a": 1}),
    ("machineset.yaml", ["status", "machineSetCondition"], [{"type": "Frozen"}]),
    ("machine.yaml", ["spec", "class"], "shoot--dev--demo-worker-a-z1-4b7c2"),
    ("machine.yaml", ["spec", "maxEvictRetries"], "many"),
    ("machine.yaml", ["spec", "disableHealthTimeout"], "yes"),
    ("machine.yaml", ["spec", "nodeTemplate", "spec", "taints"], [{"key": "k"}]),
    ("machine.yaml", ["status", "currentStatus", "timeoutActive"], "no"),
    ("machine.yaml", ["status", "currentStatus", "lastUpdateTime"], "yesterday"),
    ("machineclass-aws.yaml", ["providerSpec"], "ami-123"),
    ("machineclass-aws.yaml", ["nodeTemplate", "capacity", "cpu"], [2]),
    ("machinedeployment-rolling.yaml", ["spec", "strategy", "rollingUpdate", "maxSurge"], [1]),
    ("machinedeployment-rolling.yaml", ["spec", "paused"], "false"),
]


@pytest.mark.parametrize(
    ("name", "path", "value"), WRONG_TYPES, ids=[f"{n}:{'.'.join(p)}" for n, p, _ in WRONG_TYPES]
)
def test_schema_refuses_wrong_types(name: str, path: list[str], value: Any) -> None:
    data = copy.deepcopy(load(name))
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    assert schema_problems(data, openapi_schema(KIND_MODELS[data["kind"]])) != []
