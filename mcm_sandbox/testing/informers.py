"""An informer running in a thread of the test process, against real servers, recording what it routes.

Used by the informer's integration tests and the queue bench: the same ``Informer`` the command runs,
with a ``ListSink`` (or any sink) so a test can compare what was routed with what happened.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import redis
from kubernetes import config
from kubernetes.client import ApiClient, Configuration

from informers.runner import Informer, status_key
from informers.sink import ListSink, Sink, routed_list_key
from mcm_sandbox.procs import wait_until
from mcm_tasks.cache import layout
from mcm_tasks.settings import Settings, load_settings


def sandbox_settings(kubeconfig: Path | str, redis_url: str, namespace: str, **overrides: Any) -> Settings:
    """Settings for one cluster acting as control and target, with short watch timeouts."""
    values: dict[str, Any] = {
        "control_kubeconfig": str(kubeconfig),
        "target_kubeconfig": str(kubeconfig),
        "namespace": namespace,
        "redis_url": redis_url,
        "watch_timeout": 5,
        "watch_client_timeout": 8,
        "leader_elect": False,
    }
    values.update(overrides)
    return load_settings(values)


class InformerThread:
    def __init__(self, settings: Settings, identity: str = "test", sink: Sink | None = None) -> None:
        self.settings = settings
        cfg = Configuration()
        config.load_kube_config(config_file=settings.control_kubeconfig, client_configuration=cfg)
        cfg.connection_pool_maxsize = 32  # one cluster serves as control and target: 11 watches at once
        self.api = ApiClient(cfg)
        self.redis = redis.Redis.from_url(settings.redis_url)
        self.sink = sink if sink is not None else ListSink(self.redis)
        self.informer = Informer(
            settings, {"control": self.api, "target": self.api}, self.redis, self.sink, identity
        )
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self.informer.lead, args=(self.stop_event,), daemon=True)

    def start(self) -> InformerThread:
        self.thread.start()
        return self

    def close(self) -> None:
        self.stop_event.set()
        if self.thread.ident is not None:
            self.thread.join(15)
        self.api.close()
        self.redis.close()

    def __enter__(self) -> InformerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def synced(self) -> bool:
        return bool(self.redis.exists(layout.sentinel_key()))

    def routed(self) -> list[str]:
        return [item.decode() for item in self.redis.lrange(routed_list_key(), 0, -1)]  # type: ignore[union-attr]

    def wait_routed(self, expected: Iterable[str], timeout: float) -> list[str]:
        """What was routed, once it holds every ``expected`` entry. The runner writes the mirror
        before it delivers the routing, so a test that saw the mirror change must wait for this too."""
        want = set(expected)
        try:
            wait_until(lambda: want <= set(self.routed()), timeout, what="routing")
        except TimeoutError as err:
            raise AssertionError(f"never routed: {sorted(want - set(self.routed()))}") from err
        return self.routed()

    def status(self) -> dict[str, str]:
        raw: dict[bytes, bytes] = self.redis.hgetall(status_key(self.informer.identity))  # type: ignore[assignment]
        return {k.decode(): v.decode() for k, v in raw.items()}

    def stat(self, name: str) -> int:
        """A counter the reflectors publish, e.g. ``machines.gone``; reads the live objects."""
        kind, _, field = name.partition(".")
        for reflector in self.informer.reflectors:
            if reflector.resource.kind == kind:
                return int(getattr(reflector.stats, field))
        return int(self.status().get(name, "0"))
