"""boto3 EC2 clients, one per (region, credentials, endpoint) and process.

Building a client costs milliseconds and a web-identity client an STS call, so clients are cached
and shared by all reconciles of a worker. Each client retries in botocore's adaptive mode (which
also slows down client-side when EC2 throttles), draws from the shared per-account request budget
before every HTTP attempt, and records MCM's ``mcm_cloud_api_*`` metrics for every call.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import boto3
import botocore.session
from botocore.config import Config
from botocore.credentials import (
    AssumeRoleWithWebIdentityCredentialFetcher,
    CredentialProvider,
    CredentialResolver,
    Credentials,
    DeferredRefreshableCredentials,
)
from botocore.exceptions import BotoCoreError, ClientError
from botocore.utils import FileWebIdentityTokenLoader

from providers.aws.ratelimit import RequestLimiter
from providers.aws.secret import AWSCredentials
from providers.metrics import record_api_call

log = logging.getLogger(__name__)

PROVIDER_LABEL = "aws"
_STARTED = "mcm_started"

#: botocore loggers whose DEBUG records carry request bodies (RunInstances' UserData), signing
#: material or response bodies; their DEBUG output is dropped so no log level can leak a secret
_CHATTY_LOGGERS = (
    "botocore.endpoint",
    "botocore.parsers",
    "botocore.auth",
    "botocore.awsrequest",
    "botocore.httpsession",
    "botocore.hooks",
    "botocore.retryhandler",
    "botocore.credentials",
    "urllib3.connectionpool",
)


class _DropDebug(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.DEBUG


def silence_sdk_debug_logs() -> None:
    for name in _CHATTY_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropDebug) for f in logger.filters):
            logger.addFilter(_DropDebug())


class _FixedCredentials(CredentialProvider):
    """Hands botocore one credentials object instead of its env/profile/IMDS search chain."""

    METHOD = "mcm-secret"
    CANONICAL_NAME = "mcm-secret"

    def __init__(self, credentials: Credentials) -> None:
        super().__init__()
        self._credentials = credentials

    def load(self) -> Credentials:
        return self._credentials


@dataclass(frozen=True)
class ClientSettings:
    endpoint_url: str | None = None
    max_attempts: int = 5
    connect_timeout: float = 10.0
    read_timeout: float = 30.0

    def config(self) -> Config:
        return Config(
            retries={"mode": "adaptive", "total_max_attempts": self.max_attempts},
            connect_timeout=self.connect_timeout,
            read_timeout=self.read_timeout,
        )


def _session(creds: AWSCredentials, region: str, settings: ClientSettings) -> boto3.Session:
    if not creds.web_identity:
        return boto3.Session(
            aws_access_key_id=creds.access_key_id,
            aws_secret_access_key=creds.secret_access_key,
            region_name=region,
        )
    core = botocore.session.Session()

    def sts_client(service: str, config: Config | None = None) -> Any:
        return core.create_client(
            service, region_name=region, endpoint_url=settings.endpoint_url, config=config
        )

    fetcher = AssumeRoleWithWebIdentityCredentialFetcher(
        client_creator=sts_client,
        web_identity_token_loader=FileWebIdentityTokenLoader(creds.token_file),
        role_arn=creds.role_arn,
    )
    refreshing = DeferredRefreshableCredentials(
        refresh_using=fetcher.fetch_credentials, method="assume-role-with-web-identity"
    )
    core.register_component("credential_provider", CredentialResolver([_FixedCredentials(refreshing)]))
    return boto3.Session(botocore_session=core, region_name=region)


@dataclass
class CachedClient:
    """A client and what its request budget is keyed by (the account is looked up lazily)."""

    ec2: Any
    region: str
    session: boto3.Session = field(repr=False)
    creds: AWSCredentials = field(repr=False)
    settings: ClientSettings
    _account: str = ""

    def account(self) -> str:
        if not self._account:
            self._account = _account_of(self)
        return self._account


def _account_of(client: CachedClient) -> str:
    """From the role ARN, else STS GetCallerIdentity, else a stable stand-in for the key."""
    if client.creds.web_identity:
        parts = client.creds.role_arn.split(":")
        if len(parts) > 4 and parts[4]:
            return parts[4]
    try:
        sts = client.session.client(
            "sts", endpoint_url=client.settings.endpoint_url, config=client.settings.config()
        )
        return str(sts.get_caller_identity()["Account"])
    except (BotoCoreError, ClientError) as err:
        log.warning("cannot look up the AWS account, limiting by credentials: %s", type(err).__name__)
        return "creds-" + client.creds.fingerprint()[:16]


def _instrument(client: CachedClient, limiter: RequestLimiter | None) -> None:
    events = client.ec2.meta.events

    def started(context: dict[str, Any], **_: Any) -> None:
        context[_STARTED] = time.perf_counter()

    def elapsed(context: dict[str, Any]) -> float:
        return time.perf_counter() - context.get(_STARTED, time.perf_counter())

    def finished(http_response: Any, model: Any, context: dict[str, Any], **_: Any) -> None:
        record_api_call(PROVIDER_LABEL, model.name, elapsed(context), http_response.status_code < 300)

    def failed(context: dict[str, Any], **kwargs: Any) -> None:
        operation = str(kwargs.get("event_name", "")).rsplit(".", 1)[-1]
        record_api_call(PROVIDER_LABEL, operation, elapsed(context), False)

    events.register("before-parameter-build.ec2", started)
    events.register("after-call.ec2", finished)
    events.register("after-call-error.ec2", failed)
    if limiter is not None:

        def throttle(**_: Any) -> None:
            limiter.acquire(client.account(), client.region)

        events.register("before-send.ec2", throttle)


#: builds the EC2 client for (region, credentials, settings); tests use it to add a Stubber
ClientFactory = Callable[[str, AWSCredentials, ClientSettings], Any]


class ClientCache:
    """EC2 clients per (region, credentials fingerprint); ``factory`` lets tests hand in a client
    wrapped by botocore's Stubber."""

    def __init__(
        self,
        settings: ClientSettings,
        limiter: RequestLimiter | None = None,
        factory: ClientFactory | None = None,
    ) -> None:
        self.settings = settings
        self.limiter = limiter
        self._factory = factory
        self._clients: dict[tuple[str, str], CachedClient] = {}
        self._lock = threading.Lock()
        silence_sdk_debug_logs()

    def get(self, region: str, creds: AWSCredentials) -> CachedClient:
        ident = (region, creds.fingerprint())
        with self._lock:
            cached = self._clients.get(ident)
            if cached is None:
                cached = self._build(region, creds)
                self._clients[ident] = cached
            return cached

    def _build(self, region: str, creds: AWSCredentials) -> CachedClient:
        session = _session(creds, region, self.settings)
        if self._factory is not None:
            ec2 = self._factory(region, creds, self.settings)
        else:
            ec2 = session.client(
                "ec2",
                region_name=region,
                endpoint_url=self.settings.endpoint_url,
                config=self.settings.config(),
            )
        cached = CachedClient(ec2=ec2, region=region, session=session, creds=creds, settings=self.settings)
        _instrument(cached, self.limiter)
        return cached

    def __len__(self) -> int:
        return len(self._clients)
