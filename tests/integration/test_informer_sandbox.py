"""The informer against the sandbox API server and a real Redis: the mirror follows the cluster, every
change is routed, and cut watches, expired resourceVersions, an emptied Redis and a periodic resync are
all ridden out without losing an event."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes.client import ApiClient

from mcm_sandbox.crds import install_crds
from mcm_sandbox.procs import ApiServer, RedisServer, wait_until
from mcm_sandbox.testing import fixtures as fx
from mcm_sandbox.testing.informers import InformerThread, sandbox_settings
from mcm_tasks import kinds
from mcm_tasks.cache import layout
from mcm_tasks.cache.listers import Listers, new_listers
from mcm_tasks.cache.reader import CacheReader
from mcm_tasks.kube import ops
from mcm_tasks.kube import resources as kres
from mcm_tasks.probes import PROGRESS
from tests.integration.informer_support import create, fault

pytestmark = pytest.mark.integration

TIMEOUT = 20.0


@pytest.fixture(scope="module")
def crds(apiserver: ApiServer) -> ApiServer:
    from kubernetes import config

    api = config.new_client_from_config(config_file=str(apiserver.kubeconfig))
    install_crds(api)
    api.close()
    return apiserver


@pytest.fixture()
def namespace(kube_api: ApiClient, crds: ApiServer) -> str:
    name = f"inf-{uuid.uuid4().hex[:8]}"
    ops.create(
        kube_api,
        kinds.NAMESPACE.resource,
        {"metadata": {"name": name}},
    )
    return name


@pytest.fixture()
def informer(apiserver: ApiServer, redis_url: str, namespace: str) -> Iterator[InformerThread]:
    with InformerThread(sandbox_settings(apiserver.kubeconfig, redis_url, namespace)) as running:
        wait_until(running.synced, TIMEOUT, what="informer synced")
        yield running


@pytest.fixture()
def listers(informer: InformerThread, namespace: str) -> Listers:
    return new_listers(namespace, CacheReader(informer.redis))


def mirrored_versions(reader: CacheReader, kind: str, namespace: str) -> dict[str, str]:
    return {
        key: obj["metadata"]["resourceVersion"]
        for key, obj in ((f"{namespace}/{o['metadata']['name']}", o) for o in reader.list(kind))
        if obj["metadata"].get("namespace") == namespace
    }


def decoded(versions: object) -> object:
    """A reader's versions (``versions_if_synced``) as text, or what it answered instead."""
    if isinstance(versions, dict):
        return {k.decode(): v.decode() for k, v in versions.items()}
    return versions


def listed_versions(api: ApiClient, res: kres.Resource, namespace: str) -> dict[str, str]:
    items = ops.list_(api, res, namespace)["items"]
    return {f"{namespace}/{o['metadata']['name']}": o["metadata"]["resourceVersion"] for o in items}


# --- the mirror follows the cluster ---------------------------------------------------------------


def test_mirror_follows_creates_updates_deletes_with_indexes_and_routing(
    kube_api: ApiClient, informer: InformerThread, listers: Listers, namespace: str
) -> None:
    create(kube_api, kinds.SECRET.resource, fx.secret("cred", data={"userData": "aGk="}), namespace)
    create(kube_api, kinds.MACHINE_CLASS.resource, fx.machine_class("cls", secret="cred"), namespace)
    ms = create(kube_api, kinds.MACHINE_SET.resource, fx.machine_set("set", selector={"app": "a"}), namespace)
    ms_uid = ms["metadata"]["uid"]
    owned = fx.machine("m1", machine_set="set", machine_set_uid=ms_uid, labels={"app": "a"})
    create(kube_api, kinds.MACHINE.resource, owned, namespace)
    create(
        kube_api,
        kinds.MACHINE.resource,
        fx.machine("m2", machine_set="set", machine_set_uid=ms_uid),
        namespace,
    )

    wait_until(lambda: len(listers.machines.owned_by(ms_uid)) == 2, TIMEOUT, what="machines indexed by owner")
    wait_until(lambda: bool(listers.secrets.data_digest("cred")), TIMEOUT, what="class secret, digest only")
    assert [c.metadata.name for c in listers.machine_classes.referencing_secret(f"{namespace}/cred")] == [
        "cls"
    ]

    ops.patch(kube_api, kinds.MACHINE.resource, "m1", {"metadata": {"labels": {"node": "node-1"}}}, namespace)
    wait_until(
        lambda: [m.metadata.name for m in listers.machines.on_node("node-1")] == ["m1"],
        TIMEOUT,
        what="node index",
    )

    ops.delete(kube_api, kinds.MACHINE.resource, "m2", namespace)
    wait_until(lambda: listers.machines.get("m2") is None, TIMEOUT, what="deleted machine leaves the mirror")
    assert [m.metadata.name for m in listers.machines.owned_by(ms_uid)] == ["m1"]

    routed = informer.wait_routed(
        (
            f"machine {namespace}/m1",
            f"machine {namespace}/m2",
            f"machineset {namespace}/set",
            f"machineclass {namespace}/cls",
            f"secret {namespace}/cred",
            f"machine-termination {namespace}/m2",
            f"deletion {namespace}/set m2",
        ),
        TIMEOUT,
    )
    # creations are counted per batch: "creation <set> 1" twice, or "creation <set> 2" once
    creation = f"creation {namespace}/set "
    assert sum(int(entry.removeprefix(creation)) for entry in routed if entry.startswith(creation)) == 2
    assert mirrored_versions(listers.machines.reader, kinds.MACHINE.mirror, namespace) == listed_versions(
        kube_api, kinds.MACHINE.resource, namespace
    )


# --- watches that break ---------------------------------------------------------------------------


def test_cut_watches_recover_without_losing_an_event(
    kube_api: ApiClient, apiserver: ApiServer, informer: InformerThread, listers: Listers, namespace: str
) -> None:
    for round_ in range(3):
        watches = informer.stat("machines.watches")
        fault(apiserver, {"action": "cut-watches", "resources": ["machines"], "duration_seconds": 0.3})
        for i in range(round_ * 10, round_ * 10 + 10):
            create(kube_api, kinds.MACHINE.resource, fx.machine(f"m{i}"), namespace)
        ops.patch(
            kube_api,
            kinds.MACHINE.resource,
            f"m{round_ * 10 + 2}",
            {"spec": {"providerID": f"p{round_}"}},
            namespace,
        )

        def reopened(before: int = watches) -> bool:
            return informer.stat("machines.watches") > before

        wait_until(reopened, TIMEOUT, what="the cut watch re-opened")
    ops.delete(kube_api, kinds.MACHINE.resource, "m0", namespace)
    listed = listed_versions(kube_api, kinds.MACHINE.resource, namespace)
    wait_until(
        lambda: mirrored_versions(listers.machines.reader, kinds.MACHINE.mirror, namespace) == listed,
        TIMEOUT,
        what="mirror equal to a fresh LIST",
    )
    assert informer.stat("machines.errors") >= 3, "every cut was seen"
    assert informer.stat("machines.lists") == 1, "re-watching from the last version needs no re-list"
    routed = informer.wait_routed([f"machine-termination {namespace}/m0"], TIMEOUT)
    assert all(f"machine {namespace}/m{i}" in routed for i in range(30))
    assert all(f"machine {namespace}/m{i}" in routed for i in (2, 12, 22))  # the spec patches


def test_a_silent_watch_is_ended_by_the_client_read_timeout_and_watched_again(
    kube_api: ApiClient, apiserver: ApiServer, redis_url: str, namespace: str
) -> None:
    """The server would keep the stream open for a minute without a byte (no events, bookmarks about
    once a minute): the client's 1 s read timeout ends it, and the next watch still gets events."""
    settings = sandbox_settings(
        apiserver.kubeconfig, redis_url, namespace, watch_timeout=60, watch_client_timeout=1
    )
    with InformerThread(settings) as running:
        wait_until(running.synced, TIMEOUT, what="informer synced")
        wait_until(lambda: running.stat("machinedeployments.timeouts") >= 2, TIMEOUT, what="read timeouts")
        assert running.stat("machinedeployments.errors") == 0, "a read timeout is a normal end, no backoff"
        create(kube_api, kinds.MACHINE_DEPLOYMENT.resource, fx.machine_deployment("d"), namespace)
        wait_until(
            lambda: f"machinedeployment {namespace}/d" in running.routed(),
            TIMEOUT,
            what="event after timeouts",
        )


def test_expired_resource_version_is_re_listed_and_what_vanished_is_routed(
    kube_api: ApiClient, redis_url: str, tmp_path: Path
) -> None:
    from kubernetes import config

    server = ApiServer(tmp_path / "small-history", extra_args=["--history-window", "5"]).start()
    try:
        api = config.new_client_from_config(config_file=str(server.kubeconfig))
        install_crds(api)
        ns = "expiry"
        ops.create(
            api,
            kinds.NAMESPACE.resource,
            {"metadata": {"name": ns}},
        )
        create(api, kinds.MACHINE.resource, fx.machine("doomed"), ns)
        with InformerThread(sandbox_settings(server.kubeconfig, redis_url, ns)) as running:
            wait_until(running.synced, TIMEOUT, what="informer synced")
            reader = CacheReader(running.redis)
            wait_until(
                lambda: reader.get(kinds.MACHINE.mirror, f"{ns}/doomed") is not None, TIMEOUT, what="mirrored"
            )
            fault(server, {"action": "cut-watches", "resources": ["machines"], "duration_seconds": 1.5})
            ops.delete(api, kinds.MACHINE.resource, "doomed", ns)
            for i in range(12):  # push the informer's version out of a 5-event history
                create(api, kinds.MACHINE.resource, fx.machine(f"m{i}"), ns)
            listed = listed_versions(api, kinds.MACHINE.resource, ns)
            wait_until(
                lambda: mirrored_versions(reader, kinds.MACHINE.mirror, ns) == listed,
                TIMEOUT,
                what="re-listed",
            )
            assert running.stat("machines.gone") >= 1
            assert running.stat("machines.lists") >= 2
            # the versions kept beside the machines followed the re-list, and a reader trusts them
            assert decoded(reader.versions_if_synced(kinds.MACHINE.mirror)) == listed
            # a deletion missed by the watch is routed
            running.wait_routed(
                [f"machine-termination {ns}/doomed", *(f"machine {ns}/m{i}" for i in range(12))], TIMEOUT
            )
        api.close()
    finally:
        server.stop()


# --- Redis loses everything -----------------------------------------------------------------------


def test_redis_restarted_empty_is_noticed_and_every_key_is_enqueued_again(
    kube_api: ApiClient, apiserver: ApiServer, namespace: str, tmp_path: Path
) -> None:
    redis_server = RedisServer(tmp_path / "redis").start()
    try:
        create(kube_api, kinds.SECRET.resource, fx.secret("cred"), namespace)
        create(kube_api, kinds.MACHINE_CLASS.resource, fx.machine_class("cls", secret="cred"), namespace)
        create(kube_api, kinds.MACHINE_SET.resource, fx.machine_set("set"), namespace)
        for i in range(5):
            create(kube_api, kinds.MACHINE.resource, fx.machine(f"m{i}"), namespace)
        settings = sandbox_settings(apiserver.kubeconfig, redis_server.url, namespace)
        with InformerThread(settings) as running:
            wait_until(running.synced, TIMEOUT, what="informer synced")
            redis_server.restart_empty()
            assert not running.synced()
            wait_until(running.synced, TIMEOUT, what="informer re-synced after the restart")
            reader = CacheReader(running.redis)
            listed = listed_versions(kube_api, kinds.MACHINE.resource, namespace)
            assert mirrored_versions(reader, kinds.MACHINE.mirror, namespace) == listed
            # the versions were lost with the rest and kept again, under the new sentinel
            wait_until(
                lambda: decoded(reader.versions_if_synced(kinds.MACHINE.mirror)) == listed,
                TIMEOUT,
                what="versions",
            )
            expected = {f"machine {namespace}/m{i}" for i in range(5)} | {
                f"machineset {namespace}/set",
                f"machineclass {namespace}/cls",
                f"secret {namespace}/cred",
            }
            running.wait_routed(expected, TIMEOUT)
            assert "data" not in (reader.get(kinds.SECRET.mirror, f"{namespace}/cred") or {"data": None})
            assert running.informer.counters["redis_lost"] == 1
    finally:
        redis_server.stop()


# --- periodic resync ------------------------------------------------------------------------------


def test_periodic_resync_enqueues_every_key_without_any_change(
    kube_api: ApiClient, apiserver: ApiServer, redis_url: str, namespace: str
) -> None:
    create(kube_api, kinds.MACHINE.resource, fx.machine("m"), namespace)
    create(kube_api, kinds.MACHINE_DEPLOYMENT.resource, fx.machine_deployment("d"), namespace)
    settings = sandbox_settings(apiserver.kubeconfig, redis_url, namespace, min_resync_period=1)
    with InformerThread(settings) as running:
        wait_until(running.synced, TIMEOUT, what="informer synced")
        wait_until(lambda: running.informer.counters["resyncs"] >= 1, TIMEOUT, what="a resync")
        running.redis.delete("mcm:informer:routed")
        wait_until(
            lambda: {f"machine {namespace}/m", f"machinedeployment {namespace}/d"} <= set(running.routed()),
            TIMEOUT,
            what="keys enqueued again by the resync alone",
        )


def test_a_stopped_writer_leaves_the_liveness_registry(
    apiserver: ApiServer, redis_url: str, namespace: str
) -> None:
    """/healthz judges the loops that still run: an informer that stopped (a standby, or one
    closed in this process) must not read as a wedged writer forever after."""
    with InformerThread(sandbox_settings(apiserver.kubeconfig, redis_url, namespace)) as running:
        wait_until(running.synced, TIMEOUT, what="informer synced")
        assert "writer" in PROGRESS.stalled(-1.0)
    assert "writer" not in PROGRESS.stalled(-1.0)


# --- at rest --------------------------------------------------------------------------------------


def test_an_idle_writer_checks_the_sentinel_less_often_than_it_wakes(
    kube_api: ApiClient, apiserver: ApiServer, redis_url: str, namespace: str
) -> None:
    """At rest the writer wakes every IDLE_CHECK; writing an empty commit (MULTI, GET, INCR, EXEC)
    at each wakeup was half its Redis traffic. It checks every SENTINEL_EVERY instead."""
    settings = sandbox_settings(apiserver.kubeconfig, redis_url, namespace)
    with InformerThread(settings) as running:
        wait_until(running.synced, TIMEOUT, what="informer synced")
        counters = running.informer.counters
        commits_key = layout.sentinel_key() + ":commits"
        wakeups, commits = counters["idle_wakeups"], int(running.redis.get(commits_key) or 0)
        wait_until(lambda: counters["idle_wakeups"] >= wakeups + 8, TIMEOUT, what="8 idle wakeups")
        idle = counters["idle_wakeups"] - wakeups
        written = int(running.redis.get(commits_key) or 0) - commits
        assert written <= idle // 2, f"{written} commits in {idle} idle wakeups"
        assert written >= 1, "an idle writer still checks the sentinel"


def test_the_mirrors_watch_lag_is_published_per_kind(
    kube_api: ApiClient, informer: InformerThread, listers: Listers, namespace: str, redis_url: str
) -> None:
    """``mcm_informer_lag_seconds``: the informer publishes how late each kind's changes reach the
    mirror after the API server wrote them (issue 29); here, with no delay, well under a few seconds."""
    import redis as redis_lib

    from mcm_tasks.observability import informer_lag
    from mcm_tasks.probes import INFORMER_LAG_KEY_PARTS
    from mcm_tasks.redisdb import rkey

    create(kube_api, kinds.SECRET.resource, fx.secret("lagcred", data={"userData": "aGk="}), namespace)
    create(kube_api, kinds.MACHINE_CLASS.resource, fx.machine_class("lagcls", secret="lagcred"), namespace)
    client = redis_lib.Redis.from_url(redis_url)
    key = rkey(*INFORMER_LAG_KEY_PARTS)
    wait_until(
        lambda: client.hget(key, kinds.MACHINE_CLASS.mirror) is not None, TIMEOUT, what="lag published"
    )
    family = informer_lag(client.hgetall(key))  # type: ignore[arg-type]
    values = {s.labels["kind"]: s.value for s in family.samples}
    assert 0.0 <= values[kinds.MACHINE_CLASS.mirror] < 3.0
