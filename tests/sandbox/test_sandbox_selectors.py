from __future__ import annotations

import pytest

from mcm_sandbox.selectors import (
    SelectorError,
    field_value,
    label_selector_from_api,
    parse_field_selector,
    parse_label_selector,
)

LABELS = {"app": "web", "tier": "front", "version": "7", "empty": ""}


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("", LABELS, True),
        ("", None, True),
        ("app=web", LABELS, True),
        ("app==web", LABELS, True),
        ("app=db", LABELS, False),
        ("app!=db", LABELS, True),
        ("app!=web", LABELS, False),
        ("missing!=x", LABELS, True),
        ("app in (web, db)", LABELS, True),
        ("app in (db)", LABELS, False),
        ("app notin (db,cache)", LABELS, True),
        ("app notin (web)", LABELS, False),
        ("missing notin (web)", LABELS, True),
        ("missing in (web)", LABELS, False),
        ("app", LABELS, True),
        ("missing", LABELS, False),
        ("!missing", LABELS, True),
        ("!app", LABELS, False),
        ("empty=", LABELS, True),
        ("empty", LABELS, True),
        ("app=web,tier=front", LABELS, True),
        ("app=web,tier=back", LABELS, False),
        ("  app = web ,  tier  in ( front )  ", LABELS, True),
        ("version>5", LABELS, True),
        ("version<5", LABELS, False),
        ("app>5", LABELS, False),
        ("example.com/role=worker", {"example.com/role": "worker"}, True),
        ("app=web", None, False),
        ("!app", None, True),
    ],
)
def test_label_selector_matches(selector: str, labels: dict[str, str] | None, expected: bool) -> None:
    assert parse_label_selector(selector).matches(labels) is expected


@pytest.mark.parametrize(
    "selector",
    [
        "app in ()",
        "app in (web",
        "app=web tier",
        "app,",
        ",app",
        "!",
        "app==web=x",
        "app=-bad",
        "-bad=x",
        "bad/prefix/x=y",
        "UPPER.prefix/x=y",
        "app in web",
        "version>five",
        "a" * 64,
    ],
)
def test_label_selector_rejects_what_kube_rejects(selector: str) -> None:
    with pytest.raises(SelectorError):
        parse_label_selector(selector)


def test_empty_selector_is_empty_and_renders() -> None:
    assert parse_label_selector("").empty
    parsed = parse_label_selector("app in (a,b), !x, y=z")
    assert not parsed.empty
    assert str(parsed) == "app in (a,b),!x,y=z"
    assert parse_label_selector(str(parsed)) == parsed


@pytest.mark.parametrize(
    ("api", "labels", "expected"),
    [
        ({}, {"a": "1"}, True),
        ({}, None, True),
        ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]}, {"a": "2"}, True),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": "x"}, False),
        (
            {"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "Exists"}]},
            {"a": "1"},
            False,
        ),
    ],
)
def test_label_selector_from_api(api: dict, labels: dict[str, str] | None, expected: bool) -> None:
    assert label_selector_from_api(api).matches(labels) is expected


def test_nil_api_selector_matches_nothing_unless_asked() -> None:
    nil = label_selector_from_api(None)
    assert not nil.matches({"a": "1"}) and not nil.empty
    assert label_selector_from_api(None, nil_matches_everything=True).matches({"a": "1"})
    assert label_selector_from_api({}).empty


@pytest.mark.parametrize(
    "api",
    [
        {"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["1"]}]},
        {"matchExpressions": [{"key": "a", "operator": "In", "values": []}]},
        {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["1"]}]},
        {"matchLabels": {"a": "not valid"}},
    ],
)
def test_label_selector_from_api_rejects_invalid(api: dict) -> None:
    with pytest.raises(SelectorError):
        label_selector_from_api(api)


POD = {
    "metadata": {"name": "p1", "namespace": "ns"},
    "spec": {"nodeName": "node-1", "unschedulable": True},
    "status": {"phase": "Running"},
}
POD_FIELDS = ["metadata.name", "metadata.namespace", "spec.nodeName", "status.phase", "spec.unschedulable"]


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("", True),
        ("metadata.name=p1", True),
        ("metadata.name==p1", True),
        ("metadata.name!=p1", False),
        ("spec.nodeName=node-1,status.phase=Running", True),
        ("spec.nodeName=node-1,status.phase!=Running", False),
        ("status.phase!=Succeeded,status.phase!=Failed", True),
        ("spec.nodeName=", False),
        ("spec.unschedulable=true", True),
    ],
)
def test_field_selector_matches(selector: str, expected: bool) -> None:
    assert parse_field_selector(selector, POD_FIELDS).matches(POD) is expected


def test_field_selector_missing_field_is_empty_string() -> None:
    unscheduled = {"metadata": {"name": "p"}, "spec": {}}
    assert parse_field_selector("spec.nodeName=", POD_FIELDS).matches(unscheduled)
    assert field_value(unscheduled, "spec.nodeName") == ""
    assert field_value({"count": 3}, "count") == "3"
    assert field_value({"a": "x"}, "a.b") == ""


def test_field_selector_unsupported_field_message_is_kubes() -> None:
    with pytest.raises(SelectorError, match=r"^field label not supported: spec\.hostname$"):
        parse_field_selector("spec.hostname=x", POD_FIELDS)


def test_field_selector_syntax_errors_and_escapes() -> None:
    with pytest.raises(SelectorError, match="can't understand"):
        parse_field_selector("metadata.name", POD_FIELDS)
    with pytest.raises(SelectorError, match="escape"):
        parse_field_selector(r"metadata.name=a\x", POD_FIELDS)
    escaped = parse_field_selector(r"metadata.name=a\,b\=c", POD_FIELDS)
    assert escaped.matches({"metadata": {"name": "a,b=c"}})
    assert escaped.exact("metadata.name") == "a,b=c"
    assert parse_field_selector("metadata.name!=x", POD_FIELDS).exact("metadata.name") is None
    assert parse_field_selector("", POD_FIELDS).empty


def test_event_involved_object_fields() -> None:
    event = {"involvedObject": {"kind": "Machine", "name": "m1", "namespace": "shoot"}}
    allowed = ["involvedObject.kind", "involvedObject.name", "involvedObject.namespace"]
    assert parse_field_selector("involvedObject.kind=Machine,involvedObject.name=m1", allowed).matches(event)
    assert not parse_field_selector("involvedObject.kind=Node", allowed).matches(event)
