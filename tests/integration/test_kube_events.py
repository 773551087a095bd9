"""Event aggregation against the sandbox API server and a real Redis: repeats bump one Event's
count, from one process or several; through core/v1, and through events.k8s.io/v1 where the API
server serves it (with action, regarding and related, and the count in ``series``)."""

from __future__ import annotations

import multiprocessing as mp
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from mcm_sandbox.procs import ApiServer
from mcm_tasks import kinds
from mcm_tasks.kube import clients, ops
from mcm_tasks.kube.events import EVENTS_V1, SPAM_BURST, WARNING, EventRecorder
from mcm_tasks.kube.ratelimit import limiter_of
from mcm_tasks.settings import configure, load_settings

pytestmark = pytest.mark.integration


def settings_for(apiserver: ApiServer, redis_url: str) -> dict[str, Any]:
    return {
        "control_kubeconfig": str(apiserver.kubeconfig),
        "target_kubeconfig": "none",
        "redis_url": redis_url,
    }


@pytest.fixture()
def control(apiserver: ApiServer, redis_url: str) -> Iterator[clients.Cluster]:
    cluster = clients.new_cluster(
        "control", str(apiserver.kubeconfig), load_settings(settings_for(apiserver, redis_url))
    )
    yield cluster
    cluster.close()


@pytest.fixture()
def recorder(control: clients.Cluster, redis_client: redis.Redis) -> EventRecorder:
    """A core/v1 recorder (these tests read core/v1's ``count``; events.k8s.io/v1 has its own below)."""
    return EventRecorder(control.api, redis_client=redis_client, events_api="v1")


def machine(name: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "Machine",
        "metadata": {
            "name": name or f"m-{uuid.uuid4().hex[:8]}", "namespace": "default", "uid": str(uuid.uuid4()),
            "resourceVersion": "1",
        },
    }  # fmt: skip


def count_of(event: dict[str, Any]) -> int:
    return int(event.get("count") or (event.get("series") or {}).get("count") or 1)


def events_of(control: clients.Cluster, obj: dict[str, Any]) -> list[dict[str, Any]]:
    meta = obj["metadata"]
    found = ops.list_(
        control.api,
        kinds.EVENT.resource,
        meta["namespace"],
        field_selector=f"involvedObject.name={meta['name']}",
    )
    return list(found["items"])


def test_a_repeat_bumps_count_instead_of_creating(control: clients.Cluster, recorder: EventRecorder) -> None:
    obj = machine()
    first = recorder.event(obj, WARNING, "FailedCreate", "quota exceeded")
    assert first is not None and first["count"] == 1
    newer = dict(obj, metadata=dict(obj["metadata"], resourceVersion="2"))  # the object moved on meanwhile
    second = recorder.event(newer, WARNING, "FailedCreate", "quota exceeded")
    assert second is not None and second["metadata"]["name"] == first["metadata"]["name"]

    (only,) = events_of(control, obj)
    assert only["count"] == 2
    assert only["firstTimestamp"] == first["firstTimestamp"]
    assert only["involvedObject"]["uid"] == obj["metadata"]["uid"]
    assert only["source"] == {"component": "machine-controller-manager"}

    recorder.event(obj, WARNING, "FailedCreate", "another message")
    assert sorted(e["count"] for e in events_of(control, obj)) == [1, 2]


def test_event_deleted_on_the_server_is_recreated_with_its_count(
    control: clients.Cluster, recorder: EventRecorder
) -> None:
    obj = machine()
    first = recorder.event(obj, WARNING, "FailedDelete", "x")
    assert first is not None
    ops.delete(control.api, kinds.EVENT.resource, first["metadata"]["name"], "default")
    again = recorder.event(obj, WARNING, "FailedDelete", "x")
    assert again is not None
    (only,) = events_of(control, obj)
    assert (only["metadata"]["name"], only["count"]) == (first["metadata"]["name"], 2)


def test_spam_filter_drops_past_the_burst(control: clients.Cluster, recorder: EventRecorder) -> None:
    obj = machine()
    written = [recorder.event(obj, "Normal", "Tick", f"message {i}") for i in range(SPAM_BURST + 1)]
    assert all(written[:SPAM_BURST])
    assert written[SPAM_BURST] is None
    assert len(events_of(control, obj)) == SPAM_BURST


def _record(settings: dict[str, Any], obj: dict[str, Any], times: int, barrier: Any) -> None:
    configure(settings)
    rec = EventRecorder(clients.get_clusters().control.api)
    barrier.wait(30)
    for _ in range(times):
        assert rec.event(obj, WARNING, "FailedCreate", "quota exceeded") is not None


def test_two_processes_share_one_event(
    apiserver: ApiServer, redis_url: str, control: clients.Cluster
) -> None:
    obj = machine()
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(2)
    procs = [
        ctx.Process(target=_record, args=(settings_for(apiserver, redis_url), obj, 4, barrier))
        for _ in range(2)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    (only,) = events_of(control, obj)
    assert count_of(only) == 8  # the recorders chose events.k8s.io/v1: the count is the series'


def _calls(redis_client: redis.Redis, command: str) -> int:
    stats = redis_client.info("commandstats").get(f"cmdstat_{command}") or {}
    return int(stats.get("calls", 0))


def test_an_event_costs_two_redis_round_trips(recorder: EventRecorder, redis_client: redis.Redis) -> None:
    """Spam filter with the lock and the correlator's state, then the state with the release: each
    one script call (they were five round trips, then three, a noticeable share of every reconcile
    that records an event). The API rate limit's tokens for the event's write come in batches
    (``LeasedTokens``): its draws are counted apart."""
    obj = machine()
    recorder.event(obj, WARNING, "FailedCreate", "first")  # loads the scripts
    limiter = limiter_of(recorder.api)
    assert limiter is not None
    draws = limiter.limiter.draws  # type: ignore[attr-defined]
    before = _calls(redis_client, "evalsha") + _calls(redis_client, "eval")
    plain = {c: _calls(redis_client, c) for c in ("set", "hgetall")}  # counted inside scripts too
    recorder.event(obj, WARNING, "FailedCreate", "first")
    recorder.event(obj, WARNING, "FailedCreate", "second")
    draws = limiter.limiter.draws - draws  # type: ignore[attr-defined]
    assert _calls(redis_client, "evalsha") + _calls(redis_client, "eval") - before == 2 * 2 + draws
    # each command ran once per event, inside the scripts: no separate round trip is hidden there
    assert {c: _calls(redis_client, c) - n for c, n in plain.items()} == {"set": 2, "hgetall": 2}


def test_a_failed_write_releases_the_lock_and_keeps_no_state(
    recorder: EventRecorder, redis_client: redis.Redis
) -> None:
    obj = machine()
    obj["metadata"]["namespace"] = "no-such-namespace"
    assert recorder.event(obj, WARNING, "FailedCreate", "x") is None  # logged, not raised
    assert not redis_client.keys("*events:*:lock")
    obj["metadata"]["namespace"] = "default"
    written = recorder.event(obj, WARNING, "FailedCreate", "x")
    assert written is not None and written["count"] == 1


def test_where_served_events_are_events_k8s_io_v1_with_action_and_related(
    control: clients.Cluster, redis_client: redis.Redis
) -> None:
    recorder = EventRecorder(control.api, redis_client=redis_client)
    assert recorder.api_version() == "events.k8s.io/v1"
    obj = machine()
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a", "uid": "u-1"}}
    first = recorder.event(
        obj, WARNING, "DrainFailed", "pod p blocked by PDB b", action="Drain", related=node
    )
    assert first is not None and first["apiVersion"] == "events.k8s.io/v1"
    assert (first["action"], first["reason"], first["note"]) == (
        "Drain",
        "DrainFailed",
        "pod p blocked by PDB b",
    )
    assert first["regarding"]["name"] == obj["metadata"]["name"] and first["regarding"]["kind"] == "Machine"
    assert first["related"] == {"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": "u-1"}
    assert first["reportingController"] == "machine-controller-manager" and first["eventTime"]
    assert not {"count", "deprecatedCount", "firstTimestamp", "deprecatedFirstTimestamp"} & set(first)
    again = recorder.event(
        obj, WARNING, "DrainFailed", "pod p blocked by PDB b", action="Drain", related=node
    )
    assert again is not None and again["metadata"]["name"] == first["metadata"]["name"]
    assert again["series"]["count"] == 2 and again["series"]["lastObservedTime"]
    listed = ops.list_(control.api, EVENTS_V1, "default")["items"]
    (only,) = [e for e in listed if e["regarding"]["name"] == obj["metadata"]["name"]]
    assert only["series"]["count"] == 2 and only["action"] == "Drain"
    # core/v1 readers (kubectl get events, admin why) see the same Event
    (core,) = events_of(control, obj)
    assert core["message"] == "pod p blocked by PDB b" and count_of(core) == 2


def test_an_expired_v1_event_is_recreated_with_its_series(
    control: clients.Cluster, redis_client: redis.Redis
) -> None:
    recorder = EventRecorder(control.api, redis_client=redis_client, events_api="events.k8s.io/v1")
    obj = machine()
    first = recorder.event(obj, "Normal", "Created", "VM created")
    assert first is not None
    ops.delete(control.api, EVENTS_V1, first["metadata"]["name"], "default")
    again = recorder.event(obj, "Normal", "Created", "VM created")
    assert again is not None and again["metadata"]["name"] == first["metadata"]["name"]
    assert again["series"]["count"] == 2
