"""Tracing's identity rules and its off state (``mcm_tasks/tracing.py``): a Machine's trace id is its
uid, so every process finds the same trace without handing a context on; unconfigured, nothing wraps
the driver and no span is made."""

from __future__ import annotations

import uuid

import pytest

from mcm_tasks import tracing


def test_the_trace_id_is_the_machine_uid() -> None:
    uid = str(uuid.uuid4())
    assert tracing.trace_id_hex(uid) == uuid.UUID(uid).hex
    assert tracing.root_span_id(uid) == tracing.root_span_id(uid) != tracing.root_span_id(str(uuid.uuid4()))
    assert len(tracing.trace_id_hex("not-a-uuid")) == 32


def test_configured_by_an_otlp_endpoint_or_a_file() -> None:
    assert not tracing.configured({})
    assert tracing.configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert tracing.configured({"MCM_TRACES_FILE": "/tmp/spans.jsonl"})


def test_off_nothing_is_wrapped_and_no_span_made(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (tracing.FILE_ENV, *tracing.ENDPOINT_ENVS):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(tracing, "_tracer", None)
    monkeypatch.setattr(tracing, "_tried", False)
    driver = object()
    assert tracing.traced_driver(driver) is driver
    with tracing.machine_span("reconcile", str(uuid.uuid4())) as span:
        assert span is None
    assert not tracing.enabled()
