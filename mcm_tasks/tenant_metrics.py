"""Seed mode's fleet metrics: each served namespace's, labelled ``namespace`` (issue 33).

In seed mode every tenant keeps its own queue hashes, mirror and counters under its key prefix
(``mcm_tasks.tenancy``), so a fleet collector read once under the installation's settings would see
none of them. ``TenantCollector`` runs the collector it wraps once per served namespace, under that
tenant's settings (``tenancy.serving``), and adds ``namespace="<tenant>"`` to every sample that does
not carry a ``namespace`` already (MCM's per-object gauges name their object's namespace, which is
the tenant's). The label's values are the served namespaces only (``tenancy_io.served``: the
``--namespaces`` list or the registry the informer publishes from the control cluster's Namespace
list), never a string read from an object, so its cardinality is the number of tenants.

In single-namespace mode the wrapper is transparent: the same families, no ``namespace`` label,
so dashboards and alerts that sum over ``name`` read the same series as before.

After a Prometheus scrape the label is ``exported_namespace`` (the scrape target's ``namespace``,
the release's, wins unless ``honorLabels``), as on MCM's per-object metrics; the chart's alerts
keep selecting the release by ``namespace`` and group by ``exported_namespace`` where a tenant
matters.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator

import redis
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from mcm_tasks import tenancy, tenancy_io
from mcm_tasks.settings import Settings

log = logging.getLogger(__name__)

#: the label naming the tenant
NAMESPACE_LABEL = "namespace"


def labelled(family: Metric, namespace: str) -> Metric:
    """A copy of ``family`` whose samples carry ``namespace`` (kept where a sample has its own)."""
    out = Metric(family.name, family.documentation, family.type, family.unit)
    out.samples = [
        s if NAMESPACE_LABEL in s.labels else s._replace(labels={**s.labels, NAMESPACE_LABEL: namespace})
        for s in family.samples
    ]
    return out


def merged(per_tenant: Iterable[tuple[str, Iterable[Metric]]]) -> list[Metric]:
    """One family per metric name with every tenant's samples, in the order the names first came;
    a tenant's samples stay together (a histogram's buckets, count and sum side by side)."""
    families: dict[str, Metric] = {}
    for namespace, metrics in per_tenant:
        for family in metrics:
            mine = labelled(family, namespace)
            found = families.get(family.name)
            if found is None:
                families[family.name] = mine
            else:
                found.samples.extend(mine.samples)
    return list(families.values())


class TenantCollector(Collector):
    """``inner`` for the installation, or in seed mode for each served namespace, labelled."""

    def __init__(self, inner: Collector, client: redis.Redis | None = None) -> None:
        self.inner = inner
        self.client = client
        self.failing: set[str] = set()

    def describe(self) -> Iterable[Metric]:
        return []  # described lazily: registering must not read Redis

    def collect(self) -> Iterator[Metric]:
        settings = tenancy.process_settings()
        if not settings.seed_mode:
            yield from self.inner.collect()
            return
        from mcm_tasks.redisdb import get_redis

        namespaces = tenancy_io.served(self.client or get_redis(), settings)  # Redis down: Guarded's
        yield from merged((ns, self._of(ns, settings)) for ns in namespaces)

    def _of(self, namespace: str, settings: Settings) -> list[Metric]:
        """The tenant's families; none when its scrape fails (logged once per streak): one tenant's
        unreadable object or missing state leaves the others' series in place."""
        try:
            with tenancy.serving(namespace, settings):
                found = list(self.inner.collect())
        except Exception as err:
            if namespace not in self.failing:
                log.warning(
                    "%s of namespace %s left out of /metrics: %s: %s",
                    type(self.inner).__name__, namespace, type(err).__name__, err,
                )  # fmt: skip
            self.failing.add(namespace)
            return []
        self.failing.discard(namespace)
        return found
