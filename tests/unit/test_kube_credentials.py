"""When credentials are read again (pure decisions), and bad credential input: one line naming the
flag and the path, never the secret."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from mcm_tasks.kube import clients
from mcm_tasks.kube.credentials import (
    EXPIRY,
    PERIOD,
    UNAUTHORIZED,
    Credential,
    parse_exec_output,
    reload_due,
    rerun_exec,
)


def credential(expires: float | None = None) -> Credential:
    return Credential("https://h", "Bearer t", (), "tokenFile /t", expires)


@pytest.mark.parametrize(
    ("expires", "since_load", "wall", "due"),
    [
        (None, 59.0, 1000.0, None),
        (None, 60.0, 1000.0, PERIOD),
        (2000.0, 1.0, 1989.0, None),
        (2000.0, 1.0, 1990.0, EXPIRY),  # renewed EXPIRY_LEEWAY before it expires
        (2000.0, 61.0, 2001.0, EXPIRY),  # expired wins over the period: the plugin must run again
    ],
)
def test_reload_due(expires: float | None, since_load: float, wall: float, due: str | None) -> None:
    assert reload_due(credential(expires), 100.0, 100.0 + since_load, wall, period=60.0) == due


def test_an_exec_plugin_reruns_only_when_its_credential_expired_or_was_refused() -> None:
    assert (rerun_exec(PERIOD), rerun_exec(EXPIRY), rerun_exec(UNAUTHORIZED)) == (False, True, True)


def exec_output(status: dict[str, str], version: str = "client.authentication.k8s.io/v1") -> bytes:
    return json.dumps({"apiVersion": version, "kind": "ExecCredential", "status": status}).encode()


def test_exec_output() -> None:
    got = parse_exec_output(
        exec_output({"token": "s3cret", "expirationTimestamp": "2026-01-01T00:00:00Z"}),
        "client.authentication.k8s.io/v1",
    )
    assert got.token == "s3cret" and got.expires == 1767225600.0


@pytest.mark.parametrize(
    ("stdout", "message"),
    [
        (b"s3cret", "not JSON"),
        (exec_output({"token": "s3cret"}, "client.authentication.k8s.io/v1beta1"), "apiVersion"),
        (exec_output({}), "neither a token"),
        (exec_output({"token": "s3cret", "expirationTimestamp": "tomorrow"}), "RFC 3339"),
    ],
)
def test_bad_exec_output_never_echoes_it(stdout: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message) as err:
        parse_exec_output(stdout, "client.authentication.k8s.io/v1")
    assert "s3cret" not in str(err.value)


def token_file_kubeconfig(tmp_path: Path, token_file: str) -> Path:
    path = tmp_path / "kubeconfig"
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"tokenFile": token_file}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_token_file_that_does_not_exist(tmp_path: Path) -> None:
    kubeconfig = token_file_kubeconfig(tmp_path, "token")
    with pytest.raises(clients.ClusterConfigError) as err:
        clients.load_configuration(str(kubeconfig), "target_kubeconfig")
    assert str(err.value) == (
        "--target-kubeconfig (MCM_TARGET_KUBECONFIG): "
        f"tokenFile of {kubeconfig}: {tmp_path / 'token'} does not exist"
    )


def test_an_empty_token_file(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("\n")
    kubeconfig = token_file_kubeconfig(tmp_path, str(tmp_path / "token"))
    with pytest.raises(
        clients.ClusterConfigError, match=rf"tokenFile of {kubeconfig}: {tmp_path / 'token'} is empty"
    ):
        clients.load_configuration(str(kubeconfig), "target_kubeconfig")


def test_in_cluster_config_outside_a_pod() -> None:
    with pytest.raises(clients.ClusterConfigError) as err:
        clients.load_configuration("inClusterConfig", "control_kubeconfig", environ={})
    assert str(err.value).startswith(
        "--control-kubeconfig (MCM_CONTROL_KUBECONFIG)=inClusterConfig: not running in a pod"
    )
    assert "/var/run/secrets/kubernetes.io/serviceaccount/token" in str(err.value)


def test_in_cluster_config_without_its_token(tmp_path: Path) -> None:
    env = {
        "KUBERNETES_SERVICE_HOST": "10.0.0.1",
        "KUBERNETES_SERVICE_PORT": "443",
        "MCM_INCLUSTER_ROOT": str(tmp_path),
    }
    with pytest.raises(clients.ClusterConfigError) as err:
        clients.load_configuration("inClusterConfig", "control_kubeconfig", environ=env)
    token = tmp_path / "var/run/secrets/kubernetes.io/serviceaccount/token"
    assert str(err.value) == (
        "--control-kubeconfig (MCM_CONTROL_KUBECONFIG)=inClusterConfig: "
        f"ServiceAccount token {token} does not exist"
    )


def test_in_cluster_config(tmp_path: Path) -> None:
    directory = tmp_path / "var/run/secrets/kubernetes.io/serviceaccount"
    directory.mkdir(parents=True)
    (directory / "token").write_text("s3cret\n")
    (directory / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    env = {
        "KUBERNETES_SERVICE_HOST": "fd00::1",
        "KUBERNETES_SERVICE_PORT": "443",
        "MCM_INCLUSTER_ROOT": str(tmp_path),
    }
    cfg = clients.load_configuration("inClusterConfig", "target_kubeconfig", environ=env)
    assert cfg.host == "https://[fd00::1]:443"
    assert cfg.api_key == {"BearerToken": "Bearer s3cret"}
    assert cfg.ssl_ca_cert == str(directory / "ca.crt")


def test_a_worker_checks_the_kubeconfigs_given_and_the_informer_all(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker builds its clients at its first reconcile that needs them (some never do: a
    worker of the safety queue's recorder in a test), so an empty setting outside a pod is left to
    then; the informer needs both at once, and an explicit ``inClusterConfig`` is checked by both."""
    import typer

    from mcm_tasks.cli_support import ALL_CLUSTERS, GIVEN_CLUSTERS, command_settings
    from mcm_tasks.settings import reset_settings

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    try:
        command_settings(["--control-kubeconfig=", "--target-kubeconfig="], clusters=GIVEN_CLUSTERS)
        with pytest.raises(typer.Exit) as stopped:
            command_settings(["--control-kubeconfig=", "--target-kubeconfig="], clusters=ALL_CLUSTERS)
        assert stopped.value.exit_code == 2
        with pytest.raises(typer.Exit):
            command_settings(["--control-kubeconfig=inClusterConfig"], clusters=GIVEN_CLUSTERS)
    finally:
        reset_settings()


def test_what_a_failed_plugin_said_keeps_no_token() -> None:
    from mcm_tasks.kube.credentials import plugin_said

    token = "eyJhbGciOiJSUzI1NiIsImtpZCI6IjEyMyJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl"
    said = plugin_said(f"starting\nerror: token {token} was refused\n\n".encode())
    assert said == "error: token <redacted> was refused"
    assert plugin_said(b"") == ""
