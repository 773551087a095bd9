"""A shoot namespace's target cluster from Gardener's Secrets (``mcm_tasks/kube/target_secret.py``
decides, ``target_secret_io.py`` reads): the generic token kubeconfig with its ``tokenFile``
resolved from the shoot access Secret, and a clear error, with no secret material in it, for every
missing, malformed or hostile Secret."""

from __future__ import annotations

import base64
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from mcm_tasks.kube.target_secret import (
    GENERIC_TOKEN_KUBECONFIG,
    GENERIC_TOKEN_KUBECONFIG_ANNOTATION,
    SHOOT_ACCESS_SECRET,
    SHOOT_TOKEN_PATH,
    SecretRef,
    TargetSecretError,
    kubeconfig_secret_name,
    resolve,
)
from mcm_tasks.kube.target_secret_io import read_target
from tests.kube_fake import FakeKube

NS = "shoot--dev--crazy"
TOKEN = "eyJhbGciOiJSUzI1NiJ9.c2VjcmV0LXRva2VuLXZhbHVl.c2lnbmF0dXJl"
CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").decode()
KUBECONFIG_REF = SecretRef(NS, GENERIC_TOKEN_KUBECONFIG)
TOKEN_REF = SecretRef(NS, SHOOT_ACCESS_SECRET)


def generic_kubeconfig(**user: Any) -> dict[str, Any]:
    """As gardener's ``GenerateGenericTokenKubeconfig`` writes it: the shoot API server, its CA and a
    user with only ``tokenFile`` (unless the test says otherwise)."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": NS,
        "clusters": [
            {
                "name": NS,
                "cluster": {"server": "https://api.crazy.dev.example.com", "certificate-authority-data": CA},
            }
        ],
        "contexts": [{"name": NS, "context": {"cluster": NS, "user": NS}}],
        "users": [{"name": NS, "user": user or {"tokenFile": SHOOT_TOKEN_PATH}}],
        "preferences": {},
    }


def secret(name: str, rv: str = "7", **data: bytes | str) -> dict[str, Any]:
    encoded = {
        k: base64.b64encode(v if isinstance(v, bytes) else v.encode()).decode() for k, v in data.items()
    }
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NS, "resourceVersion": rv},
        "type": "Opaque",
        "data": encoded,
    }


def kubeconfig_secret(doc: Any = None, raw: bytes | None = None) -> dict[str, Any]:
    body = (
        raw if raw is not None else yaml.safe_dump(doc if doc is not None else generic_kubeconfig()).encode()
    )
    return secret(GENERIC_TOKEN_KUBECONFIG, "11", kubeconfig=body)


def token_secret(token: bytes | str = TOKEN) -> dict[str, Any]:
    return secret(SHOOT_ACCESS_SECRET, "12", token=token)


def fails(kubeconfig: Any, token: Any = None, *needles: str) -> str:
    """Resolving fails with a message naming ``needles`` and carrying no secret material."""
    with pytest.raises(TargetSecretError) as caught:
        resolve(NS, kubeconfig, token, KUBECONFIG_REF, TOKEN_REF)
    message = str(caught.value)
    for needle in needles:
        assert needle in message, message
    assert TOKEN not in message and CA not in message and "c2VjcmV0" not in message
    assert len(message) < 400, message
    return message


# --- as Gardener lays it out ----------------------------------------------------------------------


def test_the_token_file_is_read_from_the_shoot_access_secret() -> None:
    target = resolve(NS, kubeconfig_secret(), token_secret(TOKEN + "\n"), KUBECONFIG_REF, TOKEN_REF)
    assert target.server == "https://api.crazy.dev.example.com"
    assert target.token == TOKEN
    assert target.versions == ("11", "12")
    assert SHOOT_ACCESS_SECRET in target.source and GENERIC_TOKEN_KUBECONFIG in target.source
    [user] = target.kubeconfig["users"]
    assert user["user"] == {"token": TOKEN}  # no tokenFile left: nothing to read from disk
    [cluster] = target.kubeconfig["clusters"]
    assert cluster["cluster"] == {
        "server": "https://api.crazy.dev.example.com",
        "certificate-authority-data": CA,
    }
    assert TOKEN not in repr(target) and CA not in repr(target)


def test_the_result_is_a_kubeconfig_the_official_client_loads() -> None:
    target = resolve(NS, kubeconfig_secret(), token_secret(), KUBECONFIG_REF, TOKEN_REF)
    api = config.new_client_from_config_dict(target.kubeconfig)
    try:
        assert api.configuration.host == "https://api.crazy.dev.example.com"
        assert api.configuration.api_key == {"BearerToken": f"Bearer {TOKEN}"}
    finally:
        api.close()


def test_a_relative_token_file_is_the_volumes_token_too() -> None:
    doc = generic_kubeconfig(tokenFile="token")
    assert resolve(NS, kubeconfig_secret(doc), token_secret(), KUBECONFIG_REF, TOKEN_REF).token == TOKEN


def test_an_inline_token_needs_no_token_secret() -> None:
    doc = generic_kubeconfig(token=TOKEN)
    target = resolve(NS, kubeconfig_secret(doc), None, KUBECONFIG_REF, TOKEN_REF)
    assert target.token == TOKEN and target.versions == ("11",)


def test_client_certificate_data_is_kept() -> None:
    doc = generic_kubeconfig(**{"client-certificate-data": CA, "client-key-data": CA})
    target = resolve(NS, kubeconfig_secret(doc), None, KUBECONFIG_REF, TOKEN_REF)
    assert target.token == "" and target.kubeconfig["users"][0]["user"]["client-key-data"] == CA


def test_a_json_kubeconfig_is_read_too() -> None:
    import json

    raw = json.dumps(generic_kubeconfig()).encode()
    assert resolve(NS, kubeconfig_secret(raw=raw), token_secret(), KUBECONFIG_REF, TOKEN_REF).token == TOKEN


def test_the_secret_name_comes_from_the_flag_then_the_cluster_annotation_then_gardeners_default() -> None:
    hashed = "generic-token-kubeconfig-8ba2a7b6"
    annotations = {GENERIC_TOKEN_KUBECONFIG_ANNOTATION: hashed}
    assert kubeconfig_secret_name("mine", annotations) == "mine"
    assert kubeconfig_secret_name("", annotations) == hashed
    assert kubeconfig_secret_name("", {}) == GENERIC_TOKEN_KUBECONFIG == "generic-token-kubeconfig"
    assert kubeconfig_secret_name("", None) == GENERIC_TOKEN_KUBECONFIG
    assert kubeconfig_secret_name("", {GENERIC_TOKEN_KUBECONFIG_ANNOTATION: ["not", "a", "name"]}) == (
        GENERIC_TOKEN_KUBECONFIG
    )
    assert SHOOT_ACCESS_SECRET == "shoot-access-machine-controller-manager"
    assert SHOOT_TOKEN_PATH == "/var/run/secrets/gardener.cloud/shoot/generic-kubeconfig/token"


# --- missing and malformed ------------------------------------------------------------------------


def test_a_missing_kubeconfig_secret() -> None:
    fails(None, token_secret(), f"Secret {NS}/{GENERIC_TOKEN_KUBECONFIG} does not exist")


def test_a_missing_token_secret() -> None:
    fails(kubeconfig_secret(), None, f"Secret {NS}/{SHOOT_ACCESS_SECRET} does not exist")


def test_a_token_not_issued_yet() -> None:
    fails(kubeconfig_secret(), secret(SHOOT_ACCESS_SECRET), "has no 'token' key")
    fails(kubeconfig_secret(), token_secret("  \n"), "'token' is empty")


def test_a_secret_without_the_kubeconfig_key() -> None:
    fails(secret(GENERIC_TOKEN_KUBECONFIG, other="x"), token_secret(), "has no 'kubeconfig' key")


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"kubeconfig": "%%% not base64 %%%"}, "'kubeconfig' is not base64"),
        ({"kubeconfig": 12}, "'kubeconfig' is not a string"),
        ("a string", "data is not a mapping"),
        (["a", "list"], "data is not a mapping"),
    ],
)
def test_malformed_secret_data(data: Any, needle: str) -> None:
    fails({"metadata": {"name": GENERIC_TOKEN_KUBECONFIG}, "data": data}, token_secret(), needle)


def test_a_secret_that_is_no_object() -> None:
    fails(["not", "a", "secret"], token_secret(), "is not an object")


def with_cluster(**cluster: Any) -> dict[str, Any]:
    return {**generic_kubeconfig(), "clusters": [{"name": NS, "cluster": cluster}]}


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ("just a string", "not a kubeconfig"),
        (["a", "list"], "not a kubeconfig"),
        ({"kind": "Config"}, "no current-context"),
        ({**generic_kubeconfig(), "current-context": "other"}, "no context 'other'"),
        ({**generic_kubeconfig(), "contexts": "garbage"}, "contexts is not a list"),
        ({**generic_kubeconfig(), "clusters": []}, f"no cluster {NS!r}"),
        (
            {**generic_kubeconfig(), "users": [{"name": NS, "user": "garbage"}]},
            f"user {NS!r} is not a mapping",
        ),
        (with_cluster(), "cluster has no server"),
        (with_cluster(server="ftp://x"), "not an http(s) URL"),
        (with_cluster(server=42), "cluster has no server"),
        (with_cluster(server="https://x", **{"certificate-authority-data": "%%"}), "not base64"),
        (generic_kubeconfig(username="admin"), "no token, tokenFile or client certificate"),
        (generic_kubeconfig(token=["not", "a", "token"]), "token is not a string"),
        (generic_kubeconfig(tokenFile=7), "tokenFile is not a path"),
    ],
)
def test_malformed_kubeconfigs(doc: Any, needle: str) -> None:
    fails(kubeconfig_secret(doc), token_secret(), needle)


@pytest.mark.parametrize(
    "token_file",
    [
        "/var/run/secrets/kubernetes.io/serviceaccount/token",  # the controller's own ServiceAccount
        "/etc/shadow",
        "../../../../etc/passwd",
        f"{SHOOT_TOKEN_PATH}/../../../../../etc/hostname",
        "/var/run/secrets/gardener.cloud/shoot/generic-kubeconfig/kubeconfig",
    ],
)
def test_a_token_file_not_in_the_volume_is_refused(token_file: str) -> None:
    fails(
        kubeconfig_secret(generic_kubeconfig(tokenFile=token_file)),
        token_secret(),
        "not in the generic kubeconfig volume",
    )


# --- hostile ---------------------------------------------------------------------------------------


SHELL = {"apiVersion": "client.authentication.k8s.io/v1", "command": "/bin/sh", "args": ["-c", "id"]}
KEY_FILE = "/etc/ssl/private/key.pem"


@pytest.mark.parametrize(
    ("user", "needle"),
    [
        ({"exec": SHELL}, "exec is not allowed"),
        ({"auth-provider": {"name": "gcp"}}, "auth-provider is not allowed"),
        ({"client-certificate": KEY_FILE, "client-key": KEY_FILE}, "would read a file"),
        ({"token": TOKEN, "exec": {"command": "true"}}, "exec is not allowed"),
    ],
)
def test_a_kubeconfig_that_would_run_a_program_or_read_a_file_is_refused(
    user: dict[str, Any], needle: str
) -> None:
    fails(kubeconfig_secret(generic_kubeconfig(**user)), token_secret(), needle)


def test_a_ca_file_path_is_refused() -> None:
    doc = generic_kubeconfig()
    doc["clusters"][0]["cluster"] = {
        "server": "https://x",
        "certificate-authority": "/etc/kubernetes/pki/ca.crt",
    }
    fails(kubeconfig_secret(doc), token_secret(), "certificate-authority is not allowed")


def test_a_huge_value_is_refused_before_it_is_decoded() -> None:
    huge = {"metadata": {"name": GENERIC_TOKEN_KUBECONFIG}, "data": {"kubeconfig": "A" * (3 << 20)}}
    fails(huge, token_secret(), "larger than")
    flat = "".join(f"k{i}: v\n" for i in range(20_000)).encode()  # valid YAML, just too much of it
    fails(kubeconfig_secret(raw=flat), token_secret(), "'kubeconfig' is larger than 65536 bytes")
    fails(kubeconfig_secret(), token_secret("t" * (100 << 10)), "'token' is larger than")


def test_non_utf8_is_refused() -> None:
    fails(kubeconfig_secret(raw=b"\xff\xfe\x00garbage\x80"), token_secret(), "'kubeconfig' is not UTF-8")
    fails(kubeconfig_secret(), token_secret(b"\xff\xfe" + TOKEN.encode()), "'token' is not UTF-8")


def test_a_token_with_control_characters_is_refused() -> None:
    fails(kubeconfig_secret(), token_secret(TOKEN + "\r\nX-Injected: yes"), "not a bearer token")
    fails(kubeconfig_secret(), token_secret("a\0b"), "not a bearer token")


def test_yaml_aliases_are_refused() -> None:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
    bomb += "".join(
        f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("bcdefgh", "cdefghi", strict=True)
    )
    fails(kubeconfig_secret(raw=bomb.encode()), token_secret(), "anchors or aliases")
    fails(kubeconfig_secret(raw=b"a: &x 1\nb: 2\n"), token_secret(), "anchors or aliases")


def test_deeply_nested_garbage_is_refused_without_recursing() -> None:
    fails(kubeconfig_secret(raw=b"[" * 30_000 + b"]" * 30_000), token_secret(), "nested too deeply")
    nested = "a:\n" + "".join("  " * i + "b:\n" for i in range(1, 150))
    fails(kubeconfig_secret(raw=nested.encode()), token_secret(), "nested too deeply")
    fails(kubeconfig_secret(raw=b"{" * 60_000), token_secret(), "nested too deeply")


def test_python_tags_are_refused() -> None:
    raw = b"!!python/object/apply:os.system ['id']\n"
    fails(kubeconfig_secret(raw=raw), token_secret(), "not valid YAML")


def test_garbage_names_are_cut_short_in_messages() -> None:
    doc = {**generic_kubeconfig(), "current-context": "x" * 10_000}
    message = fails(kubeconfig_secret(doc), token_secret(), "no context")
    assert "x" * 100 not in message


# --- reading them ---------------------------------------------------------------------------------


def test_read_target_reads_both_secrets_from_the_namespace() -> None:
    kube = FakeKube([kubeconfig_secret(), token_secret()])
    target = read_target(kube, NS)
    assert target.token == TOKEN and target.namespace == NS
    reads = [(a.verb, a.resource, a.name) for a in kube.actions]
    assert ("get", "secrets", GENERIC_TOKEN_KUBECONFIG) in reads and (
        "get",
        "secrets",
        SHOOT_ACCESS_SECRET,
    ) in reads
    assert not kube.writes()


def test_read_target_with_a_configured_name_skips_the_cluster() -> None:
    mine = secret("my-kubeconfig", kubeconfig=yaml.safe_dump(generic_kubeconfig()))
    kube = FakeKube([mine, token_secret()])
    assert read_target(kube, NS, kubeconfig_secret="my-kubeconfig").token == TOKEN
    assert all(a.resource == "secrets" for a in kube.actions)


def test_read_target_missing_secret_is_a_clear_error() -> None:
    with pytest.raises(TargetSecretError, match=f"Secret {NS}/{GENERIC_TOKEN_KUBECONFIG} does not exist"):
        read_target(FakeKube([token_secret()]), NS)


def test_read_target_raises_other_api_errors() -> None:
    kube = FakeKube([kubeconfig_secret(), token_secret()])
    kube.unavailable = True
    with pytest.raises(client.ApiException) as caught:
        read_target(kube, NS, kubeconfig_secret=GENERIC_TOKEN_KUBECONFIG)
    assert caught.value.status == 503
