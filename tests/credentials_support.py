"""Credentials as a real cluster rotates them, for the tests of ``mcm_tasks.kube.credentials``:
bound ServiceAccount tokens the sandbox API server revokes (a token bound to a Secret dies with
it), a ServiceAccount mount laid out as the kubelet lays it out (``..data`` symlink swapped on
rotation), Gardener's generic kubeconfig (``tokenFile:``), an exec credential plugin, and a TLS
server that authenticates client certificates."""

from __future__ import annotations

import base64
import datetime
import json
import os
import ssl
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kubernetes import client, config
from prometheus_client import REGISTRY

from mcm_tasks.kube.credentials import SERVICE_ACCOUNT_DIR


def reloads(cluster: str, trigger: str) -> float:
    """This process's ``mcm_kube_credential_reloads_total`` for one cluster and trigger."""
    value = REGISTRY.get_sample_value(
        "mcm_kube_credential_reloads_total", {"cluster": cluster, "trigger": trigger}
    )
    return value or 0.0


def write_atomically(path: Path, text: str) -> None:
    """As Gardener's token-requestor and kubectl write a file: a new file renamed over the old."""
    tmp = path.with_name(path.name + ".new")
    tmp.write_text(text)
    os.replace(tmp, path)


def admin_client(admin_kubeconfig: Path) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(admin_kubeconfig))


def service_account_with(
    admin_kubeconfig: Path, namespace: str, name: str, rules: list[dict[str, Any]]
) -> None:
    """A ServiceAccount with a Role of ``rules`` in ``namespace`` bound to it (idempotent)."""
    api = admin_client(admin_kubeconfig)
    try:
        core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
        for create, body in (
            (core.create_namespaced_service_account, {"metadata": {"name": name}}),
            (rbac.create_namespaced_role, {"metadata": {"name": name}, "rules": rules}),
            (
                rbac.create_namespaced_role_binding,
                {
                    "metadata": {"name": name},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                    "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
                },
            ),
        ):
            try:
                create(namespace, body)
            except client.ApiException as err:
                if err.status != 409:
                    raise
    finally:
        api.close()


def bound_token(admin_kubeconfig: Path, namespace: str, service_account: str, secret: str) -> str:
    """A token of ``service_account`` bound to a new Secret ``secret``: deleting the Secret
    (``revoke``) makes the API server refuse the token, as it refuses a rotated-out one."""
    api = admin_client(admin_kubeconfig)
    try:
        core = client.CoreV1Api(api)
        try:
            core.create_namespaced_service_account(namespace, {"metadata": {"name": service_account}})
        except client.ApiException as err:
            if err.status != 409:
                raise
        core.create_namespaced_secret(namespace, {"metadata": {"name": secret}, "type": "Opaque"})
        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(
                audiences=[],
                expiration_seconds=3600,
                bound_object_ref=client.V1BoundObjectReference(kind="Secret", api_version="v1", name=secret),
            )
        )
        issued = core.create_namespaced_service_account_token(service_account, namespace, request)
        assert issued.status is not None
        return str(issued.status.token)
    finally:
        api.close()


def revoke(admin_kubeconfig: Path, namespace: str, secret: str) -> None:
    api = admin_client(admin_kubeconfig)
    try:
        client.CoreV1Api(api).delete_namespaced_secret(secret, namespace)
    finally:
        api.close()


def server_and_ca(admin_kubeconfig: Path) -> tuple[str, bytes]:
    """The sandbox's https URL and the CA that signs it, from its admin kubeconfig."""
    cluster = yaml.safe_load(admin_kubeconfig.read_text())["clusters"][0]["cluster"]
    return str(cluster["server"]), base64.b64decode(cluster.get("certificate-authority-data", ""))


def generic_kubeconfig(path: Path, server: str, ca_pem: bytes, token_file: str = "token") -> Path:
    """Gardener's "generic kubeconfig": the user has ``tokenFile`` (relative paths are relative to
    the kubeconfig's directory), the token itself lives in that file."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "shoot",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": "shoot-token", "user": {"tokenFile": token_file}}],
        "contexts": [{"name": "shoot", "context": {"cluster": "shoot", "user": "shoot-token"}}],
        "current-context": "shoot",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc))
    return path


@dataclass
class ProjectedServiceAccount:
    """``/var/run/secrets/kubernetes.io/serviceaccount`` under ``root`` as the kubelet writes a
    projected volume: the files are symlinks through ``..data`` to a timestamped directory, and a
    rotation writes a new directory and swaps ``..data`` atomically."""

    root: Path
    namespace: str
    ca_pem: bytes
    generation: int = 0

    @property
    def directory(self) -> Path:
        return Path(str(self.root) + SERVICE_ACCOUNT_DIR)

    def environ(self, server: str) -> dict[str, str]:
        """The environment a pod of this ServiceAccount sees, pointed at this mount."""
        host_port = server.removeprefix("https://")
        host, _, port = host_port.rpartition(":")
        return {
            "KUBERNETES_SERVICE_HOST": host,
            "KUBERNETES_SERVICE_PORT": port,
            "MCM_INCLUSTER_ROOT": str(self.root),
        }

    def write(self, token: str) -> None:
        directory = self.directory
        directory.mkdir(parents=True, exist_ok=True)
        self.generation += 1
        stamp = f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{self.generation}"
        data = directory / stamp
        data.mkdir()
        (data / "token").write_text(token)
        (data / "ca.crt").write_bytes(self.ca_pem)
        (data / "namespace").write_text(self.namespace)
        link = directory / "..data_tmp"
        link.symlink_to(stamp)
        old = (directory / "..data").resolve() if (directory / "..data").exists() else None
        os.replace(link, directory / "..data")
        for name in ("token", "ca.crt", "namespace"):
            if not (directory / name).is_symlink():
                (directory / name).symlink_to(f"..data/{name}")
        if old is not None and old.name != stamp:
            for child in old.iterdir():
                child.unlink()
            old.rmdir()


EXEC_PLUGIN = """#!{python}
import datetime, json, os, sys
count = {count!r}
with open(count, "a") as out:
    out.write("x")
if os.environ.get("MCM_TEST_PLUGIN_FAIL"):
    print("plugin: cannot reach the identity provider", file=sys.stderr)
    sys.exit(3)
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
assert info["spec"]["interactive"] is False
token = open({token!r}).read().strip()
expires = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds={lifetime})
status = {{"token": token, "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ")}}
print(json.dumps({{"apiVersion": info["apiVersion"], "kind": "ExecCredential", "status": status}}))
"""


def exec_kubeconfig(
    directory: Path, server: str, ca_pem: bytes, lifetime: float, env: dict[str, str] | None = None
) -> tuple[Path, Path, Path]:
    """A kubeconfig whose user runs an exec plugin (a relative command, as kubeconfigs name one
    next to them) that hands out the token in ``token`` with ``lifetime`` seconds to live and counts
    its runs in ``runs``. Returns (kubeconfig, token file, run counter)."""
    directory.mkdir(parents=True, exist_ok=True)
    token, runs = directory / "plugin-token", directory / "plugin-runs"
    runs.write_text("")
    plugin = directory / "bin" / "token-plugin"
    plugin.parent.mkdir(exist_ok=True)
    plugin.write_text(
        EXEC_PLUGIN.format(python=sys.executable, count=str(runs), token=str(token), lifetime=lifetime)
    )
    plugin.chmod(0o755)
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": "./bin/token-plugin",
            "interactiveMode": "Never",
            "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
        }
    }
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "c",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
    kubeconfig = directory / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(doc))
    return kubeconfig, token, runs


# --- client certificates ------------------------------------------------------------------------


@dataclass
class CertificateAuthority:
    key: ec.EllipticCurvePrivateKey = field(default_factory=lambda: ec.generate_private_key(ec.SECP256R1()))

    def __post_init__(self) -> None:
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-client-ca")])
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )

    @property
    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(self, common_name: str) -> tuple[bytes, bytes]:
        """(certificate PEM, key PEM) of a client named ``common_name``."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .sign(self.key, hashes.SHA256())
        )
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        return cert.public_bytes(serialization.Encoding.PEM), key_pem


@dataclass
class ClientCertServer:
    """An https server that authenticates clients by certificate, as kube-apiserver's x509
    authenticator: a certificate signed by its client CA whose CN is in ``allowed`` gets 200 and
    its name back, any other (a revoked one) 401. ``seen`` lists the CN of every request."""

    url: str
    ca_pem: bytes
    allowed: set[str]
    seen: list[str]


@contextmanager
def client_cert_server(workdir: Path, client_ca: CertificateAuthority) -> Iterator[ClientCertServer]:
    from mcm_sandbox.apiserver.tls import self_signed

    cert_pem, key_pem = self_signed("127.0.0.1")
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "server.crt").write_bytes(cert_pem)
    (workdir / "server.key").write_bytes(key_pem)
    (workdir / "client-ca.crt").write_bytes(client_ca.pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(workdir / "server.crt", workdir / "server.key")
    context.load_verify_locations(workdir / "client-ca.crt")
    context.verify_mode = ssl.CERT_REQUIRED
    state = ClientCertServer("", cert_pem, set(), [])

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            peer = self.connection.getpeercert() or {}  # type: ignore[attr-defined]
            subject = dict(pair[0] for pair in peer.get("subject", ()))
            name = str(subject.get("commonName", ""))
            state.seen.append(name)
            body: dict[str, Any]
            if name in state.allowed:
                code, body = 200, {"kind": "Status", "status": "Success", "message": name}
            else:
                code, body = (
                    401,
                    {"kind": "Status", "status": "Failure", "reason": "Unauthorized", "code": 401},
                )
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    state.url = f"https://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def client_cert_kubeconfig(
    directory: Path, server: ClientCertServer, cert_pem: bytes, key_pem: bytes
) -> Path:
    """A kubeconfig whose user names certificate and key files (as a seed's static kubeconfigs)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "client.crt").write_bytes(cert_pem)
    (directory / "client.key").write_bytes(key_pem)
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "c",
                "cluster": {
                    "server": server.url,
                    "certificate-authority-data": base64.b64encode(server.ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": "u", "user": {"client-certificate": "client.crt", "client-key": "client.key"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
    path = directory / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return path


def replace_client_cert(directory: Path, cert_pem: bytes, key_pem: bytes) -> None:
    write_atomically(directory / "client.key", key_pem.decode())
    write_atomically(directory / "client.crt", cert_pem.decode())
