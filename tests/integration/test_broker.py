"""The broker transport keeps a worker alive through Redis going away: with a real redis-server and
the app's own kombu connection, a channel whose connection was released (what celery 5.7 leaves
behind when it collects a lost connection; see mcm_tasks.broker) fails as a connection error, which
kombu and Celery already handle, where kombu's own transport raises AttributeError."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator

import pytest
import redis
from kombu import Connection, Exchange, Queue
from kombu.asynchronous import Hub
from kombu.message import Message
from kombu.transport import redis as kombu_redis

from mcm_sandbox.procs import wait_until
from mcm_tasks.broker import EVENT_LOOP_BRPOP_TIMEOUT, Transport
from mcm_tasks.celery_app import app
from mcm_tasks.queue.messages import PRIORITY_SEP, PRIORITY_STEPS

pytestmark = pytest.mark.integration
QUEUE = "broker-test"


def half_released(conn: Connection) -> tuple[Connection, Message]:
    """``conn`` with one message delivered on its default channel and not acknowledged, after its
    transport was released as ``Connection.collect`` releases it."""
    channel = conn.default_channel
    Queue(QUEUE, Exchange(QUEUE), QUEUE, channel=channel).declare()
    with conn.Producer() as producer:
        producer.publish({"n": 1}, exchange=QUEUE, routing_key=QUEUE)
    delivered: list[Message] = []
    channel.basic_consume(QUEUE, False, delivered.append, QUEUE)
    conn.drain_events(timeout=5)
    assert channel.qos._delivered and delivered
    conn._do_close_transport()
    return conn, delivered[0]


@pytest.fixture()
def ours(redis_url: str) -> Iterator[Connection]:
    with app.connection_for_write(redis_url) as conn:
        assert isinstance(conn.transport, Transport), "the app's connections use mcm_tasks.broker"
        yield conn


def test_kombu_alone_raises_attribute_error(redis_url: str) -> None:
    """What the transport guards against, in a worker's order: the lost connection is closed, then
    a reconcile that was running acknowledges its message. When a kombu release fixes this the test
    fails, and mcm_tasks.broker can go."""
    conn, message = half_released(Connection(redis_url, transport=kombu_redis.Transport))
    with pytest.raises(AttributeError):
        conn.close()
    with pytest.raises(AttributeError):
        message.ack()


def test_the_close_is_quiet_and_a_late_ack_is_logged(
    ours: Connection, caplog: pytest.LogCaptureFixture
) -> None:
    errors = ours.connection_errors  # what Celery's Request passes, taken while the connection lived
    conn, message = half_released(ours)
    conn.close()
    message.ack_log_error(logging.getLogger("test"), errors)
    assert "Couldn't ack" in caplog.text


def _first_brpop(redis_url: str, act: Callable[[], object]) -> list[str] | None:
    """The arguments of the first BRPOP Redis receives while ``act`` runs (None: no BRPOP)."""
    with redis.Redis.from_url(redis_url).monitor() as monitor:
        act()
        deadline = time.monotonic() + 5
        for entry in monitor.listen():
            command = str(entry.get("command", ""))
            if command.startswith("BRPOP"):
                return command.split(" ")[1:]
            if time.monotonic() > deadline:
                break
    return None


def _brpop_blocks(redis_url: str, act: Callable[[], None]) -> list[float]:
    """The block (last argument) of the first BRPOP Redis receives while ``act`` runs."""
    args = _first_brpop(redis_url, act)
    return [float(args[-1])] if args else []


def test_a_worker_blocks_in_brpop_for_5s_and_still_takes_a_message_at_once(redis_url: str) -> None:
    """Issue 19: a resting worker sent a BRPOP every second (kombu's block). On an event loop it
    blocks 5 s; BRPOP returns when a message arrives, so pickup is no slower."""
    with app.connection_for_read(redis_url) as conn:
        hub = Hub()
        try:
            channel = conn.default_channel
            Queue(QUEUE, Exchange(QUEUE), QUEUE, channel=channel).declare()
            received: list[Message] = []
            channel.basic_consume(QUEUE, False, received.append, QUEUE)
            conn.transport.register_with_event_loop(conn.connection, hub)
            assert _brpop_blocks(redis_url, hub.run_once) == [EVENT_LOOP_BRPOP_TIMEOUT]
            with app.connection_for_write(redis_url) as producer_conn, producer_conn.Producer() as producer:
                producer.publish({"n": 1}, exchange=QUEUE, routing_key=QUEUE)
            wait_until(lambda: bool(hub.run_once() or received), timeout=EVENT_LOOP_BRPOP_TIMEOUT - 1,
                       interval=0, what="the message, before the block ends")  # fmt: skip
        finally:
            hub.close()


def test_a_drain_events_caller_keeps_kombus_1s_block(redis_url: str) -> None:
    """An ``inspect`` (admin CLI, Flower) drains without an event loop and closes its channel soon
    after, which reads the BRPOP in flight: it keeps the short block."""
    with app.connection_for_read(redis_url) as conn:
        channel = conn.default_channel
        Queue(QUEUE, Exchange(QUEUE), QUEUE, channel=channel).declare()
        channel.basic_consume(QUEUE, False, lambda message: None, QUEUE)

        def drain() -> None:
            with contextlib.suppress(TimeoutError):
                conn.drain_events(timeout=0.2)

        assert _brpop_blocks(redis_url, drain) == [1.0]


def test_closing_a_worker_channel_unblocks_its_brpop_and_pops_nothing(redis_url: str) -> None:
    """A warm shutdown closes the worker's channel while its BRPOP blocks (5 s), and kombu's close
    reads that reply so that a popped message is not lost: it waited out the block. The channel
    first unblocks its BRPOP from another connection (``CLIENT UNBLOCK``, a reply as on a timeout),
    so the close is quick and a message sent afterwards stays queued for the next worker."""
    with app.connection_for_read(redis_url) as conn:
        hub = Hub()
        try:
            channel = conn.default_channel
            Queue(QUEUE, Exchange(QUEUE), QUEUE, channel=channel).declare()
            channel.basic_consume(QUEUE, False, lambda message: None, QUEUE)
            conn.transport.register_with_event_loop(conn.connection, hub)
            assert _brpop_blocks(redis_url, hub.run_once) == [EVENT_LOOP_BRPOP_TIMEOUT]
            assert channel._in_poll, "a BRPOP is in flight"
            started = time.monotonic()
            channel.close()
            closed_in = time.monotonic() - started
        finally:
            hub.close()
    assert closed_in < EVENT_LOOP_BRPOP_TIMEOUT / 2, f"the close waited out the block ({closed_in:.2f}s)"
    with app.connection_for_write(redis_url) as producer_conn, producer_conn.Producer() as producer:
        producer.publish({"n": 1}, exchange=QUEUE, routing_key=QUEUE)
    client = redis.Redis.from_url(redis_url)
    lists = [key for key in client.keys(f"*{QUEUE}") if client.type(key) == b"list"]  # broker key prefix
    assert sum(client.llen(key) for key in lists) == 1, "nothing popped by a BRPOP left behind"


def test_a_queue_consumed_while_a_brpop_blocks_is_taken_before_the_block_ends(redis_url: str) -> None:
    """A BRPOP in flight names the queues of when it was sent: a queue a worker starts consuming
    then (remote control's ``add_consumer``, the benchmarks' resume) waited out the 5 s block. The
    channel unblocks it, and the next BRPOP names the new queue."""
    other = QUEUE + "-added"
    with app.connection_for_read(redis_url) as conn:
        hub = Hub()
        try:
            channel = conn.default_channel
            for name in (QUEUE, other):
                Queue(name, Exchange(name), name, channel=channel).declare()
            received: list[Message] = []
            channel.basic_consume(QUEUE, False, received.append, QUEUE)
            conn.transport.register_with_event_loop(conn.connection, hub)
            assert _brpop_blocks(redis_url, hub.run_once) == [EVENT_LOOP_BRPOP_TIMEOUT]
            channel.basic_consume(other, False, received.append, other)
            with app.connection_for_write(redis_url) as producer_conn, producer_conn.Producer() as producer:
                producer.publish({"n": 1}, exchange=other, routing_key=other)
            wait_until(lambda: bool(hub.run_once() or received), timeout=EVENT_LOOP_BRPOP_TIMEOUT - 2,
                       interval=0, what="the added queue's message, before the block ends")  # fmt: skip
        finally:
            hub.close()


def _brpop_keys(redis_url: str, act: Callable[[], object]) -> list[str]:
    """The keys of the first BRPOP Redis receives while ``act`` runs."""
    return (_first_brpop(redis_url, act) or [""])[:-1]


def test_the_brpop_names_each_queue_at_each_priority_in_round_robin_order(redis_url: str) -> None:
    """The transport packs each queue's BRPOP keys once (a seed-mode worker names hundreds) and
    sends what kombu would: every queue at priority 0 before any at the background priority, with
    the broker's key prefix, in the cycle's order, the queue just served last."""
    names = [f"{QUEUE}-{n}" for n in range(3)]
    with app.connection_for_read(redis_url) as conn:
        hub = Hub()
        try:
            channel = conn.default_channel
            prefix = channel.global_keyprefix
            assert prefix and channel.priority_steps == PRIORITY_STEPS
            received: list[Message] = []
            for name in names:
                Queue(name, Exchange(name), name, channel=channel).declare()
                channel.basic_consume(name, False, received.append, name)
            conn.transport.register_with_event_loop(conn.connection, hub)

            sep = "".join(f"\\x{ord(c):02x}" for c in PRIORITY_SEP)  # as MONITOR prints it

            def keys(order: list[str]) -> list[str]:
                return [prefix + n for n in order] + [f"{prefix}{n}{sep}9" for n in order]

            assert _brpop_keys(redis_url, hub.run_once) == keys(names)
            with app.connection_for_write(redis_url) as producer_conn, producer_conn.Producer() as producer:
                producer.publish({"n": 1}, exchange=names[0], routing_key=names[0])

            def served() -> None:
                wait_until(lambda: bool(hub.run_once() or received), 4, interval=0, what="the message")
                hub.run_once()  # the next BRPOP

            assert _brpop_keys(redis_url, served) == keys([*names[1:], names[0]])
        finally:
            hub.close()
