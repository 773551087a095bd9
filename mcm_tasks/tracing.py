"""Traces of a machine's life (the optional extra ``[otel]``; off unless configured).

One trace per Machine: the informer's events about it, their enqueue, each reconcile pass, each driver
call (CreateMachine, GetMachineStatus, InitializeMachine, DeleteMachine; with AWS, the EC2 calls
through botocore's instrumentation), the drain and the join. The passes run in different processes
(the informer, any worker pod, any pool process), at any time, and any of them may be killed: the
trace cannot live in one process's memory, nor wait for a propagated context. So its identity is
derived from the Machine's uid, which every process reads with the object: the trace id is the uid's
128 bits, and every span's parent is a root span whose id is derived from the uid too. No process has
to hand a context to the next, a restarted one continues the same trace, and the trace id is written
once on the Machine (annotation ``mcm-tasks.io/trace-id``), so an operator goes from ``kubectl`` to the
trace.

Configuration, OpenTelemetry's own: ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``…_TRACES_ENDPOINT``) exports
over OTLP/HTTP, with the other ``OTEL_*`` variables (headers, service name) as the SDK reads them.
``MCM_TRACES_FILE`` appends every span as one JSON line to a file (tests, and a look without a
collector). Without either, or without the extra installed, nothing is set up and every helper here
costs a global read.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final, TypeVar, cast

log = logging.getLogger(__name__)

TRACE_ANNOTATION: Final = "mcm-tasks.io/trace-id"
FILE_ENV: Final = "MCM_TRACES_FILE"
ENDPOINT_ENVS: Final = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")

#: the process's tracer once ``setup`` configured one; whether setup was tried (lazily, on first use:
#: no process command has to call it, and a forked pool process uses what its parent set up)
_tracer: Any = None
_tried = False
#: a threads-pool worker's first reconciles call ``_ensure`` at once: the others wait for the one
#: setting up (importing the SDK takes a while) instead of finding no tracer and dropping their spans
_setup_lock = threading.Lock()


def _ensure() -> Any:
    if not _tried:
        with _setup_lock:
            if not _tried:
                role = os.path.basename(sys.argv[1]) if len(sys.argv) > 1 else "process"
                setup(os.environ.get("OTEL_SERVICE_NAME") or role)
    return _tracer


def enabled() -> bool:
    return _ensure() is not None


def configured(environ: dict[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return bool(env.get(FILE_ENV) or any(env.get(name) for name in ENDPOINT_ENVS))


def setup(service: str) -> bool:
    """Set up tracing for this process (``service``: informer, worker, beat) when configured and the
    extra is installed; whether it did. A process forked after this (a worker's pool) inherits it."""
    global _tried
    try:
        return _setup(service)
    finally:
        _tried = True  # only now: ``_ensure``'s unlocked check must not pass while the tracer is unset


def _setup(service: str) -> bool:
    global _tracer
    if _tracer is not None or not configured():
        return _tracer is not None
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    except ImportError:
        log.warning("tracing is configured but the [otel] extra is not installed: no traces")
        return False
    name = service if service.startswith("mcm-tasks") else f"mcm-tasks-{service}"
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    if any(os.environ.get(name) for name in ENDPOINT_ENVS):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    path = os.environ.get(FILE_ENV)
    if path:
        provider.add_span_processor(SimpleSpanProcessor(_file_exporter(path)))
    trace.set_tracer_provider(provider)
    try:
        from opentelemetry.instrumentation.botocore import BotocoreInstrumentor

        BotocoreInstrumentor().instrument()  # type: ignore[no-untyped-call]
    except ImportError:
        log.info("opentelemetry-instrumentation-botocore is not installed: no spans for cloud API calls")
    _tracer = trace.get_tracer("mcm-tasks")
    log.info("tracing on (%s)", ", ".join(filter(None, [path and f"file {path}", _endpoint()])))
    return True


def _endpoint() -> str:
    found = next((os.environ[name] for name in ENDPOINT_ENVS if os.environ.get(name)), "")
    return f"OTLP {found}" if found else ""


def _file_exporter(path: str) -> Any:
    """Spans as JSON lines, appended per export (a file opened per write survives a fork)."""
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class FileExporter(SpanExporter):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            lines = "".join(span.to_json(indent=None) + "\n" for span in spans)
            with open(path, "a", encoding="utf-8") as out:
                out.write(lines)
            return SpanExportResult.SUCCESS

        def shutdown(self) -> None:
            return None

    return FileExporter()


# --- identity -------------------------------------------------------------------------------------------


def trace_id_of(uid: str) -> int:
    """The Machine's trace id: its uid's 128 bits (a uid that is not a UUID: hashed)."""
    try:
        return uuid.UUID(uid).int or 1
    except ValueError:
        return int(hashlib.sha256(uid.encode()).hexdigest()[:32], 16) or 1


def trace_id_hex(uid: str) -> str:
    return f"{trace_id_of(uid):032x}"


def root_span_id(uid: str) -> int:
    return int(hashlib.sha256(b"root:" + uid.encode()).hexdigest()[:16], 16) or 1


def _root_context(uid: str) -> Any:
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    root = SpanContext(trace_id_of(uid), root_span_id(uid), is_remote=True,
                       trace_flags=TraceFlags(TraceFlags.SAMPLED))  # fmt: skip
    return trace.set_span_in_context(NonRecordingSpan(root))


# --- spans ----------------------------------------------------------------------------------------------


@contextmanager
def machine_span(name: str, uid: str, **attributes: Any) -> Iterator[Any]:
    """A span in the Machine's trace (under its root), current while the block runs; nothing when
    tracing is off or the machine has no uid yet."""
    if _ensure() is None or not uid:
        yield None
        return
    with _tracer.start_as_current_span(
        name, context=_root_context(uid), attributes=_clean(attributes)
    ) as span:
        yield span


@contextmanager
def child_span(name: str, **attributes: Any) -> Iterator[Any]:
    """A span under the current one (a driver call, the drain); nothing outside a machine's span."""
    if _ensure() is None:
        yield None
        return
    from opentelemetry import trace

    if not trace.get_current_span().get_span_context().is_valid:
        yield None
        return
    with _tracer.start_as_current_span(name, attributes=_clean(attributes)) as span:
        yield span


def record_span(name: str, uid: str, start_ns: int, end_ns: int, **attributes: Any) -> None:
    """A finished span of the Machine's trace with its own times (the join: from creation to Ready)."""
    if _ensure() is None or not uid:
        return
    span = _tracer.start_span(
        name, context=_root_context(uid), start_time=start_ns, attributes=_clean(attributes)
    )
    span.end(end_time=end_ns)


def _clean(attributes: dict[str, Any]) -> dict[str, Any]:
    return {k.replace("_", "."): v for k, v in attributes.items() if v is not None and v != ""}


def informer_batch(events: Sequence[tuple[str, str, str, str]], enqueued: set[tuple[str, str]]) -> None:
    """The informer's spans for one batch: per Machine event (type, uid, key, resourceVersion) an
    ``informer event`` span, with an ``enqueue`` span under it for each of the machine's queues this
    batch enqueued."""
    if _ensure() is None:
        return
    for type_, uid, key, version in events:
        with machine_span("informer event", uid, event_type=type_, machine_key=key, resource_version=version):
            for queue, queued in sorted(enqueued):
                if queued == key and queue.startswith("machine"):
                    with child_span("enqueue", queue=queue, machine_key=key):
                        pass


#: the Driver contract's methods, under upstream's gRPC names (the spans' names)
DRIVER_CALLS: Final = {
    "create_machine": "CreateMachine",
    "initialize_machine": "InitializeMachine",
    "delete_machine": "DeleteMachine",
    "get_machine_status": "GetMachineStatus",
    "list_machines": "ListMachines",
    "get_volume_ids": "GetVolumeIDs",
}

T = TypeVar("T")


def traced_driver(driver: T) -> T:
    """The driver, its calls in spans under the current pass's span when tracing is on (else the
    driver itself: nothing in the way)."""
    if _ensure() is None:
        return driver
    return cast(T, _TracedDriver(driver))


class _TracedDriver:
    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._inner, name)
        span_name = DRIVER_CALLS.get(name)
        if span_name is None or not callable(found):
            return found

        def call(*args: Any, **kwargs: Any) -> Any:
            with child_span(span_name, driver=type(self._inner).__name__):
                return found(*args, **kwargs)

        return call
