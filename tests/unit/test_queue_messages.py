"""The pre-built messages are what Celery itself would publish for the reconcile tasks."""

from __future__ import annotations

import base64
import json

import pytest

from mcm_tasks.queue.messages import build_message, queue_keys, task_name
from mcm_tasks.settings import Settings


def _decode(raw: str) -> tuple[dict, list]:
    message = json.loads(raw)
    return message, json.loads(base64.b64decode(message["body"]))


def test_message_carries_only_the_key_and_routes_to_the_kind_queue() -> None:
    message, body = _decode(build_message("machine", 'ns/"odd" ✓', "id-1", "mcm.machine"))
    assert body == [['ns/"odd" ✓'], {}, {"callbacks": None, "errbacks": None, "chain": None, "chord": None}]
    assert message["headers"]["task"] == "mcm.reconcile.machine"
    assert message["headers"]["id"] == message["properties"]["correlation_id"] == "id-1"
    assert message["headers"]["eta"] is None
    assert message["properties"]["delivery_info"] == {"exchange": "", "routing_key": "mcm.machine"}
    assert message["content-type"] == "application/json"


def test_message_has_the_same_shape_as_celerys_own() -> None:
    """A Celery upgrade that changes the protocol-2 envelope fails here, not in production."""
    from celery import Celery

    app = Celery("shape", broker="memory://")
    app.conf.task_serializer = "json"
    ours, _ = _decode(build_message("machine", "k", "id-3", "mcm.machine"))
    theirs = app.amqp.as_task_v2("id-3", task_name("machine"), args=("k",), kwargs={})
    assert set(ours["headers"]) == set(theirs.headers)


def test_queue_keys_share_the_prefix_and_reject_unknown_kinds() -> None:
    settings = Settings(key_prefix="blue")
    keys = queue_keys("machine-termination", settings)
    assert keys.broker_list == "blue:broker:blue.machine-termination"
    assert all(str(getattr(keys, name)).startswith("blue:") for name in keys.__slots__ if name != "kind")
    with pytest.raises(ValueError, match="unknown queue kind"):
        queue_keys("pods", settings)
