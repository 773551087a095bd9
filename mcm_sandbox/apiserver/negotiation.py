"""Which shape of a response the ``Accept`` header asks for: the object itself, a ``Table``, or only
its metadata (``PartialObjectMetadata`` / ``PartialObjectMetadataList``), as kube-apiserver's
``negotiation`` and ``transformResponseObject`` decide.

The first media range that names an ``as=`` kind in ``meta.k8s.io`` v1 or v1beta1 wins; a plain
range before it means the object itself. The sandbox answers JSON whatever the range's type (it
reads, but never writes, protobuf), so the type is not part of the choice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mcm_sandbox.apiserver import errors

TABLE = "Table"
PARTIAL = "PartialObjectMetadata"
PARTIAL_LIST = "PartialObjectMetadataList"
META_GROUP = "meta.k8s.io"
META_VERSIONS = ("v1", "v1beta1")


@dataclass(frozen=True, slots=True)
class Conversion:
    kind: str
    version: str

    @property
    def api_version(self) -> str:
        return f"{META_GROUP}/{self.version}"


def conversion(accept: str) -> Conversion | None:
    """The conversion the first acceptable media range asks for (None: the object as stored)."""
    refused: list[str] = []
    for media_range in accept.split(","):
        _media_type, *raw_params = (piece.strip() for piece in media_range.split(";"))
        params = dict(p.split("=", 1) for p in raw_params if "=" in p)
        wanted = params.get("as")
        if not wanted:
            return None
        group, version = params.get("g", ""), params.get("v", "")
        if wanted in (TABLE, PARTIAL, PARTIAL_LIST) and group == META_GROUP and version in META_VERSIONS:
            return Conversion(wanted, version)
        refused.append(media_range.strip())
    if refused:  # every range asked for a conversion nobody serves
        raise errors.not_acceptable(accept)
    return None


def partial(obj: dict[str, Any], conv: Conversion) -> dict[str, Any]:
    return {"kind": PARTIAL, "apiVersion": conv.api_version, "metadata": obj.get("metadata") or {}}


def partial_object(obj: dict[str, Any], conv: Conversion, type_name: str) -> dict[str, Any]:
    """``asPartialObjectMetadata``: one object's metadata; a list-kind target is refused."""
    if conv.kind != PARTIAL:
        raise errors.not_acceptable_message(
            f"you requested {conv.kind}, but the requested object is not a list (*{type_name})"
        )
    return partial(obj, conv)


def partial_list(
    objs: list[dict[str, Any]], list_meta: dict[str, Any], conv: Conversion, type_name: str
) -> dict[str, Any]:
    """``asPartialObjectMetadataList``: a list's metadata and each item's; a single-object target
    is refused, as upstream does for a list."""
    if conv.kind != PARTIAL_LIST:
        raise errors.not_acceptable_message(
            f"you requested {conv.kind}, but the requested object is a list (*{type_name}List)"
        )
    return {
        "kind": PARTIAL_LIST,
        "apiVersion": conv.api_version,
        "metadata": list_meta,
        "items": [partial(obj, conv) for obj in objs],
    }
