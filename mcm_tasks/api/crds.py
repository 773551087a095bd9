"""CustomResourceDefinitions generated from the API models, so that the schema the API server enforces
and the models the controllers read can never disagree.

The models' JSON schema (pydantic) is turned into a *structural* OpenAPI v3 schema: references inlined,
``Optional`` unwrapped, titles and defaults dropped (the CRDs do no defaulting, as upstream), objects
typed, and free-form maps, ``providerSpec`` and the subtrees a model marks as open kept with
``x-kubernetes-preserve-unknown-fields``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from mcm_tasks.api.base import PRESERVE_UNKNOWN_FIELDS
from mcm_tasks.api.constants import GROUP, VERSION
from mcm_tasks.api.meta import K8sObject
from mcm_tasks.api.registry import OBJECT_KINDS, OWN_KINDS

JsonSchema = dict[str, Any]

_DROPPED_KEYS = {"title", "default", "description", "examples"}


def _inline_ref(node: JsonSchema, defs: dict[str, JsonSchema]) -> JsonSchema:
    name = node["$ref"].rsplit("/", 1)[-1]
    siblings = {k: v for k, v in node.items() if k != "$ref"}
    return {**defs[name], **siblings}


def _structural(node: JsonSchema, defs: dict[str, JsonSchema], path: str) -> JsonSchema:
    if "$ref" in node:
        return _structural(_inline_ref(node, defs), defs, path)
    if "anyOf" in node:
        variants = [v for v in node["anyOf"] if v.get("type") != "null"]
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        if len(variants) == 1:
            return _structural({**variants[0], **rest}, defs, path)
        if not node.get("x-kubernetes-int-or-string"):
            raise ValueError(f"{path}: a union other than int-or-string has no structural schema")
        return {k: v for k, v in node.items() if k not in _DROPPED_KEYS}

    out: JsonSchema = {k: v for k, v in node.items() if k not in _DROPPED_KEYS}
    if "properties" in node:
        # models accept extra keys (lossless reads); whether the *server* keeps them is the model's
        # explicit choice (PRESERVE_UNKNOWN_FIELDS), not a side effect of extra="allow"
        out.pop("additionalProperties", None)
        out["type"] = "object"
        out["properties"] = {
            key: _structural(sub, defs, f"{path}.{key}") for key, sub in node["properties"].items()
        }
    elif out.get("type") == "object":
        extra = out.pop("additionalProperties", True)
        if extra is True or extra == {}:
            out[PRESERVE_UNKNOWN_FIELDS] = True
        else:
            out["additionalProperties"] = _structural(extra, defs, f"{path}.*")
    if "items" in node:
        out["items"] = _structural(node["items"], defs, f"{path}[]")
    if "type" not in out and not out.get(PRESERVE_UNKNOWN_FIELDS):
        raise ValueError(f"{path}: no type in {node}")
    return out


def openapi_schema(model: type[K8sObject]) -> JsonSchema:
    """The ``openAPIV3Schema`` of a kind."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    schema = _structural(raw, defs, model.__name__)
    # the API server owns the top-level metadata schema and allows nothing but "type: object" here
    schema["properties"]["metadata"] = {"type": "object"}
    return schema


def _printer_columns(model: type[K8sObject]) -> list[JsonSchema]:
    columns = []
    for column in model.RESOURCE.printer_columns:
        entry: JsonSchema = {"name": column.name, "type": column.type, "jsonPath": column.json_path}
        if column.description:
            entry["description"] = column.description
        if column.priority:
            entry["priority"] = column.priority
        columns.append(entry)
    return columns


def crd_for(model: type[K8sObject]) -> JsonSchema:
    """The CustomResourceDefinition of one kind."""
    info = model.RESOURCE
    group = info.group or GROUP
    version: JsonSchema = {"name": VERSION, "served": True, "storage": True}
    columns = _printer_columns(model)
    if columns:
        version["additionalPrinterColumns"] = columns
    version["schema"] = {"openAPIV3Schema": openapi_schema(model)}
    subresources: JsonSchema = {}
    if info.status:
        subresources["status"] = {}
    if info.scale:
        subresources["scale"] = {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
        }
    if subresources:
        version["subresources"] = subresources
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{info.plural}.{group}"},
        "spec": {
            "group": group,
            "names": {
                "kind": model.model_fields["kind"].default,
                "listKind": info.list_kind,
                "plural": info.plural,
                "singular": info.singular,
                "shortNames": list(info.short_names),
            },
            "scope": "Namespaced",
            "versions": [version],
        },
    }


def all_crds() -> list[JsonSchema]:
    """MCM's four kinds, then mcm-tasks's own (``mcm-tasks.io``)."""
    return [crd_for(model) for model in (*OBJECT_KINDS, *OWN_KINDS)]


def crd_file_name(crd: JsonSchema) -> str:
    """Upstream's naming: ``machine.sapcloud.io_machines.yaml``."""
    return f"{crd['spec']['group']}_{crd['spec']['names']['plural']}.yaml"


def render(crd: JsonSchema) -> str:
    return yaml.safe_dump(crd, sort_keys=True, width=110)


def crds_command(out: str) -> None:
    """``mcm-tasks crds``: all CRDs to stdout as one multi-document YAML, or one file each into ``out``."""
    crds = all_crds()
    if not out:
        sys.stdout.write("---\n".join(render(crd) for crd in crds))
        return
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    for crd in crds:
        path = folder / crd_file_name(crd)
        path.write_text(render(crd))
        print(f"wrote {path}")
