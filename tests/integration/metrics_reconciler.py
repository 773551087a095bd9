"""A reconciler that counts its runs in a prometheus Counter, so a test can see whether metrics
recorded in a worker's pool processes reach the worker's /metrics."""

from __future__ import annotations

from prometheus_client import Counter

from mcm_tasks.queue import register_reconciler

RUNS = Counter("mcm_test_reconciles", "Reconciles run by the metrics test reconciler.")


def _count(key: str) -> None:
    RUNS.inc()


register_reconciler("machine", _count)
