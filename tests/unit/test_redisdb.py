"""One Redis setting for every client: plain and TLS URLs, Sentinel as kombu spells it, credentials
from the URL or the settings, and what the broker (kombu) and beat (celery-redbeat) get of it."""

from __future__ import annotations

import ssl
from typing import Any

import pytest

from mcm_tasks.observability import configz
from mcm_tasks.redisdb import broker_options, redbeat_options, redis_target
from mcm_tasks.settings import SettingsError, load_settings

SENTINELS = "sentinel://10.0.0.1:26379;sentinel://10.0.0.2:26380/3"


def settings(**values: Any) -> Any:
    return load_settings(values)


def test_a_plain_url_keeps_its_credentials_unless_the_settings_name_others() -> None:
    target = redis_target(settings(redis_url="redis://u:p%40ss@h:6380/2"))
    assert (target.username, target.password, target.tls, target.is_sentinel) == ("u", "p@ss", False, False)
    target = redis_target(
        settings(redis_url="redis://u:p@h:6380/2", redis_username="mcm", redis_password="x")
    )
    assert (target.username, target.password) == ("mcm", "x")
    assert broker_options(settings(redis_url="redis://h:6380/2", redis_password="s3"))["broker_url"] == (
        "redis://:s3@h:6380/2"
    )


def test_sentinel_urls_as_kombu_spells_them() -> None:
    target = redis_target(settings(redis_url=SENTINELS, redis_sentinel_master="mymaster"))
    assert target.sentinels == (("10.0.0.1", 26379), ("10.0.0.2", 26380))
    assert (target.master, target.db, target.is_sentinel) == ("mymaster", 3, True)
    with pytest.raises(SettingsError, match="--redis-sentinel-master"):
        settings(redis_url=SENTINELS)
    with pytest.raises(SettingsError, match="--redis-failover-timeout"):
        settings(redis_url=SENTINELS, redis_sentinel_master="m", reconcile_lock_ttl="10s")
    with pytest.raises(ValueError, match="not a sentinel address"):
        redis_target(settings(redis_url="sentinel://a:1;redis://b:2", redis_sentinel_master="m"))


def test_the_broker_and_beat_follow_sentinel_with_passwords_and_tls() -> None:
    s = settings(
        redis_url=SENTINELS,
        redis_sentinel_master="mymaster",
        redis_sentinel_password="sp",
        redis_username="mcm",
        redis_password="rp",
        redis_tls=True,
        redis_tls_ca_file="/ca.pem",
    )
    broker = broker_options(s)
    assert broker["broker_url"] == "sentinel://mcm:rp@10.0.0.1:26379;sentinel://10.0.0.2:26380/3"
    assert broker["transport_options"]["master_name"] == "mymaster"
    assert broker["transport_options"]["sentinel_kwargs"]["password"] == "sp"
    assert broker["transport_options"]["sentinel_kwargs"]["ssl"] is True
    assert broker["broker_use_ssl"] == {"ssl_cert_reqs": ssl.CERT_REQUIRED, "ssl_ca_certs": "/ca.pem"}

    beat = redbeat_options(s)
    assert beat["redbeat_redis_url"].startswith("redis-sentinel")
    options = beat["redbeat_redis_options"]
    assert options["sentinels"] == [("10.0.0.1", 26379), ("10.0.0.2", 26380)]
    assert (options["service_name"], options["db"], options["username"], options["password"]) == (
        "mymaster",
        3,
        "mcm",
        "rp",
    )
    assert beat["redis_use_ssl"]["ssl_ca_certs"] == "/ca.pem"


def test_rediss_implies_tls_with_client_certificates() -> None:
    s = settings(
        redis_url="rediss://h:6390/0",
        redis_tls_ca_file="/ca.pem",
        redis_tls_cert_file="/c.pem",
        redis_tls_key_file="/k.pem",
    )
    target = redis_target(s)
    assert target.tls
    assert target.tls_options == {
        "ssl_cert_reqs": ssl.CERT_REQUIRED,
        "ssl_ca_certs": "/ca.pem",
        "ssl_certfile": "/c.pem",
        "ssl_keyfile": "/k.pem",
    }
    assert broker_options(s)["broker_url"] == "rediss://h:6390/0"
    assert redbeat_options(s)["redbeat_redis_url"] == "rediss://h:6390/0"
    assert (
        broker_options(settings(redis_url="redis://h:1/0", redis_tls=True))["broker_url"] == "rediss://h:1/0"
    )


def test_configz_hides_every_redis_credential() -> None:
    shown = configz(
        settings(redis_url="redis://u:p@h:1/0", redis_password="rp", redis_sentinel_password="sp")
    )
    assert {shown["redis_url"], shown["redis_password"], shown["redis_sentinel_password"]} == {"<hidden>"}
