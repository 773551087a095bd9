"""A target cluster that serves no ``pods/eviction`` (upstream ``SupportEviction`` answers ""): the drain
deletes pods instead of evicting them, tells so in an Event, and finishes; discovery of the sandbox
with and without the subresource. The sandbox API server runs with ``--no-eviction`` here."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import config

from mcm_sandbox.crds import install_crds
from mcm_sandbox.procs import ApiServer, wait_until
from mcm_tasks.controllers.machine import preserve_io
from mcm_tasks.controllers.machine.drain import cluster_io
from tests.integration.deletion.support import Env, assert_all_gone, drive, index, unique

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """The deletion scenarios' server (``env`` uses it by this name), without the eviction API."""
    api_server = ApiServer(
        tmp_path_factory.mktemp("no-eviction"), name="no-eviction", extra_args=["--no-eviction"]
    ).start()
    api = config.new_client_from_config(config_file=str(api_server.kubeconfig))
    install_crds(api)
    api.close()
    yield api_server
    api_server.stop()


def test_support_eviction_reads_discovery(env: Env, tmp_path_factory: pytest.TempPathFactory) -> None:
    assert cluster_io.support_eviction(env.api) == ""
    with_eviction = ApiServer(tmp_path_factory.mktemp("eviction"), name="eviction").start()
    try:
        api = config.new_client_from_config(config_file=str(with_eviction.kubeconfig))
        assert cluster_io.support_eviction(api) == "policy/v1"
        api.close()
    finally:
        with_eviction.stop()


def test_without_eviction_the_drain_deletes_the_pods(env: Env) -> None:
    """A budget that allows no disruption would hold an eviction for the whole drain timeout (60 s
    here); with no eviction API the pods are deleted at once, as upstream's drain does when
    ``SupportEviction`` finds none, and the drain is a normal (unforced) one."""
    name = unique("noevict")
    env.launch(name)
    env.run_pod("guarded", name, labels={"app": "g"})
    env.run_pod("plain", name)
    env.budget("never", {"app": "g"}, maxUnavailable=0)
    wait_until(lambda: env.running("guarded", "plain"), 15, what="pods running")
    env.delete_machine(name)
    trace = drive(env, name, timeout=20.0)
    assert index(trace, "Drain successful. Initiate VM deletion") < index(trace, "VM deletion was successful")
    assert not any("Force" in d or "Drain failed" in d for d in trace.descriptions)
    assert env.pod("guarded") is None and env.pod("plain") is None
    assert_all_gone(env, name)
    reasons = [reason for reason, _ in env.events(name)]
    assert "EvictionUnsupported" in reasons


def test_without_eviction_a_preserved_node_drain_deletes_the_pods(env: Env) -> None:
    """The preserved node's drain (upstream ``drainPreservedNode``) asks discovery too: without the
    eviction API an Eviction's 404 would read as "pod gone" and the pods would stay."""
    name = unique("noevict-preserved")
    env.launch(name)
    env.run_pod("kept-" + name, name)
    wait_until(lambda: env.running("kept-" + name), 15, what="pod running")
    left, refused = preserve_io.drain_pods(env.api, name)
    assert (left, refused) == (1, [])
    wait_until(lambda: env.pod("kept-" + name) is None, 15, what="the pod deleted")
