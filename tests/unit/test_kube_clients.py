"""Client construction from the kubeconfig settings, and where the rate limit hooks in."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kubernetes.client import ApiClient, Configuration

from mcm_tasks.kube import clients
from mcm_tasks.kube.ratelimit import RateLimitedRESTClient, install_rate_limit, limiter_of
from mcm_tasks.settings import load_settings


def kubeconfig(tmp_path: Path, server: str = "http://127.0.0.1:1") -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t0ken"}}],
                "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "ctx",
            }
        )
    )
    return path


def test_kubeconfig_path(tmp_path: Path) -> None:
    cfg = clients.load_configuration(str(kubeconfig(tmp_path, "http://10.0.0.1:6443")), "control_kubeconfig")
    assert cfg.host == "http://10.0.0.1:6443"


def test_empty_path_outside_a_pod_names_the_setting() -> None:
    with pytest.raises(clients.ClusterConfigError, match=r"--target-kubeconfig \(MCM_TARGET_KUBECONFIG\)"):
        clients.load_configuration("", "target_kubeconfig", environ={})


def test_empty_path_in_a_pod_means_in_cluster() -> None:
    # KUBERNETES_SERVICE_HOST set but no service-account files here: the in-cluster loader is what fails
    with pytest.raises(clients.ClusterConfigError, match="in-cluster"):
        clients.load_configuration("", "control_kubeconfig", environ={"KUBERNETES_SERVICE_HOST": "10.0.0.1"})


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(clients.ClusterConfigError, match="control-kubeconfig"):
        clients.load_configuration(str(tmp_path / "nope"), "control_kubeconfig")


def test_no_target_mode_and_shared_limit(tmp_path: Path) -> None:
    path = str(kubeconfig(tmp_path))
    s = load_settings(
        {"control_kubeconfig": path, "target_kubeconfig": "none", "redis_url": "redis://127.0.0.1:1/0"}
    )
    built = clients.build_clusters(s)
    try:
        assert built.target is None
        with pytest.raises(clients.ClusterConfigError, match="none"):
            built.require_target()
        limiter = limiter_of(built.control.api)
        assert limiter is not None
        bucket = limiter.limiter
        assert (bucket.rate, bucket.burst, bucket.key) == (20.0, 30, "mcm:ratelimit:kube:control")  # type: ignore[attr-defined]
        assert built.control.core.api_client is built.control.api
        assert built.control.custom.api_client is built.control.api
    finally:
        built.close()


def test_both_clusters_and_no_limit_without_redis(tmp_path: Path) -> None:
    path = str(kubeconfig(tmp_path))
    s = load_settings({"control_kubeconfig": path, "target_kubeconfig": path, "redis_url": ""})
    built = clients.build_clusters(s)
    try:
        assert built.require_target().name == "target"
        assert limiter_of(built.control.api) is None
        assert limiter_of(built.require_target().api) is None
    finally:
        built.close()


class _Refusing:
    """A token source that records its calls and stops the request before it leaves."""

    def __init__(self) -> None:
        self.calls = 0

    def take(self, tokens: int = 1) -> float:
        self.calls += 1
        raise LookupError("no token")


def test_every_request_takes_a_token_before_it_is_sent() -> None:
    api = ApiClient(Configuration(host="http://127.0.0.1:1"))
    source = _Refusing()
    install_rate_limit(api, source)
    assert isinstance(api.rest_client, RateLimitedRESTClient)
    from kubernetes.client import CoreV1Api

    with pytest.raises(LookupError):
        CoreV1Api(api).list_node()
    with pytest.raises(LookupError):
        CoreV1Api(api).list_node(watch=True, _preload_content=False)
    assert source.calls == 2


def test_seed_namespaces_share_one_probe_client_of_the_control_cluster(tmp_path: Path) -> None:
    """Each namespace's control client is its own (a budget of its own) over the process's one
    configuration; the API-server check's probe client goes with the configuration, so the fifty
    namespaces' probes a minute keep one connection warm instead of a TLS handshake each."""
    from mcm_tasks.controllers.safety.apiserver_io import probe_client

    path = str(kubeconfig(tmp_path, "https://10.0.0.1:6443"))
    a = clients.tenant_control(load_settings({"control_kubeconfig": path, "namespace": "shoot--a"}))
    b = clients.tenant_control(load_settings({"control_kubeconfig": path, "namespace": "shoot--b"}))
    target = ApiClient(Configuration(host="https://10.0.0.2:6443"))

    assert a.api is not b.api
    assert probe_client(a.api) is probe_client(b.api)
    assert probe_client(target) is not probe_client(a.api)
    assert probe_client(a.api).configuration.retries is False  # one attempt: the probe is the answer
    assert a.api.configuration.retries is not False


def test_seed_namespaces_take_one_good_answer_of_the_control_server_for_a_few_seconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beat fires every namespace's API-server check of a period together: within a few seconds of
    one namespace's good answer, the others take it instead of fifty GETs that all say the same. A
    namespace's own next check asks again, a failed probe is never shared, and the answer ages."""
    from mcm_tasks.controllers.safety import apiserver_io

    path = str(kubeconfig(tmp_path, "https://10.0.0.4:6443"))
    a = clients.tenant_control(load_settings({"control_kubeconfig": path, "namespace": "shoot--a"}))
    b = clients.tenant_control(load_settings({"control_kubeconfig": path, "namespace": "shoot--b"}))
    c = clients.tenant_control(load_settings({"control_kubeconfig": path, "namespace": "shoot--c"}))
    asked: list[str] = []
    answer = {"up": True}

    def probe(api: ApiClient, res: object, namespace: str, timeout: float) -> bool:
        asked.append(namespace)
        return answer["up"]

    monkeypatch.setattr(apiserver_io, "probe", probe)
    clock = [1000.0]
    monkeypatch.setattr(apiserver_io, "_now", lambda: clock[0])

    assert apiserver_io.probe_control(a.api, "shoot--a", 1.0)
    assert apiserver_io.probe_control(b.api, "shoot--b", 1.0)  # a's answer, just given
    assert asked == ["shoot--a"]
    assert apiserver_io.probe_control(a.api, "shoot--a", 1.0)  # its own answer: asks again
    assert asked == ["shoot--a", "shoot--a"]

    answer["up"] = False
    clock[0] += apiserver_io.CONTROL_ANSWER_SHARED  # aged out
    assert not apiserver_io.probe_control(b.api, "shoot--b", 1.0)
    assert not apiserver_io.probe_control(c.api, "shoot--c", 1.0)  # a failure is not shared
    assert asked == ["shoot--a", "shoot--a", "shoot--b", "shoot--c"]


def test_a_dropped_configuration_takes_its_probe_client_with_it() -> None:
    """A tenant's target is rebuilt (a new configuration) whenever its Secrets rotate: the probe
    client of the old one must not stay for the life of the worker, with its pool and sockets."""
    import gc
    import weakref

    from mcm_tasks.controllers.safety.apiserver_io import probe_client

    api = ApiClient(Configuration(host="https://10.0.0.3:6443"))
    gone = weakref.ref(probe_client(api))
    del api
    gc.collect()
    assert gone() is None
