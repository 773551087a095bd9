"""Object metadata rules: names, uids, timestamps, generation, and what create/update may change.

Pure functions over plain dicts, so the rules read (and test) independently of HTTP and storage.
"""

from __future__ import annotations

import re
import secrets
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from mcm_sandbox.apiserver.errors import bad_request, cause, invalid
from mcm_sandbox.apiserver.resources import ResourceType

# The alphabet Kubernetes uses for generateName suffixes (no vowels, no look-alike digits).
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# Set by the server, never by a client: copied from the stored object on every update.
SYSTEM_FIELDS = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation")

_last_second = 0
_last_stamp = ""


def now_iso(offset_seconds: float = 0.0) -> str:
    """RFC 3339 at second precision, as metav1.Time serializes (cached: called on every write)."""
    global _last_second, _last_stamp
    now = int(time.time() + offset_seconds)
    if offset_seconds or now != _last_second:
        stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        if offset_seconds:
            return stamp
        _last_second, _last_stamp = now, stamp
    return _last_stamp


def parse_time(stamp: str) -> float:
    return datetime.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp()


def generate_name(prefix: str) -> str:
    return prefix[:58] + "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(5))


def new_uid() -> str:
    return str(uuid.uuid4())


def _path_segment_causes(name: str) -> list[dict[str, str]]:
    """``path.IsValidPathSegmentName``: the rule for RBAC object names (``system:discovery``)."""
    if name in (".", ".."):
        return [cause("metadata.name", f"Invalid value: {name!r}: may not be '{name}'")]
    for bad in ("/", "%"):
        if bad in name:
            return [cause("metadata.name", f"Invalid value: {name!r}: may not contain '{bad}'")]
    return []


def name_causes(rt: ResourceType, name: str) -> list[dict[str, str]]:
    if rt.group == "rbac.authorization.k8s.io":
        return _path_segment_causes(name)
    if rt.storage == "services" and (len(name) > 63 or not _DNS_1035.match(name)):
        return [
            cause(
                "metadata.name",
                f"Invalid value: {name!r}: a DNS-1035 label must consist of lower case alphanumeric "
                "characters or '-', start with an alphabetic character, and end with an alphanumeric "
                "character (e.g. 'my-name',  or 'abc-123', regex used for validation is "
                "'[a-z]([-a-z0-9]*[a-z0-9])?')",
            )
        ]
    pattern, what, limit = (
        (_DNS_LABEL, "RFC 1123 label", 63)
        if rt.plural == "namespaces"
        else (_DNS_SUBDOMAIN, "RFC 1123 subdomain", 253)
    )
    if len(name) > limit:
        return [cause("metadata.name", f"Invalid value: {name!r}: must be no more than {limit} characters")]
    if not pattern.match(name):
        return [
            cause(
                "metadata.name",
                f"Invalid value: {name!r}: a lowercase {what} must consist of lower case "
                "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            )
        ]
    return []


def check_body(rt: ResourceType, body: Any, accept_kinds: tuple[str, ...] = ()) -> dict[str, Any]:
    """The checks every write body gets: an object whose apiVersion and kind fit the endpoint."""
    if not isinstance(body, dict):
        raise bad_request("the body of the request must be a JSON object")
    meta = body.setdefault("metadata", {})
    if not isinstance(meta, dict):
        raise bad_request("metadata must be an object")
    kind = body.get("kind")
    if kind and kind != rt.kind and kind not in accept_kinds:
        raise bad_request(f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})")
    api_version = body.get("apiVersion")
    if api_version and api_version != rt.api_version and not accept_kinds:
        raise bad_request(
            f"the API version in the data ({api_version}) does not match the expected API version "
            f"({rt.api_version})"
        )
    if (
        not accept_kinds
    ):  # TypeMeta leads, as kube's structs serialize (a client may send it last or not at all)
        rest = {k: v for k, v in body.items() if k not in ("kind", "apiVersion")}
        return {"kind": rt.kind, "apiVersion": rt.api_version, **rest}
    return body


def prepare_create(rt: ResourceType, body: dict[str, Any], namespace: str | None) -> dict[str, Any]:
    """Fill in server-owned metadata for a new object; raises 400/422 for what a real server rejects."""
    meta = body["metadata"]
    if rt.namespaced:
        if meta.get("namespace") and meta["namespace"] != namespace:
            raise bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        meta["namespace"] = namespace
    else:
        meta.pop("namespace", None)
    if meta.get("resourceVersion"):
        raise bad_request("resourceVersion should not be set on objects to be created")
    if not meta.get("name"):
        if meta.get("generateName"):
            meta["name"] = generate_name(meta["generateName"])
        else:
            raise invalid(
                rt.kind,
                rt.group,
                "",
                [cause("metadata.name", "name or generateName is required", "FieldValueRequired")],
            )
    causes = name_causes(rt, meta["name"])
    if causes:
        raise invalid(rt.kind, rt.group, meta["name"], causes)
    meta["uid"] = new_uid()
    meta["creationTimestamp"] = now_iso()
    meta.pop("deletionTimestamp", None)
    meta.pop("deletionGracePeriodSeconds", None)
    if rt.has_generation:
        meta["generation"] = 1
    else:
        meta.pop("generation", None)
    return body


def spec_part(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """What a change to bumps ``generation``: all but metadata (and status, with a status subresource)."""
    skip = ("metadata", "status", "kind", "apiVersion") if rt.status else ("metadata", "kind", "apiVersion")
    return {k: v for k, v in obj.items() if k not in skip}


def merge_for_update(
    rt: ResourceType, old: dict[str, Any], new: dict[str, Any], sub: str | None
) -> dict[str, Any]:
    """The object an update writes: /status takes only status, the main endpoint everything but status.

    ``generation`` stays the stored one here; ``bump_generation`` decides it once the body is pruned."""
    if sub == "status":
        merged = _clone_shallow(old)
        if "status" in new:
            merged["status"] = new["status"]
        else:
            merged.pop("status", None)
        return merged
    new_meta = new["metadata"]
    old_meta = old["metadata"]
    for key in (*SYSTEM_FIELDS, "name", "namespace"):
        if key in old_meta:
            new_meta[key] = old_meta[key]
        else:
            new_meta.pop(key, None)
    if rt.status:
        if "status" in old:
            new["status"] = old["status"]
        else:
            new.pop("status", None)
    if old_meta.get("deletionTimestamp"):
        added = set(new_meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
        if added:
            raise invalid(
                rt.kind,
                rt.group,
                old_meta["name"],
                [
                    cause(
                        "metadata.finalizers",
                        "Forbidden: no new finalizers can be added if the object is being deleted, "
                        f"found new finalizers {sorted(added)}",
                        "FieldValueForbidden",
                    )
                ],
            )
    return new


def bump_generation(rt: ResourceType, old: dict[str, Any], new: dict[str, Any]) -> None:
    """Count a spec change in ``generation``. Called on the object as it will be stored (after CRD
    pruning and defaulting), as kube-apiserver decodes, prunes and defaults a body before the
    strategy's PrepareForUpdate compares it: a Go client's ``creationTimestamp: null`` in a nested
    ObjectMeta, or an omitted defaulted field, is then no spec change."""
    if rt.has_generation and spec_part(rt, new) != spec_part(rt, old):
        new["metadata"]["generation"] = int(old["metadata"].get("generation") or 0) + 1


def _clone_shallow(obj: dict[str, Any]) -> dict[str, Any]:
    out = dict(obj)
    out["metadata"] = dict(obj["metadata"])
    return out


def same_content(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """True when an update would change nothing (a real server then skips the write and the event)."""
    ma, mb = a.get("metadata", {}), b.get("metadata", {})
    if {k: v for k, v in ma.items() if k != "resourceVersion"} != {
        k: v for k, v in mb.items() if k != "resourceVersion"
    }:
        return False
    return {k: v for k, v in a.items() if k != "metadata"} == {k: v for k, v in b.items() if k != "metadata"}


def ready_to_remove(rt: ResourceType, obj: dict[str, Any]) -> bool:
    """A deleting object goes once nothing holds it: no finalizers and no grace period left."""
    meta = obj["metadata"]
    if not meta.get("deletionTimestamp") or meta.get("finalizers") or meta.get("deletionGracePeriodSeconds"):
        return False
    return not (rt.plural == "namespaces" and not rt.group and (obj.get("spec") or {}).get("finalizers"))


def check_name_matches(body: dict[str, Any], name: str, namespace: str | None) -> None:
    meta = body["metadata"]
    if meta.get("name") and meta["name"] != name:
        raise bad_request(
            f"the name of the object ({meta['name']}) does not match the name on the URL ({name})"
        )
    if namespace is not None and meta.get("namespace") and meta["namespace"] != namespace:
        raise bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )


def get_path(obj: Any, path: str) -> Any:
    """Follow a dotted path such as ``.spec.replicas`` (the form scale subresource paths take)."""
    for part in path.strip(".").split("."):
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def set_path(obj: dict[str, Any], path: str, value: Any) -> None:
    parts = path.strip(".").split(".")
    for part in parts[:-1]:
        nxt = obj.get(part)
        if not isinstance(nxt, dict):
            nxt = {}
            obj[part] = nxt
        obj = nxt
    obj[parts[-1]] = value
