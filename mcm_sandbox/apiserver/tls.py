"""A self-signed serving certificate, for the HTTPS listener RBAC mode adds.

kubectl (clientcmd) sends credentials only to https servers, so a sandbox that checks bearer
tokens must also speak TLS; the certificate is made at start-up for 127.0.0.1/localhost and its
PEM goes into the kubeconfig as ``certificate-authority-data``.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import tempfile
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def self_signed(host: str) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) valid for ``host``, 127.0.0.1 and localhost, for a year."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mcm-sandbox-apiserver")])
    alt: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    try:
        if host not in ("127.0.0.1", "localhost", "0.0.0.0"):
            alt.append(x509.IPAddress(ipaddress.ip_address(host)))
    except ValueError:
        alt.append(x509.DNSName(host))
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def server_context(cert_pem: bytes, key_pem: bytes) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory() as tmp:
        cert_path, key_path = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
        cert_path.write_bytes(cert_pem)
        key_path.write_bytes(key_pem)
        key_path.chmod(0o600)
        context.load_cert_chain(cert_path, key_path)
    return context


#: asyncio's read buffer per TLS connection (``SSLProtocol.max_size``): a TLS record carries at most
#: 16 KiB of plaintext, so a read of one record loses nothing (a larger body takes more reads)
TLS_READ_BUFFER = 16 << 10


def small_tls_buffers() -> None:
    """asyncio allocates a 256 KiB read buffer for every TLS connection, and a sandbox serving
    virtual clusters holds hundreds of watches (a kubelet's five and an informer's per cluster):
    measured, 284 KiB per watch over TLS against 15 KiB in plain HTTP. This process only serves, so
    its connections' buffers are made smaller."""
    import asyncio.sslproto

    asyncio.sslproto.SSLProtocol.max_size = TLS_READ_BUFFER
