"""The worker's consumer survives closing a broker connection that kombu half released, with a real
redis-server and a real kombu connection (the state celery 5.7 leaves when Redis goes away while
messages are unacknowledged; see mcm_tasks.worker_consumer)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kombu import Connection, Exchange, Queue

from mcm_tasks.celery_app import app
from mcm_tasks.worker_consumer import Consumer, close_quietly

pytestmark = pytest.mark.integration


@pytest.fixture()
def half_released(redis_url: str) -> Iterator[Connection]:
    """A connection whose default channel holds one delivered, unacknowledged message, after kombu
    released its transport (what ``Connection.collect`` does before celery closes it)."""
    conn = Connection(redis_url)
    channel = conn.default_channel
    Queue("consumer-test", Exchange("consumer-test"), "consumer-test", channel=channel).declare()
    with conn.Producer() as producer:
        producer.publish({"n": 1}, exchange="consumer-test", routing_key="consumer-test")
    channel.basic_consume("consumer-test", False, lambda message: None, "consumer-test")
    conn.drain_events(timeout=5)
    assert channel.qos._delivered, "a message is delivered and not acknowledged"
    conn._do_close_transport()
    yield conn


def test_kombu_raises_closing_a_half_released_connection(half_released: Connection) -> None:
    """The library behaviour the consumer guards against; if a kombu release fixes it, this fails
    and the guard can go."""
    with pytest.raises(AttributeError):
        half_released.close()


def test_closing_quietly_swallows_it(half_released: Connection, caplog: pytest.LogCaptureFixture) -> None:
    close_quietly(half_released)
    half_released.close()
    half_released.release()
    assert "closing the lost broker connection failed" in caplog.text


def test_workers_use_the_hardened_consumer() -> None:
    assert app.conf.worker_consumer == f"{Consumer.__module__}:{Consumer.__name__}"
