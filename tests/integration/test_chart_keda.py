"""The chart's KEDA ScaledObject reads queue depth from the Redis lists a real enqueue fills."""

from __future__ import annotations

import pytest
import redis

from mcm_tasks.queue import enqueue
from mcm_tasks.settings import configure, reset_settings
from tests.chart_support import CHART, named, render_file

pytestmark = pytest.mark.integration


def test_keda_list_names_hold_the_waiting_messages(redis_url: str, redis_client: redis.Redis) -> None:
    scaled = named(render_file(CHART / "ci" / "full-values.yaml"), "ScaledObject", "-worker")
    lists = {t["metadata"]["listName"] for t in scaled["spec"]["triggers"]}
    configure({"redis_url": redis_url, "key_prefix": "mcm-dev"})  # as full-values.yaml sets it
    try:
        assert enqueue("machine", "shoot--dev--demo/m-1")
        assert enqueue("node", "n-1")
        depth = {name: redis_client.llen(name) for name in lists}
        assert depth["mcm-dev:broker:mcm-dev.machine"] == 1
        assert depth["mcm-dev:broker:mcm-dev.node"] == 1
        assert sum(depth.values()) == 2
    finally:
        reset_settings()
