"""The writer of an idle fleet, against a real Redis: Node status heartbeats (a real kubelet's every
5 min) are mirrored with the writer's next commit instead of one commit each, and are not lingered
over."""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import redis

from informers import runner
from informers.processor import Item, Processor, Relisted, WatchEvent
from informers.runner import Informer
from informers.sink import MemorySink
from informers.store import Store
from mcm_sandbox.procs import wait_until
from mcm_sandbox.testing import fixtures as fx
from mcm_tasks import kinds
from mcm_tasks.cache import layout
from mcm_tasks.settings import load_settings

pytestmark = pytest.mark.integration
NS = fx.NS
TIMEOUT = 10.0
READY = [{"type": "Ready", "status": "True"}]


class Writer:
    """The informer's writer loop in a thread, fed through its inbox (no API server)."""

    def __init__(self, redis_url: str, pace: float = 1.0, woken: bool = False) -> None:
        settings = load_settings({"redis_url": redis_url, "namespace": NS, "leader_elect": False})
        self.redis = redis.Redis.from_url(redis_url)
        self.informer = Informer(
            settings, {}, self.redis, MemorySink(), "test", resources=[], pace=pace, woken=woken
        )
        self.inbox: queue.Queue[Item] = queue.Queue()
        self.informer._inbox = self.inbox  # as ``lead`` sets it: ``wake`` puts its marker there
        self.stop = threading.Event()
        self.processor = Processor(Store(NS))
        self.thread = threading.Thread(
            target=self.informer._write_loop, args=(self.stop, self.processor, self.inbox, [], None)
        )

    def start(self, *listed: tuple[str, list[dict[str, Any]]]) -> Writer:
        for kind, objects in listed:
            self.inbox.put(Relisted(kind, objects, "1", initial=True))
        self.thread.start()
        wait_until(lambda: self.redis.exists(layout.sentinel_key()), TIMEOUT, what="the first lists mirrored")
        return self

    def close(self) -> None:
        self.stop.set()
        self.informer.wake()
        self.thread.join(TIMEOUT)
        self.redis.close()

    def events(self) -> int:
        return self.informer.counters["events"]

    def feed(self, kind: str, obj: dict[str, Any]) -> None:
        """One event, and back once the writer has taken it (written or held back)."""
        seen = self.events()
        self.inbox.put(WatchEvent(kind, "MODIFIED", obj))
        wait_until(lambda: self.events() > seen, TIMEOUT, interval=0.01, what="the event taken")

    def mirrored_rv(self, kind: str, key: str) -> str:
        raw = self.redis.hget(layout.objects_key(kind), key)
        return str(orjson.loads(raw)["metadata"]["resourceVersion"]) if raw else ""  # type: ignore[arg-type]

    def commits(self) -> int:
        return int(self.redis.get(layout.sentinel_key() + ":commits") or 0)  # type: ignore[arg-type]


@pytest.fixture()
def writer(redis_url: str) -> Iterator[Writer]:
    running = Writer(redis_url).start(
        (kinds.MACHINE.mirror, [fx.machine("m", node="n", phase="Running", conditions=READY)]),
        (kinds.NODE.mirror, [fx.node("n", rv="10")]),
    )
    yield running
    running.close()


def test_a_heartbeat_waits_for_the_next_commit_and_is_written_with_it(
    writer: Writer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "SENTINEL_EVERY", 3600.0)  # no sentinel check comes in between
    wait_until(lambda: writer.commits() > 0, TIMEOUT, what="the sentinel check after the lists")
    commits = writer.commits()
    writer.feed(kinds.NODE.mirror, fx.node("n", rv="11"))
    assert writer.commits() == commits, "a heartbeat that wakes nothing is not a commit of its own"
    assert writer.mirrored_rv(kinds.NODE.mirror, "n") == "10"

    writer.feed(kinds.MACHINE.mirror, fx.machine("m", rv="2", node="n", phase="Running", conditions=READY))
    assert writer.commits() == commits + 1
    assert writer.mirrored_rv(kinds.MACHINE.mirror, f"{NS}/m") == "2"
    assert writer.mirrored_rv(kinds.NODE.mirror, "n") == "11", "the held-back heartbeat went with it"


def test_a_lone_heartbeat_is_mirrored_by_the_next_sentinel_check(
    writer: Writer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "SENTINEL_EVERY", 0.2)
    writer.feed(kinds.NODE.mirror, fx.node("n", rv="11"))
    wait_until(
        lambda: writer.mirrored_rv(kinds.NODE.mirror, "n") == "11", TIMEOUT, what="the heartbeat mirrored"
    )


def test_a_heartbeat_that_wakes_its_machine_is_written_before_the_machine_is_woken(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "SENTINEL_EVERY", 3600.0)
    lagging = Writer(redis_url).start(
        (kinds.MACHINE.mirror, [fx.machine("m", node="n", phase="Running", conditions=[])]),
        (kinds.NODE.mirror, [fx.node("n", rv="10")]),
    )
    try:
        lagging.feed(kinds.NODE.mirror, fx.node("n", rv="11"))
        assert lagging.mirrored_rv(kinds.NODE.mirror, "n") == "11"
    finally:
        lagging.close()


def test_the_writer_does_not_linger_over_a_heartbeat(writer: Writer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The linger gathers company for a write; a heartbeat alone is not written at once anyway."""
    monkeypatch.setattr(runner, "BATCH_LINGER", 60.0)
    writer.feed(kinds.NODE.mirror, fx.node("n", rv="11"))  # within TIMEOUT, not after 60 s


def hset_calls(client: redis.Redis) -> int:
    return int(client.info("commandstats").get("cmdstat_hset", {}).get("calls", 0))  # type: ignore[union-attr]


def looking_at_the_status_often(writer: Writer, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """The writer looks at its status every 0.02 s and checks no sentinel; its counters, once its
    status says it leads."""
    monkeypatch.setattr(runner, "IDLE_CHECK", 0.02)
    monkeypatch.setattr(runner, "STATUS_EVERY", 0.02)
    monkeypatch.setattr(runner, "SENTINEL_EVERY", 3600.0)
    wait_until(
        lambda: writer.redis.hget(runner.status_key("test"), "leading") == b"1", TIMEOUT, what="status"
    )
    return writer.informer.counters


def test_at_rest_the_status_hash_is_not_rewritten_every_status_period(
    writer: Writer, monkeypatch: pytest.MonkeyPatch
) -> None:
    counters = looking_at_the_status_often(writer, monkeypatch)
    hsets, wakeups = hset_calls(writer.redis), counters["idle_wakeups"]
    wait_until(lambda: counters["idle_wakeups"] >= wakeups + 100, TIMEOUT, what="100 idle wakeups")
    assert hset_calls(writer.redis) - hsets <= 1, "nothing changed but the idle wakeups"

    writer.feed(kinds.MACHINE.mirror, fx.machine("m", rv="2", node="n", phase="Running", conditions=READY))
    wait_until(
        lambda: writer.redis.hget(runner.status_key("test"), "events") == str(writer.events()).encode(),
        TIMEOUT,
        what="a change published",
    )


def test_a_refresh_renews_the_status_hash_and_writes_it_whole_only_when_it_is_gone(
    writer: Writer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every ``STATUS_REFRESH`` the hash's TTL is renewed with what changed (the idle wakeups), not
    rewritten whole: a field nobody changed stays as found. A hash gone (expired, Redis lost it) is
    written whole by the next refresh."""
    counters = looking_at_the_status_often(writer, monkeypatch)
    monkeypatch.setattr(runner, "STATUS_REFRESH", 0.2)
    key = runner.status_key("test")
    writer.redis.hset(key, "leading", "left alone")
    writer.redis.expire(key, 5)
    writer.informer._status_refresh = 0.0  # the refresh the writer had planned was 20 s away
    wakeups = counters["idle_wakeups"]
    wait_until(
        lambda: (
            writer.redis.hget(key, "idle_wakeups") not in (None, str(wakeups).encode())
            and writer.redis.ttl(key) > 5
        ),
        TIMEOUT,
        what="a refresh: the TTL renewed, the wakeups written",
    )
    assert writer.redis.hget(key, "leading") == b"left alone", "refreshed, not rewritten whole"
    writer.redis.delete(key)
    wait_until(lambda: writer.redis.hget(key, "leading") == b"1", TIMEOUT, what="the hash written whole")
    assert writer.redis.hget(key, "events") == str(writer.events()).encode()
    assert writer.redis.ttl(key) > 5
    monkeypatch.setattr(runner, "STATUS_REFRESH", 3600.0)
    writer.informer._status_refresh = time.monotonic() + 3600.0
    writer.redis.delete(key)
    writer.feed(kinds.MACHINE.mirror, fx.machine("m", rv="3", node="n", phase="Running", conditions=READY))
    wait_until(lambda: writer.redis.hget(key, "leading") == b"1", TIMEOUT, what="gone: written whole")
    assert writer.redis.ttl(key) > 5
    writer.redis.delete(key)
    writer.informer._publish_status([], leading=False, whole=True)  # a whole write (standing by)
    assert writer.redis.hget(key, "leading") == b"0" and writer.redis.ttl(key) > 5, "whole, with its TTL"


def test_a_heartbeat_alone_is_no_news_for_the_status_hash(
    writer: Writer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Node heartbeats (lazy changes) change the counters but are not news: they wait for the next
    refresh (``STATUS_REFRESH``) instead of a status write each; a Machine's change is news."""
    counters = looking_at_the_status_often(writer, monkeypatch)
    wakeups = counters["idle_wakeups"]
    wait_until(lambda: counters["idle_wakeups"] >= wakeups + 5, TIMEOUT, what="the first refresh behind")
    hsets = hset_calls(writer.redis)
    for rv in range(11, 21):
        writer.feed(kinds.NODE.mirror, fx.node("n", rv=str(rv)))
    wakeups = counters["idle_wakeups"]
    wait_until(lambda: counters["idle_wakeups"] >= wakeups + 20, TIMEOUT, what="20 looks at the status")
    assert hset_calls(writer.redis) - hsets == 0, "ten heartbeats, no write"
    writer.feed(kinds.MACHINE.mirror, fx.machine("m", rv="2", node="n", phase="Running", conditions=READY))
    wait_until(
        lambda: writer.redis.hget(runner.status_key("test"), "events") == str(writer.events()).encode(),
        TIMEOUT,
        what="the machine's change published, the heartbeats' count with it",
    )


def test_only_a_lag_a_reader_would_see_differently_is_written() -> None:
    """``lag_update``: a kind's first lag, a move by the resolution, a crossing of the threshold, and
    a lag over it that is getting old for the readers; not the sub-second jitter of a mirror that
    keeps up."""
    threshold = 2.0
    assert runner.lag_update({}, {"nodes": 0.4}, 100.0, threshold) == {"nodes": 0.4}
    published = {"nodes": (0.4, 100.0), "machines": (3.0, 100.0)}
    assert runner.lag_update(published, {"nodes": 0.9}, 200.0, threshold) == {}
    assert runner.lag_update(published, {"nodes": 1.5}, 101.0, threshold) == {"nodes": 1.5}
    assert runner.lag_update({"nodes": (1.5, 100.0)}, {"nodes": 2.1}, 101.0, threshold) == {"nodes": 2.1}
    assert runner.lag_update(published, {"machines": 2.5}, 101.0, threshold) == {}
    assert runner.lag_update(published, {"machines": 2.5}, 100.0 + runner.LAG_REFRESH, threshold) == {
        "machines": 2.5
    }
    assert runner.lag_update({"machines": (2.1, 100.0)}, {"machines": 1.6}, 101.0, threshold) == {
        "machines": 1.6
    }, "back under the threshold: said at once"
    assert runner.lag_update(published, {"machines": 3.5}, 101.0, 0.0) == {}, "lag mode off: jitter only"


def test_an_idle_sentinel_check_is_no_transaction(writer: Writer, monkeypatch: pytest.MonkeyPatch) -> None:
    """GET and INCR in one round trip: MULTI/EXEC around them made four commands of two."""
    monkeypatch.setattr(runner, "IDLE_CHECK", 0.02)
    monkeypatch.setattr(runner, "SENTINEL_EVERY", 0.02)
    stats = writer.redis.info("commandstats")
    multi = int(stats.get("cmdstat_multi", {}).get("calls", 0))  # type: ignore[union-attr]
    commits = writer.commits()
    wait_until(lambda: writer.commits() >= commits + 10, TIMEOUT, what="10 sentinel checks")
    stats = writer.redis.info("commandstats")
    assert int(stats.get("cmdstat_multi", {}).get("calls", 0)) - multi <= 1  # type: ignore[union-attr]


def idle_wakeups_over_four_checks(redis_url: str, woken: bool) -> int:
    """A writer at rest: its idle wake-ups while it makes four sentinel checks; then a lone heartbeat
    is written by the next check, and closing it (a wake) ends it at once."""
    writer = Writer(redis_url, woken=woken).start((kinds.NODE.mirror, [fx.node("n", rv="10")]))
    try:
        wait_until(lambda: writer.commits() >= 2, TIMEOUT, what="two sentinel checks")
        wakeups, commits = writer.informer.counters["idle_wakeups"], writer.commits()
        wait_until(lambda: writer.commits() >= commits + 4, TIMEOUT, what="four more checks")
        counted = writer.informer.counters["idle_wakeups"] - wakeups
        writer.feed(kinds.NODE.mirror, fx.node("n", rv="11"))
        wait_until(lambda: writer.mirrored_rv(kinds.NODE.mirror, "n") == "11", TIMEOUT,
                   what="the heartbeat written by the next check")  # fmt: skip
    finally:
        started = time.monotonic()
        writer.close()
    took = time.monotonic() - started
    assert not writer.thread.is_alive() and took < 0.4, f"woken to stop, took {took:.2f} s"
    return counted


def test_a_woken_writer_at_rest_wakes_only_for_its_timers(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seed mode's writers (``woken``: their owner wakes them to stop) sleep until their next timer
    (here the sentinel check, every 0.5 s) instead of every ``IDLE_CHECK * pace`` (0.05 s)."""
    monkeypatch.setattr(runner, "IDLE_CHECK", 0.05)
    monkeypatch.setattr(runner, "SENTINEL_EVERY", 0.5)
    # the whole status is due between two looks at the status: a writer that slept until it would
    # find nothing to do there and spin until the next look
    monkeypatch.setattr(runner, "STATUS_EVERY", 0.25)
    monkeypatch.setattr(runner, "STATUS_REFRESH", 0.3)
    polling, woken = (
        idle_wakeups_over_four_checks(redis_url, False),
        idle_wakeups_over_four_checks(redis_url, True),
    )
    assert polling >= 20, polling  # every 0.05 s for 2 s
    assert woken <= 16, woken  # for the four checks and the statuses


def test_the_idle_wait_is_the_first_timer_within_the_ceiling() -> None:
    assert runner.idle_wait(10.0, 20.0, [13.0, 30.0, math.inf]) == 3.0
    assert runner.idle_wait(10.0, 2.0, [13.0]) == 2.0
    assert runner.idle_wait(10.0, 2.0, [9.0]) == 0.0
    assert runner.idle_wait(10.0, 2.0, []) == 2.0


def test_the_writers_timers_never_ask_it_to_wake_before_it_looks_at_the_status() -> None:
    dues = runner.writer_dues(next_sentinel=30.0, next_status=15.0, status_refresh=12.0, status_due=False,
                              next_resync=math.inf, lag_due=math.inf)  # fmt: skip
    assert min(dues) == 15.0
    dues = runner.writer_dues(next_sentinel=30.0, next_status=15.0, status_refresh=40.0, status_due=False,
                              next_resync=math.inf, lag_due=math.inf)  # fmt: skip
    assert min(dues) == 30.0, "no news: the status waits for its refresh"
    dues = runner.writer_dues(next_sentinel=30.0, next_status=15.0, status_refresh=40.0, status_due=True,
                              next_resync=math.inf, lag_due=20.0)  # fmt: skip
    assert sorted(dues)[:2] == [15.0, 20.0]
