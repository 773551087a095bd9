"""A shoot namespace's target cluster, from the Secrets Gardener keeps in that namespace.

Groundwork of the seed mode (issue 33: one installation serving many shoot namespaces, each with the
target cluster of its own ``--target-kubeconfig-secret``). **Not wired into any process yet**: today
every process serves one ``--namespace`` and one ``--target-kubeconfig``; the multi-namespace mode
will call :func:`resolve` (through ``target_secret_io.read_target``) for each namespace it serves,
and again when either Secret changes.

How Gardener gives the machine-controller-manager of a shoot its target cluster (gardener/gardener,
``pkg/component/nodemanagement/machinecontrollermanager``): the Deployment's
``--target-kubeconfig`` is ``/var/run/secrets/gardener.cloud/shoot/generic-kubeconfig/kubeconfig``
(``gardenerutils.PathGenericKubeconfig``), a projected volume (``InjectGenericKubeconfig`` →
``GenerateGenericKubeconfigVolume``) of two Secrets of the shoot namespace:

- the *generic token kubeconfig* (``v1beta1constants.SecretNameGenericTokenKubeconfig``,
  ``generic-token-kubeconfig``; the secrets manager adds a hash suffix, and gardenlet records the
  real name in the namespace's ``extensions.gardener.cloud`` ``Cluster`` annotation
  ``generic-token-kubeconfig.secret.gardener.cloud/name``, which
  ``GenericTokenKubeconfigSecretNameFromCluster`` reads, falling back to the static name), key
  ``kubeconfig``: the shoot API server and its CA, and a user with only
  ``tokenFile: /var/run/secrets/gardener.cloud/shoot/generic-kubeconfig/token``
  (``gardenerutils.PathShootToken``);
- the *shoot access Secret* ``shoot-access-machine-controller-manager``
  (``NewShootAccessSecret(DeploymentNameMachineControllerManager)``), key ``token``: the
  ServiceAccount token gardener-resource-manager's token-requestor writes and renews.

The volume holds exactly ``kubeconfig`` and ``token``, so the ``tokenFile`` resolves to the access
Secret's ``token``. Here the same resolution is done from the two Secrets' data, without files: the
result (:class:`TargetConfig`) is a one-context kubeconfig with the token in it, fit for the
official client's ``new_client_from_config_dict``.

A Secret is tenant-controlled input in a seed: whatever it holds must harm only its namespace. So
nothing in it may reach outside it: no file is read (a ``tokenFile`` other than the volume's
``token``, ``client-certificate``, ``certificate-authority`` paths are refused, where a file path
would read the controller's own disk), no program runs (``exec`` and ``auth-provider`` are refused),
sizes are bounded before decoding, YAML anchors and aliases (the "billion laughs") are refused,
and every error (:class:`TargetSecretError`) names the namespace, Secret and key, never a value.
"""

from __future__ import annotations

import base64
import binascii
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import yaml

#: ``v1beta1constants.SecretNameGenericTokenKubeconfig``: the default ``--target-kubeconfig-secret``
GENERIC_TOKEN_KUBECONFIG = "generic-token-kubeconfig"
#: ``v1beta1constants.AnnotationKeyGenericTokenKubeconfigSecretName``, on the namespace's ``Cluster``
GENERIC_TOKEN_KUBECONFIG_ANNOTATION = "generic-token-kubeconfig.secret.gardener.cloud/name"
#: ``gardenerutils.SecretNamePrefixShootAccess`` + ``DeploymentNameMachineControllerManager``
SHOOT_ACCESS_SECRET = "shoot-access-machine-controller-manager"
#: ``secrets.DataKeyKubeconfig`` and ``resourcesv1alpha1.DataKeyToken``: the keys (and file names)
KUBECONFIG_KEY = "kubeconfig"
TOKEN_KEY = "token"
#: ``gardenerutils.VolumeMountPathGenericKubeconfig``: where the volume is mounted
GENERIC_KUBECONFIG_DIR = "/var/run/secrets/gardener.cloud/shoot/generic-kubeconfig"
#: ``gardenerutils.PathShootToken``
SHOOT_TOKEN_PATH = f"{GENERIC_KUBECONFIG_DIR}/{TOKEN_KEY}"

#: a generic kubeconfig is a few kilobytes (its CA bundle holds two CAs while one rotates): ten times
#: that; a Secret may hold 1 MiB (``MaxSecretSize``), but that much YAML takes seconds of CPU to parse
MAX_KUBECONFIG_BYTES = 64 << 10
#: a bearer token is a JWT of a few kilobytes; far more is not one
MAX_TOKEN_BYTES = 64 << 10
#: a kubeconfig nests four or five levels; extensions may add a few
MAX_DEPTH = 32
#: user keys that name a file on the reader's disk (``tokenFile`` aside: see ``token_file_key``), or a
#: program to run
_USER_FILE_FIELDS = ("client-certificate", "client-key")
_PROGRAM_FIELDS = ("exec", "auth-provider")
#: what a cluster entry may carry into the result (anything else is left behind)
_CLUSTER_FIELDS = ("server", "certificate-authority-data", "insecure-skip-tls-verify", "tls-server-name")


class TargetSecretError(ValueError):
    """A namespace's target Secret is missing, malformed or unusable. The message says which
    Secret, which key and what is wrong, never what it holds."""


@dataclass(frozen=True)
class SecretRef:
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"Secret {self.namespace}/{self.name}"


@dataclass(frozen=True)
class TargetConfig:
    """A namespace's target cluster, resolved: ``kubeconfig`` is one cluster, one user (with the
    token inline) and one current context; ``versions`` are the resourceVersions of the Secrets it
    came from (a change in either means resolving again); ``source`` says where it came from, for
    messages and ``mcm-tasks admin`` (no secret material in it, in ``repr`` neither)."""

    namespace: str
    server: str
    source: str
    versions: tuple[str, ...]
    kubeconfig: dict[str, Any] = field(repr=False, compare=False)
    token: str = field(default="", repr=False)


# --- names ---------------------------------------------------------------------------------------


def kubeconfig_secret_name(configured: str, cluster_annotations: Mapping[str, Any] | None) -> str:
    """The generic kubeconfig Secret's name: the flag's, when set; else the namespace's ``Cluster``
    annotation (the hash-suffixed name gardenlet generated), else the static name, as upstream's
    ``GenericTokenKubeconfigSecretNameFromCluster``."""
    if configured:
        return configured
    named = (cluster_annotations or {}).get(GENERIC_TOKEN_KUBECONFIG_ANNOTATION)
    return named if isinstance(named, str) and named else GENERIC_TOKEN_KUBECONFIG


# --- reading one value ---------------------------------------------------------------------------


def secret_value(secret: Mapping[str, Any] | None, key: str, ref: SecretRef, limit: int) -> bytes:
    """``data[key]`` of a Secret as read from the API (base64), decoded and bounded."""
    if secret is None:
        raise TargetSecretError(f"{ref} does not exist")
    if not isinstance(secret, Mapping):
        raise TargetSecretError(f"{ref} is not an object")
    data = secret.get("data")
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise TargetSecretError(f"{ref}: data is not a mapping")
    encoded = data.get(key)
    if encoded is None or encoded == "":
        raise TargetSecretError(f"{ref} has no {key!r} key")
    if not isinstance(encoded, str):
        raise TargetSecretError(f"{ref}: {key!r} is not a string")
    if len(encoded) > (limit + 2) // 3 * 4 + 4:
        raise TargetSecretError(f"{ref}: {key!r} is larger than {limit} bytes")
    try:
        value = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise TargetSecretError(f"{ref}: {key!r} is not base64") from None
    if len(value) > limit:
        raise TargetSecretError(f"{ref}: {key!r} is larger than {limit} bytes")
    return value


def token_of(raw: bytes, ref: SecretRef) -> str:
    """A bearer token from a Secret's bytes: UTF-8 text, one line, surrounding whitespace dropped
    (client-go trims a token file's), not empty."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise TargetSecretError(f"{ref}: {TOKEN_KEY!r} is not UTF-8 text") from None
    token = text.strip()
    if not token:
        raise TargetSecretError(f"{ref}: {TOKEN_KEY!r} is empty (not issued yet?)")
    if len(token) > MAX_TOKEN_BYTES or any(c in token for c in "\r\n\0") or not token.isprintable():
        raise TargetSecretError(f"{ref}: {TOKEN_KEY!r} is not a bearer token")
    return token


#: libyaml's safe loader when PyYAML was built with it: the pure-Python one took about 20 ms for a
#: kubeconfig with its CA inline, once per namespace per minute in every process (seed mode)
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _check_shape(text: str, ref: SecretRef) -> None:
    """Walk the YAML's events (the parser is iterative, the composer recursive) before building the
    document: refuse anchors and aliases (a kubeconfig needs none, and aliases let a few bytes expand
    into gigabytes, the "billion laughs") and nesting deeper than a kubeconfig's few levels (the
    composer would recurse once a level, slowly, until Python's recursion limit)."""
    depth = 0
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise TargetSecretError(f"{ref}: {KUBECONFIG_KEY!r} has YAML anchors or aliases")
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise TargetSecretError(f"{ref}: {KUBECONFIG_KEY!r} is nested too deeply")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def parse_kubeconfig(raw: bytes, ref: SecretRef) -> dict[str, Any]:
    """The kubeconfig document in a Secret's ``kubeconfig`` key (YAML or JSON), as a mapping."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise TargetSecretError(f"{ref}: {KUBECONFIG_KEY!r} is not UTF-8 text") from None
    try:
        _check_shape(text, ref)
        doc = yaml.load(text, Loader=_LOADER)  # a safe loader, libyaml's when built
    except yaml.YAMLError as err:
        if "nesting depth" in str(getattr(err, "problem", "")):  # libyaml's own limit came first
            raise TargetSecretError(f"{ref}: {KUBECONFIG_KEY!r} is nested too deeply") from None
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise TargetSecretError(f"{ref}: {KUBECONFIG_KEY!r} is not valid YAML{where}") from None
    if not isinstance(doc, dict):
        raise TargetSecretError(f"{ref}: {KUBECONFIG_KEY!r} is not a kubeconfig (not a mapping)")
    return doc


# --- the kubeconfig ------------------------------------------------------------------------------


def _named(doc: Mapping[str, Any], section: str, name: Any, ref: SecretRef) -> dict[str, Any]:
    """The ``section`` entry (``clusters``, ``users``, ``contexts``) called ``name``: its inner mapping."""
    entries = doc.get(section)
    if entries is None:
        entries = []
    if not isinstance(entries, list):
        raise TargetSecretError(f"{ref}: kubeconfig {section} is not a list")
    inner_key = section[:-1]
    for entry in entries:
        if isinstance(entry, dict) and entry.get("name") == name:
            inner = entry.get(inner_key)
            if inner is None:
                return {}
            if not isinstance(inner, dict):
                raise TargetSecretError(f"{ref}: kubeconfig {inner_key} {_shown(name)} is not a mapping")
            return inner
    raise TargetSecretError(f"{ref}: kubeconfig has no {inner_key} {_shown(name)}")


def _shown(name: Any) -> str:
    """A kubeconfig entry's name for a message: names are not secret, but a hostile one is cut short."""
    return repr(name)[:80] if isinstance(name, str) else f"of type {type(name).__name__}"


def current(doc: Mapping[str, Any], ref: SecretRef) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The current context's name, cluster and user."""
    context_name = doc.get("current-context")
    if not isinstance(context_name, str) or not context_name:
        raise TargetSecretError(f"{ref}: kubeconfig has no current-context")
    context = _named(doc, "contexts", context_name, ref)
    cluster = _named(doc, "clusters", context.get("cluster"), ref)
    user_name = context.get("user")
    user = _named(doc, "users", user_name, ref) if user_name else {}
    return context_name, cluster, user


def check_server(cluster: Mapping[str, Any], ref: SecretRef) -> str:
    server = cluster.get("server")
    if not isinstance(server, str) or not server:
        raise TargetSecretError(f"{ref}: kubeconfig cluster has no server")
    try:
        parts = urlsplit(server)
    except ValueError:
        raise TargetSecretError(f"{ref}: kubeconfig server is not a URL") from None
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise TargetSecretError(f"{ref}: kubeconfig server is not an http(s) URL")
    ca = cluster.get("certificate-authority-data")
    if ca is not None:
        if not isinstance(ca, str):
            raise TargetSecretError(f"{ref}: kubeconfig certificate-authority-data is not a string")
        try:
            base64.b64decode(ca, validate=True)
        except (binascii.Error, ValueError):
            raise TargetSecretError(f"{ref}: kubeconfig certificate-authority-data is not base64") from None
    return server


def token_file_key(token_file: Any, ref: SecretRef) -> str:
    """The key of the token Secret a ``tokenFile`` reads: the generic kubeconfig volume holds only
    ``token`` (beside the kubeconfig itself), so a ``tokenFile`` is either that file (by its mounted
    path, or relative to the kubeconfig's folder, as client-go resolves relative paths) or a file
    that is not there."""
    if not isinstance(token_file, str) or not token_file:
        raise TargetSecretError(f"{ref}: kubeconfig tokenFile is not a path")
    path = posixpath.normpath(posixpath.join(GENERIC_KUBECONFIG_DIR, token_file))
    if path == SHOOT_TOKEN_PATH:
        return TOKEN_KEY
    raise TargetSecretError(
        f"{ref}: kubeconfig tokenFile {_shown(token_file)} is not in the generic kubeconfig volume "
        f"(only {SHOOT_TOKEN_PATH} is)"
    )


@dataclass(frozen=True)
class Auth:
    """How the current user authenticates: an inline token, or the token Secret's key."""

    token: str = field(default="", repr=False)
    token_key: str = ""
    client_certificate_data: str = field(default="", repr=False)
    client_key_data: str = field(default="", repr=False)


def user_auth(user: Mapping[str, Any], ref: SecretRef) -> Auth:
    """The current user's credential, refusing what would read a file or run a program."""
    for key in _PROGRAM_FIELDS:
        if user.get(key) is not None:
            raise TargetSecretError(f"{ref}: kubeconfig user {key} is not allowed (it would run a program)")
    for key in _USER_FILE_FIELDS:
        if user.get(key) is not None:
            raise TargetSecretError(f"{ref}: kubeconfig user {key} is not allowed (it would read a file)")
    token = user.get("token")
    if token is not None and token != "":
        if not isinstance(token, str):
            raise TargetSecretError(f"{ref}: kubeconfig user token is not a string")
        return Auth(token=token_of(token.encode(), ref))
    if user.get("tokenFile") is not None:
        return Auth(token_key=token_file_key(user.get("tokenFile"), ref))
    cert, cert_key = user.get("client-certificate-data"), user.get("client-key-data")
    if isinstance(cert, str) and cert and isinstance(cert_key, str) and cert_key:
        return Auth(client_certificate_data=cert, client_key_data=cert_key)
    raise TargetSecretError(f"{ref}: kubeconfig user has no token, tokenFile or client certificate")


# --- the whole resolution ------------------------------------------------------------------------


def resolve(
    namespace: str,
    kubeconfig_secret: Mapping[str, Any] | None,
    token_secret: Mapping[str, Any] | None,
    kubeconfig_ref: SecretRef,
    token_ref: SecretRef,
) -> TargetConfig:
    """A namespace's target cluster from its generic kubeconfig Secret and (when the kubeconfig's
    user has a ``tokenFile``) its shoot access Secret, or :class:`TargetSecretError`."""
    doc = parse_kubeconfig(
        secret_value(kubeconfig_secret, KUBECONFIG_KEY, kubeconfig_ref, MAX_KUBECONFIG_BYTES), kubeconfig_ref
    )
    context_name, cluster, user = current(doc, kubeconfig_ref)
    if cluster.get("certificate-authority") is not None:
        raise TargetSecretError(
            f"{kubeconfig_ref}: kubeconfig cluster certificate-authority is not allowed (a file to read)"
        )
    server = check_server(cluster, kubeconfig_ref)
    auth = user_auth(user, kubeconfig_ref)
    versions = [_version(kubeconfig_secret)]
    source = f"{kubeconfig_ref} key {KUBECONFIG_KEY!r}"
    token = auth.token
    if auth.token_key:
        token = token_of(secret_value(token_secret, auth.token_key, token_ref, MAX_TOKEN_BYTES), token_ref)
        versions.append(_version(token_secret))
        source += f", tokenFile from {token_ref} key {auth.token_key!r}"
    user_out: dict[str, Any] = (
        {"token": token}
        if token
        else {
            "client-certificate-data": auth.client_certificate_data,
            "client-key-data": auth.client_key_data,
        }
    )
    cluster_out = {k: cluster[k] for k in _CLUSTER_FIELDS if cluster.get(k) is not None}
    name = f"{namespace}-target"
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster_out}],
        "users": [{"name": name, "user": user_out}],
        "contexts": [{"name": context_name, "context": {"cluster": name, "user": name}}],
        "current-context": context_name,
    }
    return TargetConfig(namespace, server, source, tuple(versions), kubeconfig, token)


def unchanged_versions(
    kubeconfig: Mapping[str, Any] | None, token: Mapping[str, Any] | None
) -> tuple[str, ...]:
    """The versions ``resolve`` would give these Secrets (the token's last, when it is used), for
    comparing with a resolved target's ``versions`` without resolving. A missing Secret never
    compares equal."""
    if kubeconfig is None:
        return ("",)
    return (_version(kubeconfig), _version(token))


def _version(secret: Mapping[str, Any] | None) -> str:
    meta = (secret or {}).get("metadata")
    rv = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
    return rv if isinstance(rv, str) else ""
