"""The broker transport keeps a worker alive through Redis going away: with a real redis-server and
the app's own kombu connection, a channel whose connection was released (what celery 5.7 leaves
behind when it collects a lost connection; see mcm_tasks.broker) fails as a connection error, which
kombu and Celery already handle, where kombu's own transport raises AttributeError."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from kombu import Connection, Exchange, Queue
from kombu.message import Message
from kombu.transport import redis as kombu_redis

from mcm_tasks.broker import Transport
from mcm_tasks.celery_app import app

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
