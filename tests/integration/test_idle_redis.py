"""The sandbox's Redis is configured as the Helm chart's: its server timer runs once a second (issue 19:
at the default hz 10 an idle install's Redis woke ten times a second for it)."""

from __future__ import annotations

import pytest
import redis

pytestmark = pytest.mark.integration


def test_the_sandbox_redis_runs_its_timer_once_a_second(redis_client: redis.Redis) -> None:
    assert redis_client.config_get("hz") == {"hz": "1"}
