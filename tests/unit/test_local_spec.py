"""The local provider's pure parts: providerSpec decoding and validation, placement, volume IDs."""

from __future__ import annotations

from typing import Any

import pytest

from mcm_tasks.api import MachineClass
from providers.driver import Secret
from providers.errors import Code, MachineError
from providers.local.spec import (
    DEFAULT_CAPACITY,
    DEFAULT_ZONE,
    class_key,
    decode_provider_spec,
    parse_class,
    placement,
    provider_id_for,
    vm_id_from_provider_id,
    volume_ids,
)

SECRET = Secret(data={"userData": b"#!/bin/sh\necho hi\n"})


def make_class(
    spec: Any = None, provider: str = "local", template: dict[str, Any] | None = None
) -> MachineClass:
    doc: dict[str, Any] = {
        "metadata": {"name": "small", "namespace": "ns"},
        "provider": provider,
        "providerSpec": {} if spec is None else spec,
    }
    if template is not None:
        doc["nodeTemplate"] = template
    return MachineClass.model_validate(doc)


def test_empty_spec_gives_the_defaults() -> None:
    spec = parse_class(make_class(), SECRET)
    assert (spec.boot_delay_seconds, spec.delete_delay_seconds, spec.never_join) == (0, 0, False)
    assert spec.create_delay_seconds == 0
    assert spec.fail_creates is None


def test_fields_are_read_in_camel_case() -> None:
    spec = parse_class(
        make_class(
            {
                "bootDelaySeconds": 2,
                "createDelaySeconds": 0.25,
                "deleteDelaySeconds": 1.5,
                "neverJoin": True,
                "failCreates": {"count": 2, "code": "ResourceExhausted"},
                "labels": {"pool": "a"},
            }
        ),
        SECRET,
    )
    assert spec.boot_delay_seconds == 2.0 and spec.delete_delay_seconds == 1.5 and spec.never_join
    assert spec.create_delay_seconds == 0.25
    assert spec.fail_creates is not None
    assert (spec.fail_creates.count, spec.fail_creates.code) == (2, Code.ResourceExhausted)
    assert spec.labels == {"pool": "a"}


@pytest.mark.parametrize(
    ("code", "expected"), [("Unavailable", Code.Unavailable), (8, Code.ResourceExhausted)]
)
def test_fail_code_by_name_or_number(code: Any, expected: Code) -> None:
    spec = parse_class(make_class({"failCreates": {"count": 1, "code": code}}))
    assert spec.fail_creates is not None and spec.fail_creates.code is expected


def test_every_problem_is_listed_in_one_invalid_argument() -> None:
    bad = {
        "bootDelaySeconds": "soon",
        "createDelaySeconds": 3600,
        "neverJoin": "yes",
        "failCreates": {"count": -1, "code": "Boom"},
        "neverjoin": True,
    }
    with pytest.raises(MachineError) as info:
        parse_class(make_class(bad, provider="AWS"), Secret())
    err = info.value
    assert err.code is Code.InvalidArgument
    for needle in (
        "machineClass.provider",
        "providerSpec.bootDelaySeconds",
        "providerSpec.createDelaySeconds",
        "providerSpec.neverJoin",
        "providerSpec.failCreates.count",
        "unknown machine error code 'Boom'",
        "providerSpec.neverjoin",
        "userData is required",
    ):
        assert needle in err.message, needle


def test_ok_is_not_a_failure_code() -> None:
    with pytest.raises(MachineError, match="OK is not a failure code"):
        parse_class(make_class({"failCreates": {"count": 1, "code": "OK"}}))


def test_missing_user_data_is_invalid_argument() -> None:
    with pytest.raises(MachineError) as info:
        parse_class(make_class(), Secret(data={"userData": b""}))
    assert info.value.code is Code.InvalidArgument


@pytest.mark.parametrize("raw", [b"{not json", "[1, 2]", 42])
def test_undecodable_spec_is_internal(raw: Any) -> None:
    with pytest.raises(MachineError) as info:
        decode_provider_spec(raw)
    assert info.value.code is Code.Internal


def test_json_spec_decodes() -> None:
    assert decode_provider_spec(b'{"neverJoin": true}') == {"neverJoin": True}


def test_placement_prefers_provider_spec_then_node_template_then_defaults() -> None:
    template = {"capacity": {"cpu": 4, "memory": "8Gi"}, "instanceType": "m5", "region": "eu", "zone": "eu-b"}
    cls = make_class({"zone": "eu-c"}, template=template)
    where = placement(cls, parse_class(cls))
    assert (where.zone, where.region, where.instance_type) == ("eu-c", "eu", "m5")
    assert where.capacity == {"cpu": "4", "memory": "8Gi", "pods": "110"}
    bare = make_class()
    default = placement(bare, parse_class(bare))
    assert default.zone == DEFAULT_ZONE and default.capacity == DEFAULT_CAPACITY


def test_provider_ids_round_trip() -> None:
    pid = provider_id_for("local-a", "i-abc")
    assert pid == "local:///local-a/i-abc"
    assert vm_id_from_provider_id(pid) == "i-abc"
    assert vm_id_from_provider_id("aws:///eu/i-1") is None


def test_class_key_names_namespace_and_name() -> None:
    assert class_key(make_class()) == "ns/small"


def test_volume_ids_only_for_the_local_csi_driver() -> None:
    specs = [
        {"csi": {"driver": "local.csi.mcm-tasks.io", "volumeHandle": "vol-1"}},
        {"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-2"}},
        {"hostPath": {"path": "/x"}},
    ]
    assert volume_ids(specs) == ["vol-1"]
