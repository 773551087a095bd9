"""Field rules of upstream's ``pkg/apis/core/validation/validation.go`` a client meets first.

Container names and port names (``validateContainers``, ``validateContainerPorts``), port ranges
and protocols of containers and Services (``validateServicePort``), in every kind that carries a
pod template. Messages, field paths and cause reasons are kube-apiserver's, so a client's error
handling (and a test's expectations) carry over to a real cluster.
"""

from __future__ import annotations

import json
import re
from typing import Any

from mcm_sandbox.apiserver.errors import cause
from mcm_sandbox.apiserver.resources import ResourceType

Causes = list[dict[str, str]]

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
    "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
PORT_RANGE = "must be between 1 and 65535, inclusive"
_PROTOCOLS = ("SCTP", "TCP", "UDP")

# Where each built-in keeps its pod spec (``validatePodTemplateSpec`` callers).
_POD_SPECS: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "pods"): ("spec",),
    ("", "podtemplates"): ("template", "spec"),
    ("", "replicationcontrollers"): ("spec", "template", "spec"),
    ("apps", "deployments"): ("spec", "template", "spec"),
    ("apps", "replicasets"): ("spec", "template", "spec"),
    ("apps", "statefulsets"): ("spec", "template", "spec"),
    ("apps", "daemonsets"): ("spec", "template", "spec"),
    ("batch", "jobs"): ("spec", "template", "spec"),
    ("batch", "cronjobs"): ("spec", "jobTemplate", "spec", "template", "spec"),
}


def _value(value: Any) -> str:
    """``field.Invalid``'s rendering of the bad value: strings quoted, numbers bare."""
    return json.dumps(value) if isinstance(value, str) else str(value)


def _invalid(path: str, value: Any, message: str) -> dict[str, str]:
    return cause(path, f"Invalid value: {_value(value)}: {message}")


def dns_label(path: str, value: str) -> Causes:
    """``IsDNS1123Label``."""
    out = []
    if len(value) > 63:
        out.append(_invalid(path, value, "must be no more than 63 characters"))
    if not _DNS_LABEL.match(value):
        out.append(_invalid(path, value, DNS_LABEL_MESSAGE))
    return out


def port_name(path: str, value: str) -> Causes:
    """``IsValidPortName`` (an IANA service name)."""
    messages = []
    if len(value) > 15:
        messages.append("must be no more than 15 characters")
    if not re.fullmatch(r"[-a-z0-9]+", value):
        messages.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    if not re.search(r"[a-z]", value):
        messages.append("must contain at least one letter (a-z)")
    if "--" in value:
        messages.append("must not contain consecutive hyphens")
    if value and (value[0] == "-" or value[-1] == "-"):
        messages.append("must not begin or end with a hyphen")
    return [_invalid(path, value, m) for m in messages]


def _port_number(path: str, value: Any) -> Causes:
    if isinstance(value, int) and not isinstance(value, bool) and not 1 <= value <= 65535:
        return [_invalid(path, value, PORT_RANGE)]
    return []


def _protocol(path: str, value: Any) -> Causes:
    if value is None or value in _PROTOCOLS:
        return []
    supported = ", ".join(f'"{p}"' for p in _PROTOCOLS)
    return [
        cause(
            path,
            f"Unsupported value: {_value(value)}: supported values: {supported}",
            "FieldValueNotSupported",
        )
    ]


def _dicts(value: Any) -> list[tuple[int, dict[str, Any]]]:
    return [(i, v) for i, v in enumerate(value) if isinstance(v, dict)] if isinstance(value, list) else []


def container_causes(spec: dict[str, Any], at: str) -> Causes:
    out: Causes = []
    port_names: set[str] = set()
    for key in ("initContainers", "containers", "ephemeralContainers"):
        names: set[str] = set()
        for i, container in _dicts(spec.get(key)):
            path = f"{at}.{key}[{i}]"
            name = container.get("name")
            if not name:
                out.append(cause(f"{path}.name", "Required value", "FieldValueRequired"))
            elif isinstance(name, str):
                out.extend(dns_label(f"{path}.name", name))
                if name in names:
                    out.append(
                        cause(f"{path}.name", f"Duplicate value: {_value(name)}", "FieldValueDuplicate")
                    )
                names.add(name)
            for j, port in _dicts(container.get("ports")):
                ppath = f"{path}.ports[{j}]"
                pname = port.get("name")
                if isinstance(pname, str) and pname:
                    out.extend(port_name(f"{ppath}.name", pname))
                    if pname in port_names:
                        out.append(
                            cause(f"{ppath}.name", f"Duplicate value: {_value(pname)}", "FieldValueDuplicate")
                        )
                    port_names.add(pname)
                if not port.get("containerPort"):
                    out.append(cause(f"{ppath}.containerPort", "Required value", "FieldValueRequired"))
                else:
                    out.extend(_port_number(f"{ppath}.containerPort", port["containerPort"]))
                if port.get("hostPort"):
                    out.extend(_port_number(f"{ppath}.hostPort", port["hostPort"]))
                out.extend(_protocol(f"{ppath}.protocol", port.get("protocol")))
    return out


def service_causes(spec: dict[str, Any]) -> Causes:
    out: Causes = []
    ports = _dicts(spec.get("ports"))
    names: set[str] = set()
    for i, port in ports:
        path = f"spec.ports[{i}]"
        name = port.get("name")
        if len(ports) > 1 and not name:
            out.append(cause(f"{path}.name", "Required value", "FieldValueRequired"))
        elif isinstance(name, str) and name:
            out.extend(dns_label(f"{path}.name", name))
            if name in names:
                out.append(cause(f"{path}.name", f"Duplicate value: {_value(name)}", "FieldValueDuplicate"))
            names.add(name)
        out.extend(_port_number(f"{path}.port", port.get("port", 0)))
        out.extend(_protocol(f"{path}.protocol", port.get("protocol")))
        if isinstance(port.get("targetPort"), int):
            out.extend(_port_number(f"{path}.targetPort", port["targetPort"]))
        if port.get("nodePort"):
            out.extend(_port_number(f"{path}.nodePort", port["nodePort"]))
    return out


def causes(rt: ResourceType, obj: dict[str, Any]) -> Causes:
    """The rule violations of a built-in object (empty for every other kind)."""
    if rt.crd:
        return []
    if (rt.group, rt.plural) == ("", "services"):
        spec = obj.get("spec")
        return service_causes(spec) if isinstance(spec, dict) else []
    where = _POD_SPECS.get((rt.group, rt.plural))
    if where is None:
        return []
    node: Any = obj
    for key in where:
        node = node.get(key) if isinstance(node, dict) else None
    return container_causes(node, ".".join(where)) if isinstance(node, dict) else []
