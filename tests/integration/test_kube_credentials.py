"""Credentials that rotate under a running client, against the sandbox API server with RBAC and
TLS (a revoked token gets 401 there, as on a real cluster): Gardener's ``tokenFile`` kubeconfig, the
pod's ServiceAccount token as the kubelet rotates it, an exec credential plugin, and client
certificates replaced on disk (against a TLS server that authenticates them)."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from mcm_sandbox.procs import ApiServer, wait_until
from mcm_tasks.kube import clients, credentials_io, rest
from mcm_tasks.kube.credentials import EXPIRY_LEEWAY
from tests.credentials_support import (
    CertificateAuthority,
    ProjectedServiceAccount,
    bound_token,
    client_cert_kubeconfig,
    client_cert_server,
    exec_kubeconfig,
    generic_kubeconfig,
    reloads,
    replace_client_cert,
    revoke,
    server_and_ca,
    service_account_with,
    write_atomically,
)
from tests.sandbox.apiserver_support import unique

pytestmark = pytest.mark.integration

NS = "default"
SA = "rotating"
CONFIGMAPS = f"/api/v1/namespaces/{NS}/configmaps"
READ_CONFIGMAPS = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    server = ApiServer(tmp_path_factory.mktemp("credentials"), extra_args=["--authorization-mode", "RBAC"])
    server.start()
    service_account_with(server.kubeconfig, NS, SA, READ_CONFIGMAPS)
    yield server
    server.stop()


def token(sandbox: ApiServer) -> tuple[str, str]:
    """A fresh token of the test's ServiceAccount and the Secret that revokes it."""
    secret = unique("tok")
    return bound_token(sandbox.kubeconfig, NS, SA, secret), secret


def test_a_rotated_token_file_is_read_again_at_once_on_a_401(
    sandbox: ApiServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Gardener's token-requestor rewrites the generic kubeconfig's token file and the old token
    dies: the next request meets a 401, the file is read again and the request retried once, and
    the reload is counted and logged once, for the typed API as for our own requests."""
    server, ca = server_and_ca(sandbox.kubeconfig)
    first, first_secret = token(sandbox)
    (tmp_path / "token").write_text(first + "\n")
    kubeconfig = generic_kubeconfig(tmp_path / "kubeconfig", server, ca)
    api = client.ApiClient(clients.load_configuration(str(kubeconfig), "target_kubeconfig"))
    try:
        assert rest.request(api, "GET", CONFIGMAPS)["kind"] == "ConfigMapList"
        second, _ = token(sandbox)
        write_atomically(tmp_path / "token", second)
        revoke(sandbox.kubeconfig, NS, first_secret)
        before = reloads("target", "unauthorized")
        with caplog.at_level(logging.WARNING, logger="mcm_tasks.kube.credentials_io"):
            assert rest.request(api, "GET", CONFIGMAPS)["kind"] == "ConfigMapList"
            for _ in range(3):
                client.CoreV1Api(api).list_namespaced_config_map(NS)
        assert reloads("target", "unauthorized") == before + 1
        warnings = [r.getMessage() for r in caplog.records if "401" in r.getMessage()]
        assert len(warnings) == 1, warnings
        assert (
            str(tmp_path / "token") in warnings[0] and second not in warnings[0] and first not in warnings[0]
        )
    finally:
        api.close()


def test_a_token_that_stays_refused_is_not_retried_forever(sandbox: ApiServer, tmp_path: Path) -> None:
    """A revoked token nobody replaced: one re-read, no retry (the credential did not change), and
    the caller gets the 401."""
    server, ca = server_and_ca(sandbox.kubeconfig)
    first, first_secret = token(sandbox)
    (tmp_path / "token").write_text(first)
    api = client.ApiClient(
        clients.load_configuration(
            str(generic_kubeconfig(tmp_path / "kubeconfig", server, ca)), "target_kubeconfig"
        )
    )
    try:
        revoke(sandbox.kubeconfig, NS, first_secret)
        with pytest.raises(ApiException) as err:
            rest.request(api, "GET", CONFIGMAPS)
        assert err.value.status == 401
    finally:
        api.close()


def test_a_token_file_is_read_again_each_period(sandbox: ApiServer, tmp_path: Path) -> None:
    """Without a 401 (the old token still valid), a rewritten token file is used from the first
    request after the period (client-go's minute; compressed here): the old token can then be
    revoked without a single refused request."""
    server, ca = server_and_ca(sandbox.kubeconfig)
    first, first_secret = token(sandbox)
    (tmp_path / "token").write_text(first)
    kubeconfig = generic_kubeconfig(tmp_path / "kubeconfig", server, ca)
    cfg = credentials_io.load_configuration(str(kubeconfig), "target_kubeconfig", period=0.5)
    api = client.ApiClient(cfg)
    try:
        rest.request(api, "GET", CONFIGMAPS)
        second, _ = token(sandbox)
        write_atomically(tmp_path / "token", second)
        refused, renewed = reloads("target", "unauthorized"), reloads("target", "period")
        time.sleep(0.6)  # the period itself is what is under test
        rest.request(api, "GET", CONFIGMAPS)
        credentials = credentials_io.credentials_of(cfg)
        assert credentials is not None and credentials.authorization == f"Bearer {second}"
        revoke(sandbox.kubeconfig, NS, first_secret)
        rest.request(api, "GET", CONFIGMAPS)
        assert reloads("target", "unauthorized") == refused
        assert reloads("target", "period") == renewed + 1
    finally:
        api.close()


def test_the_in_cluster_token_is_read_again_after_the_kubelet_rotates_it(
    sandbox: ApiServer, tmp_path: Path
) -> None:
    """``inClusterConfig``: the ServiceAccount's files as a pod sees them (``MCM_INCLUSTER_ROOT``
    points the loader at this test's copy), rotated as the kubelet rotates a projected token."""
    server, ca = server_and_ca(sandbox.kubeconfig)
    mount = ProjectedServiceAccount(tmp_path / "pod", NS, ca)
    first, first_secret = token(sandbox)
    mount.write(first)
    cfg = clients.load_configuration("inClusterConfig", "control_kubeconfig", environ=mount.environ(server))
    assert cfg.host == server and cfg.ssl_ca_cert == str(mount.directory / "ca.crt")
    api = client.ApiClient(cfg)
    try:
        assert rest.request(api, "GET", CONFIGMAPS)["kind"] == "ConfigMapList"
        second, _ = token(sandbox)
        mount.write(second)
        revoke(sandbox.kubeconfig, NS, first_secret)
        before = reloads("control", "unauthorized")
        assert rest.request(api, "GET", CONFIGMAPS)["kind"] == "ConfigMapList"
        assert reloads("control", "unauthorized") == before + 1
    finally:
        api.close()


def runs(counter: Path) -> int:
    return len(counter.read_text())


def test_an_exec_plugin_runs_again_when_its_credential_expires(sandbox: ApiServer, tmp_path: Path) -> None:
    server, ca = server_and_ca(sandbox.kubeconfig)
    lifetime = EXPIRY_LEEWAY + 3  # renewed some 3 s after it is handed out
    kubeconfig, token_file, counter = exec_kubeconfig(tmp_path, server, ca, lifetime)
    token_file.write_text(token(sandbox)[0])
    api = client.ApiClient(clients.load_configuration(str(kubeconfig), "control_kubeconfig"))
    try:
        rest.request(api, "GET", CONFIGMAPS)
        rest.request(api, "GET", CONFIGMAPS)
        assert runs(counter) == 1  # one run serves every request while the credential is valid
        before = reloads("control", "expiry")
        second = token(sandbox)[0]
        write_atomically(token_file, second)

        def renewed() -> bool:
            rest.request(api, "GET", CONFIGMAPS)
            return runs(counter) == 2

        wait_until(renewed, 15, interval=0.5, what="the plugin run again at its credential's expiry")
        assert reloads("control", "expiry") == before + 1
    finally:
        api.close()


def test_an_exec_plugin_runs_again_after_a_401(sandbox: ApiServer, tmp_path: Path) -> None:
    server, ca = server_and_ca(sandbox.kubeconfig)
    kubeconfig, token_file, counter = exec_kubeconfig(tmp_path, server, ca, 3600)
    first, first_secret = token(sandbox)
    token_file.write_text(first)
    api = client.ApiClient(clients.load_configuration(str(kubeconfig), "control_kubeconfig"))
    try:
        rest.request(api, "GET", CONFIGMAPS)
        assert runs(counter) == 1
        write_atomically(token_file, token(sandbox)[0])
        revoke(sandbox.kubeconfig, NS, first_secret)
        before = reloads("control", "unauthorized")
        assert rest.request(api, "GET", CONFIGMAPS)["kind"] == "ConfigMapList"
        assert runs(counter) == 2 and reloads("control", "unauthorized") == before + 1
    finally:
        api.close()


def test_a_failing_exec_plugin_names_the_flag_the_kubeconfig_and_the_plugin(
    sandbox: ApiServer, tmp_path: Path
) -> None:
    server, ca = server_and_ca(sandbox.kubeconfig)
    kubeconfig, _, _ = exec_kubeconfig(tmp_path, server, ca, 600, env={"MCM_TEST_PLUGIN_FAIL": "1"})
    with pytest.raises(clients.ClusterConfigError) as err:
        clients.load_configuration(str(kubeconfig), "target_kubeconfig")
    assert str(err.value) == (
        f"--target-kubeconfig (MCM_TARGET_KUBECONFIG): exec plugin './bin/token-plugin' of {kubeconfig} "
        "failed with exit code 3: plugin: cannot reach the identity provider"
    )


def test_replaced_client_certificates_are_picked_up(tmp_path: Path) -> None:
    """Certificate and key files replaced on disk: used from the next period on without a single
    refused request, and at once when the server refuses the old one (401)."""
    authority = CertificateAuthority()
    with client_cert_server(tmp_path / "server", authority) as server:
        server.allowed = {"first"}
        kubeconfig = client_cert_kubeconfig(tmp_path / "kc", server, *authority.issue("first"))
        cfg = credentials_io.load_configuration(str(kubeconfig), "control_kubeconfig", period=2.0)
        api = client.ApiClient(cfg)
        try:
            answer: dict[str, Any] = rest.request(api, "GET", "/whoami")
            assert answer["message"] == "first"

            # on schedule: both names valid, the new certificate is used after the period
            server.allowed = {"first", "second"}
            replace_client_cert(tmp_path / "kc", *authority.issue("second"))
            time.sleep(2.1)  # the period itself is what is under test
            assert rest.request(api, "GET", "/whoami")["message"] == "second"

            # on a 401: the server stops accepting "second" as "third" replaces it
            replace_client_cert(tmp_path / "kc", *authority.issue("third"))
            server.allowed = {"third"}
            before = reloads("control", "unauthorized")
            assert rest.request(api, "GET", "/whoami")["message"] == "third"
            assert reloads("control", "unauthorized") == before + 1
            assert server.seen[-2:] == ["second", "third"]
        finally:
            api.close()


def bad_control_kubeconfig(case: str, tmp_path: Path) -> tuple[str, str]:
    """A --control-kubeconfig for each kind of bad input, and what its error line must say."""
    server = "https://127.0.0.1:1"
    if case == "in-cluster outside a pod":
        return (
            "inClusterConfig",
            "--control-kubeconfig (MCM_CONTROL_KUBECONFIG)=inClusterConfig: not running in a pod",
        )
    if case == "missing tokenFile":
        kubeconfig = generic_kubeconfig(tmp_path / "missing" / "kubeconfig", server, b"")
        return str(kubeconfig), f"{tmp_path / 'missing' / 'token'} does not exist"
    if case == "empty tokenFile":
        kubeconfig = generic_kubeconfig(tmp_path / "empty" / "kubeconfig", server, b"")
        (tmp_path / "empty" / "token").write_text("")
        return str(kubeconfig), f"{tmp_path / 'empty' / 'token'} is empty"
    kubeconfig, _, _ = exec_kubeconfig(tmp_path / "exec", server, b"", 600, {"MCM_TEST_PLUGIN_FAIL": "1"})
    return str(kubeconfig), f"exec plugin './bin/token-plugin' of {kubeconfig} failed with exit code 3"


@pytest.mark.parametrize("command", ["informer", "worker"])
@pytest.mark.parametrize(
    "case", ["in-cluster outside a pod", "missing tokenFile", "empty tokenFile", "exec fails"]
)
def test_bad_credentials_stop_a_command_with_one_line(command: str, case: str, tmp_path: Path) -> None:
    """Bad credential input at start: one line naming the flag and the path, exit 2, no traceback."""
    import os
    import subprocess
    import sys

    from mcm_sandbox.apiserver.kubeconfig import write_kubeconfig

    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_", "MCM_", "PROMETHEUS_"))}
    target = tmp_path / "target-kubeconfig"
    write_kubeconfig(target, "http://127.0.0.1:1", "t0ken")
    control, expected = bad_control_kubeconfig(case, tmp_path)
    argv = [f"--control-kubeconfig={control}", f"--target-kubeconfig={target}"]
    done = subprocess.run(
        [sys.executable, "-m", "mcm_tasks.cli", command, *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("Error: --control-kubeconfig (MCM_CONTROL_KUBECONFIG)"), lines[0]
    assert expected in lines[0], lines[0]


def test_a_copied_configuration_shares_the_rotating_credentials(sandbox: ApiServer, tmp_path: Path) -> None:
    """The API-server probe copies a client's configuration (``copy.deepcopy``) to drop retries:
    the copy keeps working across a rotation, with the same credentials."""
    import copy

    server, ca = server_and_ca(sandbox.kubeconfig)
    first, first_secret = token(sandbox)
    (tmp_path / "token").write_text(first)
    cfg = clients.load_configuration(
        str(generic_kubeconfig(tmp_path / "kubeconfig", server, ca)), "target_kubeconfig"
    )
    copied = copy.deepcopy(cfg)
    assert credentials_io.credentials_of(copied) is credentials_io.credentials_of(cfg)
    api = client.ApiClient(copied)
    try:
        rest.request(api, "GET", CONFIGMAPS)
        write_atomically(tmp_path / "token", token(sandbox)[0])
        revoke(sandbox.kubeconfig, NS, first_secret)
        assert rest.request(api, "GET", CONFIGMAPS)["kind"] == "ConfigMapList"
    finally:
        api.close()


def test_a_kubeconfig_replaced_on_disk_is_read_again(
    sandbox: ApiServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A kubeconfig with an inline token, replaced by one with a new token (a Secret mount
    updated): used after the period; a reload that fails meanwhile (the file gone for a moment)
    keeps the current credential and warns once."""
    import yaml

    server, ca = server_and_ca(sandbox.kubeconfig)
    first, first_secret = token(sandbox)
    kubeconfig = generic_kubeconfig(tmp_path / "kubeconfig", server, ca)
    doc = yaml.safe_load(kubeconfig.read_text())
    doc["users"][0]["user"] = {"token": first}
    kubeconfig.write_text(yaml.safe_dump(doc))
    cfg = credentials_io.load_configuration(str(kubeconfig), "control_kubeconfig", period=0.3)
    api = client.ApiClient(cfg)
    try:
        rest.request(api, "GET", CONFIGMAPS)
        kubeconfig.unlink()
        with caplog.at_level(logging.WARNING, logger="mcm_tasks.kube.credentials_io"):
            for _ in range(3):
                time.sleep(0.35)  # past the period: each request would reload
                rest.request(api, "GET", CONFIGMAPS)  # the current token still serves
        assert len([r for r in caplog.records if "not re-read" in r.getMessage()]) == 1
        second, _ = token(sandbox)
        doc["users"][0]["user"] = {"token": second}
        write_atomically(kubeconfig, yaml.safe_dump(doc))
        revoke(sandbox.kubeconfig, NS, first_secret)
        wait_until(lambda: rest.request(api, "GET", CONFIGMAPS) is not None, 15, what="the new token in use")
        credentials = credentials_io.credentials_of(cfg)
        assert credentials is not None and credentials.authorization == f"Bearer {second}"
    finally:
        api.close()


CERT_PLUGIN = """#!{python}
import json, os
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
status = {{"clientCertificateData": open({cert!r}).read(), "clientKeyData": open({key!r}).read()}}
print(json.dumps({{"apiVersion": info["apiVersion"], "kind": "ExecCredential", "status": status}}))
"""


def test_an_exec_plugin_that_hands_out_client_certificates(tmp_path: Path) -> None:
    """A plugin answering with ``clientCertificateData``/``clientKeyData`` (no token): the TLS
    client presents them, and after a 401 the plugin's next certificate is used on a new pool."""
    import yaml

    authority = CertificateAuthority()
    with client_cert_server(tmp_path / "server", authority) as server:
        server.allowed = {"first"}
        cert, key = tmp_path / "issued.crt", tmp_path / "issued.key"
        pem, key_pem = authority.issue("first")
        cert.write_bytes(pem)
        key.write_bytes(key_pem)
        plugin = tmp_path / "cert-plugin"
        plugin.write_text(CERT_PLUGIN.format(python=sys.executable, cert=str(cert), key=str(key)))
        plugin.chmod(0o755)
        kubeconfig = client_cert_kubeconfig(tmp_path / "kc", server, pem, key_pem)
        doc = yaml.safe_load(kubeconfig.read_text())
        doc["users"][0]["user"] = {
            "exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": str(plugin)}
        }
        kubeconfig.write_text(yaml.safe_dump(doc))
        api = client.ApiClient(clients.load_configuration(str(kubeconfig), "control_kubeconfig"))
        try:
            assert rest.request(api, "GET", "/whoami")["message"] == "first"
            pem, key_pem = authority.issue("second")
            write_atomically(key, key_pem.decode())
            write_atomically(cert, pem.decode())
            server.allowed = {"second"}
            assert rest.request(api, "GET", "/whoami")["message"] == "second"
        finally:
            api.close()
