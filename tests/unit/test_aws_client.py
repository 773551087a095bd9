"""The EC2 client cache and the driver's configuration (no request leaves the process)."""

from __future__ import annotations

import logging

import pytest

from mcm_tasks.settings import reset_settings
from providers.aws import AWSDriver
from providers.aws.client import ClientCache, ClientSettings
from providers.aws.secret import AWSCredentials

STATIC = AWSCredentials(access_key_id="AKIA1", secret_access_key="s1")


def test_clients_are_cached_per_region_and_credentials() -> None:
    cache = ClientCache(ClientSettings(endpoint_url="http://127.0.0.1:9"))
    first = cache.get("eu-west-1", STATIC)
    assert cache.get("eu-west-1", AWSCredentials(access_key_id="AKIA1", secret_access_key="s1")) is first
    assert cache.get("us-east-1", STATIC) is not first
    assert (
        cache.get("eu-west-1", AWSCredentials(access_key_id="AKIA1", secret_access_key="rotated"))
        is not first
    )
    assert len(cache) == 3
    assert first.ec2.meta.region_name == "eu-west-1"
    assert first.ec2.meta.endpoint_url == "http://127.0.0.1:9"


def test_clients_retry_in_adaptive_mode() -> None:
    client = ClientCache(ClientSettings(max_attempts=7)).get("eu-west-1", STATIC).ec2
    assert client.meta.config.retries == {"mode": "adaptive", "total_max_attempts": 7}


def test_web_identity_clients_sign_with_sts_credentials_not_static_keys() -> None:
    creds = AWSCredentials(token_file="/nonexistent/token", role_arn="arn:aws:iam::111122223333:role/r")
    cached = ClientCache(ClientSettings()).get("eu-west-1", creds)
    assert cached.account() == "111122223333"  # from the role ARN, without a call
    credentials = cached.session.get_credentials()
    assert credentials is not None and credentials.method == "assume-role-with-web-identity"


def test_cache_keys_do_not_hold_credentials_in_clear() -> None:
    cache = ClientCache(ClientSettings())
    cache.get("eu-west-1", STATIC)
    assert "AKIA1" not in repr(cache._clients) and "s1'" not in repr(list(cache._clients))


def test_endpoint_and_describe_timeout_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCM_AWS_ENDPOINT_URL", "http://moto:5000")
    monkeypatch.setenv("MCM_AWS_DESCRIBE_TIMEOUT", "12.5")
    reset_settings()  # the driver reads them through the settings, loaded once per process
    driver = AWSDriver()
    assert (driver.endpoint_url, driver.describe_timeout) == ("http://moto:5000", 12.5)
    assert AWSDriver(endpoint_url="http://other", describe_timeout=3).describe_timeout == 3
    monkeypatch.delenv("MCM_AWS_ENDPOINT_URL")
    monkeypatch.delenv("MCM_AWS_DESCRIBE_TIMEOUT")
    reset_settings()
    assert (AWSDriver().endpoint_url, AWSDriver().describe_timeout) == (None, 300.0)


def test_sdk_debug_records_that_carry_request_bodies_are_dropped(caplog: pytest.LogCaptureFixture) -> None:
    ClientCache(ClientSettings())
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("botocore.endpoint").debug("Making request with params: UserData=c2VjcmV0")
        logging.getLogger("botocore.endpoint").warning("a warning stays")
    assert "c2VjcmV0" not in caplog.text and "a warning stays" in caplog.text
