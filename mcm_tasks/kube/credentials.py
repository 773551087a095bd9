"""Credentials that rotate: what a cluster client authenticates with, and when to read it again.

Gardener runs MCM with credentials that change under a running process: the pod's ServiceAccount
token (a bound, projected token the kubelet rewrites; one hour by default), a kubeconfig whose user
has ``tokenFile:`` (Gardener's "generic kubeconfig", rewritten by its token-requestor, the old token
revoked), an exec credential plugin (``users[].user.exec``) whose credential expires, and client
certificates replaced on disk. client-go re-reads a token file at most once a minute
(``cachingTokenSource``), re-runs an exec plugin when its credential expires or after a 401, and
reloads rotated client certificates. This module decides the same: pure functions over what was
loaded (``Credential``) and the clocks; ``credentials_io`` reads the files, runs the plugins and
applies the result to the client.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

#: the value of --control-kubeconfig / --target-kubeconfig that means the pod's ServiceAccount
#: (upstream's ``inClusterConfig``, ``cmd/machine-controller-manager/app``)
IN_CLUSTER = "inClusterConfig"
#: where a pod sees its ServiceAccount (rest.InClusterConfig's tokenFile and rootCAFile)
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
#: environment variable: a directory that stands for ``/`` when looking for the ServiceAccount's
#: files (tests, and a sidecar that mounts them elsewhere); unset = the pod's own paths
IN_CLUSTER_ROOT_ENV = "MCM_INCLUSTER_ROOT"

#: how often a token file (kubeconfig ``tokenFile``, the in-cluster token), a replaced kubeconfig and
#: replaced certificate files are looked at again: client-go's ``cachingTokenSource`` period
RELOAD_PERIOD = 60.0
#: an exec credential is renewed this long before its ``expirationTimestamp``, so no request leaves
#: with a credential about to expire on the way
EXPIRY_LEEWAY = 10.0
#: several requests meeting a 401 at once cause one reload, not one each
UNAUTHORIZED_DEBOUNCE = 1.0

# reload triggers (the ``trigger`` label of mcm_kube_credential_reloads_total)
PERIOD = "period"
EXPIRY = "expiry"
UNAUTHORIZED = "unauthorized"


class ClusterConfigError(RuntimeError):
    """A kubeconfig setting that cannot be turned into a client; the message names the flag and the
    file, and never a credential."""


@dataclass(frozen=True)
class FileStamp:
    """What a file looked like when it was read: a replaced or rewritten file differs in one of these
    (an atomic rename changes the inode; Kubernetes' ``..data`` symlink swap too)."""

    path: str
    inode: int
    mtime_ns: int
    size: int


@dataclass(frozen=True)
class Credential:
    """What one cluster client authenticates with, as loaded at one moment.

    ``authorization``: the ``Authorization`` header value (``Bearer …`` or ``Basic …``), or None.
    ``tls``: the files (with their ``FileStamp``: a file replaced at the same path differs) and
    settings that make the TLS context (CA, client certificate and key, verification, server name);
    a change needs a new connection pool. ``expires``: wall-clock time an exec plugin's credential
    expires, or None. ``source``: where it came from, for messages (a path or the exec plugin's
    command; never the credential).
    """

    host: str
    authorization: str | None
    tls: tuple[Any, ...]
    source: str
    expires: float | None = None
    uses_exec: bool = False


def flag_of(setting: str) -> str:
    """``control_kubeconfig`` → ``--control-kubeconfig (MCM_CONTROL_KUBECONFIG)``."""
    return f"--{setting.replace('_', '-')} (MCM_{setting.upper()})"


def cluster_of(setting: str) -> str:
    """The cluster a kubeconfig setting is for (the metric's ``cluster`` label)."""
    return setting.removesuffix("_kubeconfig") or setting


def reload_due(
    credential: Credential, loaded_at: float, now: float, wall: float, period: float = RELOAD_PERIOD
) -> str | None:
    """Why the credential must be looked at again before the next request, or None.

    ``loaded_at`` and ``now`` are monotonic, ``wall`` is the wall clock (an exec credential's expiry
    is a wall-clock time). An expired exec credential first: it must be renewed, not just re-read.
    """
    if credential.expires is not None and wall >= credential.expires - EXPIRY_LEEWAY:
        return EXPIRY
    if period > 0 and now - loaded_at >= period:
        return PERIOD
    return None


def changed(old: Credential, new: Credential) -> tuple[bool, bool]:
    """(the Authorization header changed, the TLS context or host changed)."""
    return old.authorization != new.authorization, (old.tls, old.host) != (new.tls, new.host)


def rerun_exec(trigger: str) -> bool:
    """An exec plugin runs again only when its credential expired or was refused: running it every
    period would mint a credential a minute (some plugins call a cloud's STS each time)."""
    return trigger in (EXPIRY, UNAUTHORIZED)


# --- exec credential plugins (client.authentication.k8s.io) ------------------------------------

EXEC_API_VERSIONS = (
    "client.authentication.k8s.io/v1",
    "client.authentication.k8s.io/v1beta1",
)


@dataclass(frozen=True)
class ExecCredential:
    """The ``status`` of an ExecCredential a plugin printed."""

    token: str | None
    client_certificate_data: str | None
    client_key_data: str | None
    expires: float | None


#: a run of characters long and opaque enough to be a token or key material
_OPAQUE = re.compile(r"[A-Za-z0-9+/=_\-.]{32,}")


def plugin_said(stderr: bytes) -> str:
    """What a failed plugin said last (its stderr's last line), fit for one line of an error:
    anything that looks like a token or key is left out, and it is cut at 200 characters."""
    lines = [ln.strip() for ln in stderr.decode(errors="replace").splitlines() if ln.strip()]
    if not lines:
        return ""
    return _OPAQUE.sub("<redacted>", lines[-1])[:200]


def exec_info(api_version: str) -> str:
    """``KUBERNETES_EXEC_INFO``: what the plugin is told of its caller (never interactive here: a
    controller has no terminal to prompt on)."""
    return json.dumps({"apiVersion": api_version, "kind": "ExecCredential", "spec": {"interactive": False}})


def check_exec_config(spec: Any) -> str | None:
    """What is wrong with a ``users[].user.exec`` block, or None."""
    if not isinstance(spec, dict):
        return "exec must be a mapping"
    if not spec.get("command"):
        return "exec.command is missing"
    if spec.get("apiVersion") not in EXEC_API_VERSIONS:
        return f"exec.apiVersion {spec.get('apiVersion')!r} is not one of {', '.join(EXEC_API_VERSIONS)}"
    if str(spec.get("interactiveMode") or "") == "Always":
        return "exec.interactiveMode Always needs a terminal, which a controller does not have"
    return None


def parse_exec_output(stdout: bytes, api_version: str) -> ExecCredential:
    """The credential in a plugin's output, or ValueError saying what is wrong (without echoing the
    output: it holds the secret)."""
    try:
        doc = json.loads(stdout)
    except ValueError:
        raise ValueError("its output is not JSON") from None
    if not isinstance(doc, dict) or doc.get("kind") != "ExecCredential":
        raise ValueError("its output is not an ExecCredential")
    if doc.get("apiVersion") != api_version:
        raise ValueError(f"it answered apiVersion {doc.get('apiVersion')!r}, asked {api_version!r}")
    status = doc.get("status")
    if not isinstance(status, dict):
        raise ValueError("its ExecCredential has no status")
    token = status.get("token") or None
    cert, key = status.get("clientCertificateData") or None, status.get("clientKeyData") or None
    if not token and not (cert and key):
        raise ValueError("its ExecCredential has neither a token nor clientCertificateData and clientKeyData")
    expires = None
    stamp = status.get("expirationTimestamp")
    if stamp:
        try:
            expires = datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
        except ValueError:
            raise ValueError(f"its expirationTimestamp {stamp!r} is not RFC 3339") from None
    return ExecCredential(token, cert, key, expires)
