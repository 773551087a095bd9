"""Loading a cluster's credentials, and keeping them current for every request (``credentials``
decides when; this module reads files, runs exec plugins and applies the result).

``load`` turns a kubeconfig setting into a client ``Configuration``: ``inClusterConfig`` (and an
empty setting inside a pod) is the pod's ServiceAccount, anything else a kubeconfig path. The
official client's kubeconfig loader builds the host and the TLS part (CA, client certificate and
key, inline data turned into files); the user's credential (``token``, ``tokenFile``, ``exec``,
basic auth) is read here, because the official loader reads a ``tokenFile`` once and never again
and swallows a failing exec plugin into a log line and an unauthenticated client.

``ClusterCredentials`` rides on the ``Configuration`` (``CREDENTIALS_ATTR``); the request edge
(``rest.EdgeRESTClient``) asks it before each request (``maybe_reload``: the token file once a
minute, an expired exec credential) and after a 401 (``unauthorized``: read everything again, run
the plugin again, and retry the request once when the credential changed).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
import yaml
from kubernetes.client import Configuration
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.kube_config import KubeConfigLoader
from prometheus_client import Counter

from mcm_tasks.kube.credentials import (
    IN_CLUSTER,
    IN_CLUSTER_ROOT_ENV,
    RELOAD_PERIOD,
    SERVICE_ACCOUNT_DIR,
    UNAUTHORIZED,
    UNAUTHORIZED_DEBOUNCE,
    ClusterConfigError,
    Credential,
    ExecCredential,
    FileStamp,
    changed,
    check_exec_config,
    cluster_of,
    exec_info,
    flag_of,
    parse_exec_output,
    plugin_said,
    reload_due,
    rerun_exec,
)

log = logging.getLogger(__name__)

#: the attribute of a ``Configuration`` that carries its ``ClusterCredentials``
CREDENTIALS_ATTR = "mcm_credentials"
#: an exec plugin that has not answered after this is a failed one (client-go waits forever; a
#: controller that hangs at start-up explains nothing)
EXEC_TIMEOUT = 60.0
#: after a failed reload (a token file caught mid-rewrite, a plugin failing) the next try waits this
RETRY_AFTER_FAILURE = 5.0
#: what a new credential may change of a configuration beyond its Authorization (a new pool then)
TLS_ATTRS = ("host", "ssl_ca_cert", "cert_file", "key_file", "verify_ssl", "tls_server_name")
#: user fields that are credentials: read here, never handed to the official loader
_AUTH_FIELDS = ("token", "tokenFile", "exec", "username", "password")

RELOADS = Counter(
    "mcm_kube_credential_reloads",
    "Kubernetes client credentials read again and found changed (trigger period: the token file or "
    "kubeconfig looked at once a minute; expiry: an exec credential expired), and every re-read "
    "forced by a 401 Unauthorized (trigger unauthorized)",
    ["cluster", "trigger"],
)


#: libyaml's safe loader when PyYAML has it: a kubeconfig with its CA inline is read again every
#: minute by every client (``RELOAD_PERIOD``), and the pure-Python loader took milliseconds for it
YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass
class Loaded:
    configuration: Configuration
    credential: Credential
    exec_result: ExecCredential | None = None


def in_cluster_dir(environ: Mapping[str, str]) -> Path:
    """Where the ServiceAccount's files are: the pod's path, under ``MCM_INCLUSTER_ROOT`` if set."""
    root = environ.get(IN_CLUSTER_ROOT_ENV, "")
    return Path(root + SERVICE_ACCOUNT_DIR) if root else Path(SERVICE_ACCOUNT_DIR)


def stamp(path: str) -> FileStamp:
    try:
        st = os.stat(path)
    except OSError:
        return FileStamp(path, 0, 0, -1)
    return FileStamp(path, st.st_ino, st.st_mtime_ns, st.st_size)


def read_token(path: str, flag: str, what: str) -> str:
    """A bearer token from a file, trimmed as client-go trims it; a missing or empty file is a
    ClusterConfigError naming the flag and the path."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise ClusterConfigError(f"{flag}: {what} {path} does not exist") from None
    except OSError as err:
        raise ClusterConfigError(f"{flag}: cannot read {what} {path}: {err.strerror}") from None
    token = text.strip()
    if not token:
        raise ClusterConfigError(f"{flag}: {what} {path} is empty")
    return token


def load(
    kubeconfig: str,
    setting: str,
    environ: Mapping[str, str] | None = None,
    exec_cached: ExecCredential | None = None,
) -> Loaded:
    """A client configuration and the credential in it, or ClusterConfigError (one line)."""
    env = os.environ if environ is None else environ
    flag = flag_of(setting)
    if kubeconfig == IN_CLUSTER:
        return _load_in_cluster(f"{flag}={IN_CLUSTER}", env)
    if not kubeconfig:
        if not env.get("KUBERNETES_SERVICE_HOST"):
            raise ClusterConfigError(
                f"{flag} is empty, which means in-cluster, but this process is not running in a pod "
                "(KUBERNETES_SERVICE_HOST is not set); give a kubeconfig path"
            )
        return _load_in_cluster(f"{flag} (empty: in-cluster)", env)
    return _load_kubeconfig(kubeconfig, flag, env, exec_cached)


def _load_in_cluster(flag: str, env: Mapping[str, str]) -> Loaded:
    """rest.InClusterConfig: the API server from the service environment, the token and CA from the
    ServiceAccount's mount."""
    directory = in_cluster_dir(env)
    token_path, ca_path = str(directory / "token"), str(directory / "ca.crt")
    host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise ClusterConfigError(
            f"{flag}: not running in a pod (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not "
            f"set; the ServiceAccount token would be {token_path}); give a kubeconfig path"
        )
    token = read_token(token_path, flag, "ServiceAccount token")
    try:
        if not Path(ca_path).read_bytes().strip():
            raise ClusterConfigError(f"{flag}: ServiceAccount CA {ca_path} is empty")
    except OSError as err:
        raise ClusterConfigError(f"{flag}: cannot read ServiceAccount CA {ca_path}: {err.strerror}") from None
    cfg = Configuration()
    cfg.host = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    cfg.ssl_ca_cert = ca_path
    cfg.api_key = {"BearerToken": f"Bearer {token}"}
    credential = Credential(
        cfg.host, f"Bearer {token}", (ca_path, stamp(ca_path)), f"ServiceAccount token {token_path}"
    )
    return Loaded(cfg, credential)


def _current_user(doc: dict[str, Any], path: str, flag: str) -> dict[str, Any]:
    """The ``user`` mapping of the current context (edited in place by the caller)."""
    context_name = doc.get("current-context")
    entries = [c for c in doc.get("contexts") or [] if isinstance(c, dict)]
    contexts = {c.get("name"): c.get("context") or {} for c in entries}
    if not context_name or context_name not in contexts:
        named = f" {context_name!r}" if context_name else ""
        raise ClusterConfigError(f"{flag}: kubeconfig {path} has no current-context{named}")
    user_name = contexts[context_name].get("user")
    for entry in doc.get("users") or []:
        if isinstance(entry, dict) and entry.get("name") == user_name:
            user = entry.get("user")
            if user is None:
                entry["user"] = user = {}
            if not isinstance(user, dict):
                raise ClusterConfigError(f"{flag}: kubeconfig {path}: user {user_name!r} is not a mapping")
            return user
    if user_name:
        raise ClusterConfigError(f"{flag}: kubeconfig {path}: context {context_name!r} names no known user")
    return {}


def _load_kubeconfig(
    path: str, flag: str, env: Mapping[str, str], exec_cached: ExecCredential | None
) -> Loaded:
    try:
        doc = yaml.load(Path(path).read_text(), Loader=YAML_LOADER)  # a safe loader
    except FileNotFoundError:
        raise ClusterConfigError(f"{flag}: kubeconfig {path} does not exist") from None
    except OSError as err:
        raise ClusterConfigError(f"{flag}: cannot read kubeconfig {path}: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise ClusterConfigError(f"{flag}: kubeconfig {path} is not YAML: {_one_line(err)}") from None
    if not isinstance(doc, dict):
        raise ClusterConfigError(f"{flag}: kubeconfig {path} is not a kubeconfig")
    base = os.path.dirname(os.path.abspath(path))
    user = _current_user(doc, path, flag)
    auth = {k: user.pop(k) for k in _AUTH_FIELDS if k in user}
    authorization = None
    source = f"kubeconfig {path}"
    exec_result = None
    if "exec" in auth:
        exec_result = exec_cached or run_exec(auth["exec"], base, flag, path, env)
        source = f"exec plugin {auth['exec'].get('command')!r} of {path}"
        if exec_result.token:
            authorization = f"Bearer {exec_result.token}"
        else:
            user["client-certificate"] = _secret_file(exec_result.client_certificate_data or "")
            user["client-key"] = _secret_file(exec_result.client_key_data or "")
            for key in ("client-certificate-data", "client-key-data"):
                user.pop(key, None)
    elif auth.get("token"):
        authorization = f"Bearer {auth['token']}"
    elif auth.get("tokenFile"):
        token_path = os.path.join(base, os.path.expanduser(str(auth["tokenFile"])))
        authorization = f"Bearer {read_token(token_path, flag, f'tokenFile of {path}:')}"
        source = f"tokenFile {token_path}"
    elif auth.get("username") and auth.get("password"):
        basic = urllib3.util.make_headers(basic_auth=f"{auth['username']}:{auth['password']}")
        authorization = basic["authorization"]
    cfg = Configuration()
    try:
        KubeConfigLoader(config_dict=doc, config_base_path=base).load_and_set(cfg)
    except (ConfigException, OSError, ValueError, TypeError, KeyError) as err:
        raise ClusterConfigError(f"{flag}: cannot load kubeconfig {path}: {_one_line(err)}") from None
    if authorization:
        cfg.api_key = {"BearerToken": authorization}
    tls_files = [f for f in (cfg.ssl_ca_cert, cfg.cert_file, cfg.key_file) if f]
    tls_stamps = tuple(stamp(f) for f in tls_files)
    tls = (cfg.ssl_ca_cert, cfg.cert_file, cfg.key_file, cfg.verify_ssl, cfg.tls_server_name, tls_stamps)
    expires = exec_result.expires if exec_result else None
    credential = Credential(str(cfg.host), authorization, tls, source, expires, exec_result is not None)
    return Loaded(cfg, credential, exec_result)


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())[:300]


_exec_dir: list[str] = []
_exec_dir_lock = threading.Lock()


def _secret_file(data: str) -> str:
    """Certificate or key data from an exec plugin as a private file (the TLS layer reads files),
    named by its content: the same data is the same file, a new one a new file (a pool still using
    the old one keeps it)."""
    with _exec_dir_lock:
        if not _exec_dir:
            directory = tempfile.mkdtemp(prefix="mcm-exec-credentials-")
            import atexit

            atexit.register(shutil.rmtree, directory, ignore_errors=True)
            _exec_dir.append(directory)
    path = os.path.join(_exec_dir[0], hashlib.sha256(data.encode()).hexdigest()[:24] + ".pem")
    if not os.path.exists(path):
        fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(data)
        os.replace(path + ".tmp", path)
    return path


def run_exec(spec: Any, base: str, flag: str, path: str, env: Mapping[str, str]) -> ExecCredential:
    """Run a kubeconfig's exec credential plugin as client-go does (a relative command with a
    directory part is relative to the kubeconfig; ``env`` adds to ours; ``KUBERNETES_EXEC_INFO``
    says non-interactive) and return its credential, or ClusterConfigError naming the plugin."""
    problem = check_exec_config(spec)
    if problem:
        raise ClusterConfigError(f"{flag}: kubeconfig {path}: {problem}")
    command = str(spec["command"])
    if os.sep in command and not os.path.isabs(command):
        command = os.path.join(base, command)
    argv = [command, *(str(a) for a in spec.get("args") or [])]
    child_env = dict(env)
    for item in spec.get("env") or []:
        if isinstance(item, dict) and item.get("name"):
            child_env[str(item["name"])] = str(item.get("value", ""))
    api_version = str(spec["apiVersion"])
    child_env["KUBERNETES_EXEC_INFO"] = exec_info(api_version)
    what = f"exec plugin {spec['command']!r} of {path}"
    try:
        done = subprocess.run(  # the kubeconfig's own command, as kubectl runs it
            argv,
            env=child_env,
            capture_output=True,
            timeout=EXEC_TIMEOUT,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except FileNotFoundError:
        hint = f" ({spec['installHint']})" if spec.get("installHint") else ""
        raise ClusterConfigError(f"{flag}: {what}: command not found{_one_line_hint(hint)}") from None
    except PermissionError:
        raise ClusterConfigError(f"{flag}: {what}: not executable") from None
    except subprocess.TimeoutExpired:
        raise ClusterConfigError(f"{flag}: {what}: no answer after {EXEC_TIMEOUT:g}s") from None
    if done.returncode != 0:
        said = plugin_said(done.stderr)
        said = f": {said}" if said else ""
        raise ClusterConfigError(f"{flag}: {what} failed with exit code {done.returncode}{said}")
    try:
        return parse_exec_output(done.stdout, api_version)
    except ValueError as err:
        raise ClusterConfigError(f"{flag}: {what}: {err}") from None


def _one_line_hint(hint: str) -> str:
    return " ".join(hint.split())


class ClusterCredentials:
    """One client's credentials, kept current: re-read on schedule and after a 401.

    Thread-safe: the informer's watches and a worker's threads share one client. A reload that
    fails keeps the credential in use (a token file caught mid-rewrite is normal) and is tried again
    after ``RETRY_AFTER_FAILURE``.
    """

    def __init__(
        self,
        kubeconfig: str,
        setting: str,
        loaded: Loaded,
        environ: Mapping[str, str] | None = None,
        period: float = RELOAD_PERIOD,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.setting = setting
        self.cluster = cluster_of(setting)
        self.configuration = loaded.configuration
        self.credential = loaded.credential
        self.exec_result = loaded.exec_result
        self.environ = environ
        self.period = period
        #: bumped when the host or the TLS material changed: REST clients build a new pool
        self.generation = 0
        self.loaded_at = time.monotonic()
        self._retry_at = 0.0
        self._unauthorized_at = float("-inf")
        self._failing = False  # the last reload failed (its warning logged)
        self._lock = threading.Lock()

    def __deepcopy__(self, memo: dict[int, Any]) -> ClusterCredentials:
        """A copied configuration (a probe's client without retries) shares its credentials: one
        rotation serves both, and a lock cannot be copied anyway."""
        return self

    @property
    def authorization(self) -> str | None:
        return self.credential.authorization

    def apply_tls(self, cfg: Configuration) -> None:
        """Give another configuration carrying these credentials (a copy) the current host and TLS
        material, before its REST client builds a new pool."""
        if cfg is not self.configuration:
            for attr in TLS_ATTRS:
                setattr(cfg, attr, getattr(self.configuration, attr))

    def authorize(self, headers: dict[str, Any]) -> None:
        """Put the current ``Authorization`` into a request's headers (whatever the client's auth
        settings put there a moment before)."""
        for name in [h for h in headers if h.lower() == "authorization"]:
            del headers[name]
        if self.credential.authorization:
            headers["Authorization"] = self.credential.authorization

    def maybe_reload(self) -> None:
        """Before a request: read the credential again when it is due (cheap when it is not)."""
        now = time.monotonic()
        if now < self._retry_at:
            return
        if reload_due(self.credential, self.loaded_at, now, time.time(), self.period) is None:
            return
        with self._lock:
            due = reload_due(self.credential, self.loaded_at, time.monotonic(), time.time(), self.period)
            if due is not None and time.monotonic() >= self._retry_at:
                self._reload(due)

    def unauthorized(self, sent: str | None, generation: int) -> bool:
        """A request with ``sent`` (its Authorization) on a pool of ``generation`` got a 401: read
        everything again (at most once per ``UNAUTHORIZED_DEBOUNCE`` for all requests together)
        and say whether a retry would go out with something new."""
        with self._lock:
            if sent != self.credential.authorization or generation != self.generation:
                return True  # another request already found the new credential
            now = time.monotonic()
            if now - self._unauthorized_at < UNAUTHORIZED_DEBOUNCE:
                return False
            self._unauthorized_at = now
            return self._reload(UNAUTHORIZED)

    def _reload(self, trigger: str) -> bool:
        old = self.credential
        cached = None if rerun_exec(trigger) else self.exec_result
        try:
            new = load(self.kubeconfig, self.setting, self.environ, exec_cached=cached)
        except ClusterConfigError as err:
            self._retry_at = time.monotonic() + RETRY_AFTER_FAILURE
            if trigger == UNAUTHORIZED:
                RELOADS.labels(self.cluster, trigger).inc()
            # once per failing streak: a token file gone for good is retried every few seconds
            report = log.debug if self._failing else log.warning
            report("%s cluster: credentials not re-read (%s), keeping the current ones: %s",
                   self.cluster, trigger, err)  # fmt: skip
            self._failing = True
            return False
        if self._failing:
            log.info("%s cluster: credentials read again from %s", self.cluster, new.credential.source)
            self._failing = False
        self.loaded_at = time.monotonic()
        self._retry_at = 0.0
        auth_changed, tls_changed = changed(old, new.credential)
        self.credential, self.exec_result = new.credential, new.exec_result
        cfg, fresh = self.configuration, new.configuration
        cfg.api_key = dict(fresh.api_key)
        if tls_changed:
            for attr in TLS_ATTRS:
                setattr(cfg, attr, getattr(fresh, attr))
            self.generation += 1
        renewed = auth_changed or tls_changed
        if renewed or trigger == UNAUTHORIZED:
            RELOADS.labels(self.cluster, trigger).inc()
        parts = (("credential", auth_changed), ("TLS client material", tls_changed))
        what = " and ".join(w for w, c in parts if c)
        if trigger == UNAUTHORIZED:
            log.warning(
                "%s cluster answered 401 Unauthorized: re-read %s: %s",
                self.cluster,
                new.credential.source,
                f"new {what}, retrying" if renewed else "unchanged",
            )
        elif renewed:
            log.info("%s cluster: new %s from %s (%s)", self.cluster, what, new.credential.source, trigger)
        return renewed


def load_configuration(
    kubeconfig: str, setting: str, environ: Mapping[str, str] | None = None, period: float = RELOAD_PERIOD
) -> Configuration:
    """A client configuration carrying its ``ClusterCredentials`` (``CREDENTIALS_ATTR``), which the
    request edge keeps current."""
    loaded = load(kubeconfig, setting, environ)
    credentials = ClusterCredentials(kubeconfig, setting, loaded, environ, period)
    setattr(loaded.configuration, CREDENTIALS_ATTR, credentials)
    return loaded.configuration


def credentials_of(configuration: Any) -> ClusterCredentials | None:
    found = getattr(configuration, CREDENTIALS_ATTR, None)
    return found if isinstance(found, ClusterCredentials) else None
