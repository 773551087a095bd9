"""The sandbox's validation.go field rules, kind by kind (issue 15)."""

from __future__ import annotations

from typing import Any

import pytest

from mcm_sandbox.apiserver import spec_rules
from mcm_sandbox.apiserver.resources import Registry

REGISTRY = Registry()


def _fields(group: str, plural: str, obj: dict[str, Any]) -> list[str]:
    rt = REGISTRY.get(group, "v1", plural)
    assert rt is not None
    return [c["field"] for c in spec_rules.causes(rt, obj)]


BAD_PORT = {"name": "c", "image": "x", "ports": [{"containerPort": 80, "hostPort": 70000}]}
JOB_TEMPLATE = {"spec": {"template": {"spec": {"containers": [BAD_PORT]}}}}


@pytest.mark.parametrize(
    ("group", "plural", "obj", "field"),
    [
        ("", "pods", {"spec": {"containers": [BAD_PORT]}}, "spec.containers[0].ports[0].hostPort"),
        ("", "pods", {"spec": {"initContainers": [BAD_PORT]}}, "spec.initContainers[0].ports[0].hostPort"),
        ("batch", "cronjobs", {"spec": {"jobTemplate": JOB_TEMPLATE}},
         "spec.jobTemplate.spec.template.spec.containers[0].ports[0].hostPort"),
        ("apps", "statefulsets", {"spec": {"template": {"spec": {"containers": [BAD_PORT]}}}},
         "spec.template.spec.containers[0].ports[0].hostPort"),
        ("", "services", {"spec": {"ports": [{"port": 80, "nodePort": 0}, ]}}, None),
        ("", "services", {"spec": {"ports": [{"port": 80, "nodePort": 99999}]}}, "spec.ports[0].nodePort"),
    ],
)  # fmt: skip
def test_rules_apply_where_each_kind_keeps_its_spec(
    group: str, plural: str, obj: dict[str, Any], field: str | None
) -> None:
    assert _fields(group, plural, obj) == ([field] if field else [])


@pytest.mark.parametrize(
    ("name", "messages"),
    [
        ("http", []),
        ("a-very-long-port-name", ["must be no more than 15 characters"]),
        ("8080", ["must contain at least one letter (a-z)"]),
        ("-web", ["must not begin or end with a hyphen"]),
        ("Web", ["must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"]),
    ],
)
def test_port_names_are_iana_service_names(name: str, messages: list[str]) -> None:
    got = [c["message"].split(": ", 2)[2] for c in spec_rules.port_name("p", name)]
    assert got == messages


def test_custom_resources_and_other_kinds_have_no_rules() -> None:
    assert _fields("", "configmaps", {"data": {"containers": "x"}}) == []
