"""Kubernetes Events on the objects the controller acts on, with repeats folded into one Event.

client-go's EventCorrelator keeps, per process, a cache from "the same event" (source,
involvedObject, type, reason, message) to the Event it last wrote, and bumps that Event's ``count``
and ``lastTimestamp`` with a PATCH instead of creating another. Here any of N worker processes may
record the next repeat, so that cache is a Redis hash per event key (name, count, firstTimestamp)
that expires ``window`` seconds after the last repeat, and writes of one key are serialised by a
short Redis lock so counts only go up. The per-object spam filter (burst 25, then one per 5 min)
is client-go's, on a shared token bucket.

Events are best effort, as in client-go: a failure to write one is logged, never raised.

**events.k8s.io/v1 where served.** A recorder asks the API server once whether it serves
``events.k8s.io/v1`` and then records there (client-go's newer ``events`` broadcaster): ``action``
(what the controller did), ``reason``, ``note``, ``regarding`` and ``related`` (the other object the
event concerns: a Machine's Node, a MachineSet's Machine), ``reportingController`` and
``reportingInstance``, ``eventTime``; a repeat raises ``series.count`` and ``series.lastObservedTime``.
The deprecated core fields stay unset, as the API server's validation requires. Where the group is
not served, Events are core/v1 as before (``involvedObject``, ``count``, ``lastTimestamp``). Both
are one resource on the server: ``kubectl get events`` and core/v1 readers see either.

Secrets: an Event copies only the involved object's identity (kind, name, namespace, uid, …) and
the caller's reason and message. Callers must not put secret material (userData, credentials) in
messages; the recorder refuses Secret objects outright so none ever travels through it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets as token_source
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal, cast

import redis
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from mcm_tasks import kinds
from mcm_tasks.kube import ops, rest
from mcm_tasks.kube.errors import describe, is_already_exists, is_not_found
from mcm_tasks.kube.resources import Resource
from mcm_tasks.ratelimit import BUCKET
from mcm_tasks.redisdb import get_redis, rkey

log = logging.getLogger(__name__)

NORMAL: Final = "Normal"
WARNING: Final = "Warning"
EventType = Literal["Normal", "Warning"]
DEFAULT_COMPONENT = "machine-controller-manager"

#: the newer Events API and the recorder's choices of API
EVENTS_V1: Final = Resource("events.k8s.io", "v1", "events", "Event")
EVENTS_API_V1: Final = EVENTS_V1.api_version
CORE_API: Final = "v1"
AUTO: Final = "auto"
#: events.k8s.io/v1's field limits (the API server refuses longer)
NOTE_LIMIT: Final = 1024
ACTION_LIMIT: Final = 128

#: client-go's spam filter: 25 events per object at once, then one every 5 minutes
SPAM_BURST = 25
SPAM_QPS = 1.0 / 300.0

# The correlator's two round trips per event, the spam filter's token included. KEYS: the event key's
# lock, its state hash. BEGIN (ARGV token, lock ttl ms): take the lock and read the state → {1,
# field, value…}, or {0} while another recorder holds it. SPAM_BEGIN (KEYS[3] the object's spam
# bucket; ARGV[3…5] now, rate, burst): the first try, which first takes a token of the spam filter
# (client-go's, a bucket as ratelimit.py keeps them) → {2} when there is none (the event is dropped),
# else BEGIN (a retry while the lock is held takes no second token). END (ARGV token or "", state
# ttl s, field, value…): write the state, then release the lock if it is still ours. RELEASE: only
# the release, after a failure.
_LOCK_AND_READ = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local out = redis.call('HGETALL', KEYS[2])
  table.insert(out, 1, 1)
  return out
end
return {0}
"""
_BEGIN = _LOCK_AND_READ
_SPAM_BEGIN = (
    BUCKET
    + """
local now, rate, burst = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local tokens, ts = bucket_refill(KEYS[3], rate, burst, now)
if tokens < 1 then return {2} end
bucket_store(KEYS[3], tokens - 1, ts, rate, burst)
"""
    + _LOCK_AND_READ
)
_END = """
redis.call('HSET', KEYS[2], unpack(ARGV, 3))
redis.call('EXPIRE', KEYS[2], ARGV[2])
if ARGV[1] ~= '' and redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
"""
_RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"


@dataclass(frozen=True)
class ObjectRef:
    """The involved object: identity only, never content."""

    api_version: str
    kind: str
    name: str
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""

    @classmethod
    def of(cls, obj: ops.Body) -> ObjectRef:
        body = ops.to_dict(obj)
        kind = str(body.get("kind") or "")
        if not kind or not body.get("apiVersion"):
            raise ValueError("an involved object needs apiVersion and kind")
        if kind == "Secret":
            raise TypeError("events are not recorded on Secrets (their objects must not reach the recorder)")
        meta = body.get("metadata") or {}
        if not meta.get("name"):
            raise ValueError("an involved object needs metadata.name")
        return cls(
            api_version=str(body["apiVersion"]),
            kind=kind,
            name=str(meta["name"]),
            namespace=str(meta.get("namespace") or ""),
            uid=str(meta.get("uid") or ""),
            resource_version=str(meta.get("resourceVersion") or ""),
        )

    def as_involved_object(self) -> dict[str, str]:
        ref = {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "namespace": self.namespace,
            "uid": self.uid,
            "resourceVersion": self.resource_version,
        }
        return {k: v for k, v in ref.items() if v}

    @property
    def event_namespace(self) -> str:
        """Events of cluster-scoped objects (Nodes) go to ``default``, as client-go puts them."""
        return self.namespace or "default"


def _identity(ref: ObjectRef, component: str, host: str) -> list[str]:
    # resourceVersion is left out on purpose: every write changes it, and a repeat is a repeat
    return [component, host, ref.kind, ref.namespace, ref.name, ref.uid, ref.api_version]


def event_key(ref: ObjectRef, type_: str, reason: str, message: str, component: str, host: str = "") -> str:
    """What makes two events "the same" (client-go's getEventKey), as one string."""
    return "\x1f".join([*_identity(ref, component, host), type_, reason, message])


def spam_key(ref: ObjectRef, component: str, host: str = "") -> str:
    """The spam filter's unit: one source and one object, whatever the reason."""
    return "\x1f".join(_identity(ref, component, host))


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(int(ts), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def event_name(ref: ObjectRef, now_ns: int) -> str:
    """``<object>.<hex nanoseconds>``, client-go's naming."""
    return f"{ref.name}.{now_ns:x}"


def new_event(
    ref: ObjectRef,
    type_: str,
    reason: str,
    message: str,
    *,
    name: str,
    count: int,
    first: str,
    last: str,
    component: str,
    host: str = "",
) -> dict[str, Any]:
    source = {"component": component, **({"host": host} if host else {})}
    event: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": ref.event_namespace},
        "involvedObject": ref.as_involved_object(),
        "type": type_,
        "reason": reason,
        "message": message,
        "source": source,
        "count": count,
        "firstTimestamp": first,
        "lastTimestamp": last,
        "reportingComponent": component,
    }
    if host:
        event["reportingInstance"] = host
    return event


def micro_time(ts: float) -> str:
    """A MicroTime, as events.k8s.io/v1's ``eventTime`` and ``series.lastObservedTime`` carry it."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def new_event_v1(
    ref: ObjectRef,
    type_: str,
    reason: str,
    message: str,
    *,
    name: str,
    action: str,
    related: ObjectRef | None,
    now: float,
    component: str,
    host: str = "",
) -> dict[str, Any]:
    """An events.k8s.io/v1 Event (its first occurrence: no ``series``)."""
    event: dict[str, Any] = {
        "apiVersion": EVENTS_API_V1,
        "kind": "Event",
        "metadata": {"name": name, "namespace": ref.event_namespace},
        "eventTime": micro_time(now),
        "reportingController": component,
        "reportingInstance": (host or component)[:128],
        "action": (action or reason)[:ACTION_LIMIT],
        "reason": reason[:ACTION_LIMIT],
        "regarding": ref.as_involved_object(),
        "note": message[:NOTE_LIMIT],
        "type": type_,
    }
    if related is not None:
        event["related"] = related.as_involved_object()
    return event


def _count_of(event: Mapping[str, Any]) -> int:
    """How often the event happened, in either API's shape."""
    series = event.get("series") or {}
    return int(event.get("count") or series.get("count") or event.get("deprecatedCount") or 1)


def _as_text(raw: Mapping[Any, Any]) -> dict[str, str]:
    """Redis answers in bytes unless the client decodes; the recorder accepts either client."""
    return {
        (k.decode() if isinstance(k, bytes) else str(k)): (v.decode() if isinstance(v, bytes) else str(v))
        for k, v in raw.items()
    }


class EventRecorder:
    """Writes Events through ``api`` (the control cluster's client, rate limited like the rest).

    ``redis_client=None`` uses the process's shared Redis; ``aggregate=False`` writes every event
    as a new object (used where there is no Redis at all). ``events_api``: ``auto`` (events.k8s.io/v1
    where the API server serves it, else core/v1), or ``v1`` / ``events.k8s.io/v1`` to choose.
    """

    def __init__(
        self,
        api: ApiClient,
        component: str = DEFAULT_COMPONENT,
        *,
        host: str = "",
        redis_client: redis.Redis | None = None,
        aggregate: bool = True,
        window: float = 600.0,
        spam_filter: bool = True,
        lock_wait: float = 2.0,
        clock: Callable[[], float] = time.time,
        events_api: str = AUTO,
    ) -> None:
        if events_api not in (AUTO, CORE_API, EVENTS_API_V1):
            raise ValueError(f"events_api must be {AUTO}, {CORE_API} or {EVENTS_API_V1}, not {events_api!r}")
        self.events_api: str | None = None if events_api == AUTO else events_api
        self.api = api
        self.component = component
        self.host = host
        self.aggregate = aggregate
        self.window = window
        self.spam_filter = spam_filter
        self.lock_wait = lock_wait
        self.clock = clock
        self._redis = redis_client if redis_client is not None else (get_redis() if aggregate else None)
        if self._redis is not None:
            self._begin_script = self._redis.register_script(_BEGIN)
            self._spam_begin = self._redis.register_script(_SPAM_BEGIN)
            self._end = self._redis.register_script(_END)

    # --- public ----------------------------------------------------------------------------------

    def event(
        self,
        obj: ops.Body | ObjectRef,
        type_: EventType,
        reason: str,
        message: str,
        *,
        action: str = "",
        related: ops.Body | ObjectRef | None = None,
    ) -> dict[str, Any] | None:
        """Record an event on ``obj``; the Event as written, or None when dropped or failed.
        ``action`` (what was done; the reason when empty) and ``related`` (another object the event
        concerns) reach events.k8s.io/v1 Events; core/v1 has no place for them."""
        if type_ not in (NORMAL, WARNING):
            raise ValueError(f"event type must be Normal or Warning, got {type_!r}")
        ref = obj if isinstance(obj, ObjectRef) else ObjectRef.of(obj)
        other = related if related is None or isinstance(related, ObjectRef) else ObjectRef.of(related)
        try:
            return self._record(ref, type_, reason, message, action, other)
        except (ApiException, redis.RedisError, OSError) as err:
            log.warning("could not record event %s on %s %s/%s: %s",
                        reason, ref.kind, ref.namespace, ref.name, describe(err))  # fmt: skip
            return None

    def api_version(self) -> str:
        """The Events API this recorder writes: asked of the API server once (a failure to ask is
        not remembered: core/v1 for this event, the question again for the next)."""
        if self.events_api is None:
            try:
                found = rest.request(self.api, "GET", EVENTS_V1.group_version_path)
            except ApiException as err:
                if err.status != 404:
                    raise
                found = {}
            served = any(r.get("name") == EVENTS_V1.plural for r in (found or {}).get("resources") or [])
            self.events_api = EVENTS_API_V1 if served else CORE_API
        return self.events_api

    # --- internals -------------------------------------------------------------------------------

    def _spam_key(self, ref: ObjectRef) -> str | None:
        if not self.spam_filter:
            return None
        return rkey("events", "spam", digest(spam_key(ref, self.component, self.host)))

    def _record(
        self, ref: ObjectRef, type_: str, reason: str, message: str, action: str, related: ObjectRef | None
    ) -> dict[str, Any] | None:
        now = self.clock()
        what = _What(ref, type_, reason, message, action, related, self.api_version())
        if self._redis is None:  # no Redis: neither spam filter nor correlation
            return self._create(what, event_name(ref, time.time_ns()), 1, rfc3339(now), now)
        state_key = rkey("events", digest(event_key(ref, type_, reason, message, self.component, self.host)))
        lock_key = state_key + ":lock"
        began = self._begin(lock_key, state_key, self._spam_key(ref))
        if began is None:
            log.debug("event %s on %s/%s dropped by the spam filter", reason, ref.kind, ref.name)
            return None
        token, state = began
        try:
            if state.get("name") and state.get("api", CORE_API) == what.api:
                written = self._bump(what, state, now)
            else:  # new, or recorded through the other API (an upgrade of the API server)
                name = event_name(ref, time.time_ns())
                written = self._create(what, name, 1, rfc3339(now), now)
        except BaseException:
            if token:
                self._redis.eval(_RELEASE, 1, lock_key, token)
            raise
        meta = written.get("metadata") or {}
        fields = {
            "name": str(meta.get("name")),
            "namespace": str(meta.get("namespace") or ref.event_namespace),
            "count": str(_count_of(written)),
            "first": str(written.get("firstTimestamp") or written.get("eventTime") or rfc3339(now)),
            "api": what.api,
        }
        args: list[str | int] = [token or "", max(1, int(self.window))]
        args += [x for pair in fields.items() for x in pair]
        self._end(keys=[lock_key, state_key], args=args)
        return written

    def _bump(self, what: _What, state: Mapping[str, str], now: float) -> dict[str, Any]:
        """PATCH the count (core/v1: ``count``, ``lastTimestamp``; events.k8s.io/v1: ``series``); if
        the Event is gone (expired on the server), create it again under the same name and count, as
        client-go does."""
        count = int(state.get("count") or 1) + 1
        name, namespace = state["name"], state.get("namespace") or what.ref.event_namespace
        try:
            return ops.patch(self.api, what.resource, name, what.repeat(count, now), namespace)
        except ApiException as err:
            if not is_not_found(err):
                raise
        first = state.get("first") or rfc3339(now)
        return self._create(what, name, count, first, now)

    def _create(self, what: _What, name: str, count: int, first: str, now: float) -> dict[str, Any]:
        if what.api == EVENTS_API_V1:
            event = new_event_v1(
                what.ref, what.type_, what.reason, what.message, name=name, action=what.action,
                related=what.related, now=now, component=self.component, host=self.host,
            )  # fmt: skip
            if count > 1:  # re-created after it expired: the series goes on
                event["series"] = {"count": count, "lastObservedTime": micro_time(now)}
        else:
            event = new_event(
                what.ref, what.type_, what.reason, what.message, name=name, count=count, first=first,
                last=rfc3339(now), component=self.component, host=self.host,
            )  # fmt: skip
        namespace = what.ref.event_namespace
        try:
            return ops.create(self.api, what.resource, event, namespace)
        except ApiException as err:
            if not is_already_exists(err):
                raise
            # written meanwhile by a recorder that did not hold the lock: count on top of it
            current = ops.get(self.api, what.resource, name, namespace) or event
            return ops.patch(
                self.api, what.resource, name, what.repeat(_count_of(current) + 1, now), namespace
            )

    def _begin(
        self, lock_key: str, state_key: str, spam: str | None
    ) -> tuple[str | None, dict[str, str]] | None:
        """The object's spam-filter token (``spam``: its bucket), then the per-key write lock (bounded
        wait) and the state read under it, the first try in one round trip; no token (write anyway,
        state read without the lock) when it stays taken; None when the spam filter drops the event."""
        assert self._redis is not None
        token = token_source.token_hex(8)
        ttl_ms = max(1000, int(self.lock_wait * 2000))
        deadline = time.monotonic() + self.lock_wait
        while True:
            if spam is not None:
                args: list[str | int | float] = [token, ttl_ms, time.time(), SPAM_QPS, SPAM_BURST]
                answer = cast(list[Any], self._spam_begin(keys=[lock_key, state_key, spam], args=args))
                spam = None
            else:
                answer = cast(list[Any], self._begin_script(keys=[lock_key, state_key], args=[token, ttl_ms]))
            if int(answer[0]) == 2:
                return None
            if int(answer[0]) == 1:
                return token, _as_text(dict(zip(answer[1::2], answer[2::2], strict=True)))
            if time.monotonic() >= deadline:
                log.debug("event lock %s still held after %ss; writing without it", lock_key, self.lock_wait)
                return None, _as_text(self._redis.hgetall(state_key))  # type: ignore[arg-type]
            time.sleep(0.005)


@dataclass(frozen=True)
class _What:
    """One event to record, and the API it goes to."""

    ref: ObjectRef
    type_: str
    reason: str
    message: str
    action: str
    related: ObjectRef | None
    api: str

    @property
    def resource(self) -> Resource:
        return EVENTS_V1 if self.api == EVENTS_API_V1 else kinds.EVENT.resource

    def repeat(self, count: int, now: float) -> dict[str, Any]:
        """The merge patch of a repeat."""
        if self.api == EVENTS_API_V1:
            return {"series": {"count": count, "lastObservedTime": micro_time(now)}}
        return {"count": count, "lastTimestamp": rfc3339(now), "message": self.message}


_recorders: dict[tuple[int, int, str], EventRecorder] = {}


def recorder_for(api: ApiClient, component: str) -> EventRecorder:
    """One recorder per process, client and component: the recorder keeps per-client state, and a
    forked child or rebuilt client must not reuse its parent's."""
    pid = os.getpid()
    ident = (pid, id(api), component)
    found = _recorders.get(ident)
    if found is None:
        for stale in [key for key in _recorders if key[0] != pid]:  # a forked parent's
            del _recorders[stale]
        found = _recorders[ident] = EventRecorder(api, component)
    return found
