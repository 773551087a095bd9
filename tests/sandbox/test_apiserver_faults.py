"""Fault injection: 503s, latency, hangs and cut watches, via the admin endpoint and the CLI verb."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request
from typing import Any

import pytest
import urllib3
from kubernetes import client

from mcm_sandbox.procs import wait_until

pytestmark = pytest.mark.integration


def _add(url: str, rule: dict[str, Any]) -> str:
    req = urllib.request.Request(
        url + "/sandbox/faults",
        data=json.dumps(rule).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=5) as resp:
        return str(json.loads(resp.read())["id"])


def _clear(url: str) -> None:
    urllib.request.urlopen(
        urllib.request.Request(url + "/sandbox/faults", method="DELETE"), timeout=5
    ).close()


def _rules(url: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(url + "/sandbox/faults", timeout=5) as resp:
        items: list[dict[str, Any]] = json.loads(resp.read())["items"]
        return items


@pytest.fixture()
def faulty(own_server: Any) -> tuple[str, client.CoreV1Api]:
    server, api = own_server(name="faulty")
    return server.url, client.CoreV1Api(api)


def test_error_rule_matches_verb_and_resource_until_cleared(faulty: tuple[str, client.CoreV1Api]) -> None:
    url, core = faulty
    _add(url, {"action": "error", "verbs": ["list"], "resources": ["pods"]})
    with pytest.raises(client.ApiException) as err:
        core.list_namespaced_pod("default")
    assert err.value.status == 503 and json.loads(err.value.body)["reason"] == "ServiceUnavailable"
    assert core.list_namespaced_config_map("default").items == []  # other resources unaffected
    core.create_namespaced_pod(
        "default", {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    )  # other verbs unaffected
    _add(url, {"action": "error"})  # everything fails now, except the admin endpoint itself
    assert len(_rules(url)) == 2
    _clear(url)
    assert [p.metadata.name for p in core.list_namespaced_pod("default").items] == ["p"]


def test_rules_expire(faulty: tuple[str, client.CoreV1Api]) -> None:
    url, core = faulty
    _add(url, {"action": "error", "status_code": 500, "duration_seconds": 0.5})
    with pytest.raises(client.ApiException) as err:
        core.list_namespace()
    assert err.value.status == 500

    def works() -> bool:
        try:
            core.list_namespace()
            return True
        except client.ApiException:
            return False

    wait_until(works, 5, what="rule expiry")


def test_latency_and_hang(faulty: tuple[str, client.CoreV1Api]) -> None:
    url, core = faulty
    _add(url, {"action": "latency", "latency_ms": 300, "verbs": ["get"], "duration_seconds": 30})
    began = time.monotonic()
    core.read_namespace("default")
    assert time.monotonic() - began >= 0.3
    _clear(url)
    _add(url, {"action": "hang", "verbs": ["get"], "resources": ["namespaces"]})
    with pytest.raises(urllib3.exceptions.MaxRetryError):
        core.read_namespace("default", _request_timeout=0.5)
    _clear(url)
    assert core.read_namespace("default").metadata.name == "default"


def test_cut_watches(faulty: tuple[str, client.CoreV1Api]) -> None:
    url, core = faulty
    resp = core.list_namespaced_config_map("default", watch=True, _preload_content=False)
    outcome: list[str] = []

    def read() -> None:
        try:
            for _ in resp.stream(1024):
                pass
            outcome.append("ended")
        except Exception as exc:
            outcome.append(type(exc).__name__)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    _add(url, {"action": "cut-watches", "resources": ["configmaps"], "duration_seconds": 0.5})
    reader.join(5)
    assert outcome, "the open watch was not cut"
    with pytest.raises(urllib3.exceptions.HTTPError):  # new watches are cut while the rule is active
        list(core.list_namespaced_config_map("default", watch=True, _preload_content=False).stream(1024))
    assert core.list_namespaced_config_map("default").items == []  # plain lists are unaffected


def test_cli_verbs(faulty: tuple[str, client.CoreV1Api]) -> None:
    url, core = faulty
    cli = [sys.executable, "-m", "mcm_tasks.cli", "sandbox", "faults"]
    added = subprocess.run(
        [
            *cli,
            "add",
            "--server",
            url,
            "--action",
            "error",
            "--verbs",
            "list",
            "--resources",
            "secrets",
            "--duration",
            "60",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    rule_id = added.stdout.strip()
    listed = json.loads(
        subprocess.run([*cli, "list", "--server", url], capture_output=True, text=True, check=True).stdout
    )
    assert [r["id"] for r in listed] == [rule_id] and listed[0]["resources"] == ["secrets"]
    with pytest.raises(client.ApiException):
        core.list_namespaced_secret("default")
    subprocess.run([*cli, "clear", "--server", url], check=True, capture_output=True)
    assert _rules(url) == []
    assert core.list_namespaced_secret("default").items == []
