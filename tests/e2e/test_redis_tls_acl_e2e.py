"""Redis over TLS with an ACL user (issue 17), end to end: a redis-server that speaks only TLS, with
certificates made by the test, the default user off and the project's user as
docs/install/redis.md documents it (``mcm_tasks.redisdb.acl_rules``: keys under ``mcm:``, no admin
or dangerous command). The whole sandbox (informer, workers, beat, kubelet) runs a
MachineDeployment's lifecycle on it, and Redis' ACL log shows that no command or key was refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from kubernetes import config
from kubernetes.client import ApiClient

from mcm_sandbox.procs import wait_until
from mcm_sandbox.redis_ha import Certificates, RedisNode, make_certificates, tls_redis_server_binary
from mcm_sandbox.runner import Sandbox
from mcm_tasks import kinds
from mcm_tasks.kube import ops
from mcm_tasks.redisdb import acl_rules, close_all, get_redis
from mcm_tasks.settings import configure, reset_settings
from providers.local import LocalCloud
from tests.e2e.pools import create_pool, machines, running
from tests.e2e.support import running_sandbox

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

NS = "default"
WAIT = 120.0
PASSWORD = "mcm-acl-test-password"
ADMIN = ("admin", "admin-test-password")


class TlsRedis:
    def __init__(self, workdir: Path) -> None:
        self.certs: Certificates = make_certificates(workdir / "certs")
        self.node = RedisNode(
            workdir / "redis",
            certs=self.certs,
            acl=[
                "user default off",
                acl_rules("mcm", PASSWORD, "mcm"),
                f"user {ADMIN[0]} on >{ADMIN[1]} ~* &* +@all",
            ],
        )

    def admin(self) -> redis.Redis:
        return redis.Redis(
            host="127.0.0.1",
            port=self.node.port,
            username=ADMIN[0],
            password=ADMIN[1],
            ssl=True,
            ssl_ca_certs=str(self.certs.ca),
            decode_responses=True,
            socket_timeout=2,
        )

    def start(self) -> TlsRedis:
        self.node.start(tls_redis_server_binary())
        client = self.admin()

        def ready() -> bool:
            try:
                return bool(client.ping())
            except redis.RedisError:
                return False

        wait_until(ready, 15, what="redis-server over TLS")
        client.close()
        return self

    def env(self) -> dict[str, str]:
        return {
            "MCM_REDIS_URL": f"rediss://127.0.0.1:{self.node.port}/0",
            "MCM_REDIS_USERNAME": "mcm",
            "MCM_REDIS_PASSWORD": PASSWORD,
            "MCM_REDIS_TLS_CA_FILE": str(self.certs.ca),
            "MCM_REDIS_TLS_CERT_FILE": str(self.certs.client_cert),
            "MCM_REDIS_TLS_KEY_FILE": str(self.certs.client_key),
        }


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsRedis]:
    started = TlsRedis(Path(tmp_path_factory.mktemp("tls-redis"))).start()
    try:
        yield started
    finally:
        started.node.stop()


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory, server: TlsRedis) -> Iterator[Sandbox]:
    env = {"MCM_LONG_RETRY": "10s", "MCM_CLASS_RESYNC_PERIOD": "10s", **server.env()}
    with running_sandbox(Path(tmp_path_factory.mktemp("tls-e2e")), env, redis_env=server.env()) as started:
        yield started


@pytest.fixture(scope="module")
def control(sandbox: Sandbox) -> Iterator[ApiClient]:
    fields = {k.removeprefix("MCM_").lower(): v for k, v in sandbox.env().items()}
    configure(fields)
    api = config.new_client_from_config(config_file=str(sandbox.kubeconfig))
    try:
        yield api
    finally:
        api.close()
        close_all()
        reset_settings()


def test_the_refused_are_refused(server: TlsRedis) -> None:
    plain = redis.Redis(host="127.0.0.1", port=server.node.port, socket_timeout=2)
    with pytest.raises(redis.ConnectionError):
        plain.ping()  # TLS only
    anonymous = redis.Redis(
        host="127.0.0.1", port=server.node.port, ssl=True, ssl_ca_certs=str(server.certs.ca), socket_timeout=2
    )
    with pytest.raises(redis.AuthenticationError):
        anonymous.ping()  # the default user is off
    user = redis.Redis(
        host="127.0.0.1",
        port=server.node.port,
        username="mcm",
        password=PASSWORD,
        ssl=True,
        ssl_ca_certs=str(server.certs.ca),
        socket_timeout=2,
    )
    with pytest.raises(redis.exceptions.NoPermissionError):
        user.set("other:key", "1")  # outside the prefix
    with pytest.raises(redis.exceptions.NoPermissionError):
        user.flushall()
    with pytest.raises(redis.exceptions.NoPermissionError):
        user.keys("*")
    server.admin().acl_log_reset()


def test_a_lifecycle_over_tls_as_the_acl_user(server: TlsRedis, sandbox: Sandbox, control: ApiClient) -> None:
    create_pool(control, "tls", 2)
    wait_until(lambda: running(control) == 2, WAIT, interval=0.3, what="2 machines Running over TLS")
    cloud = LocalCloud(get_redis(decode=False))
    ops.delete(control, kinds.MACHINE_DEPLOYMENT.resource, "tls", NS)
    wait_until(
        lambda: not machines(control) and not [v for v in cloud.all() if v.live()],
        WAIT,
        interval=0.3,
        what="machines and VMs gone",
    )
    admin = server.admin()
    try:
        # redis-py's CLIENT SETINFO, refused from Redis 7.2 on (unknown before), is optional
        denied = [e for e in admin.acl_log() if e.get("object") != "client|setinfo"]
        assert not denied, f"the ACL refused the project: {denied[:5]}"
        clients = admin.client_list()
        assert clients and all(c.get("user") in ("mcm", ADMIN[0]) for c in clients)
    finally:
        admin.close()
