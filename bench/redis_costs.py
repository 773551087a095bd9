"""What the queue contract and the API rate limiter cost per step, worker and Redis CPU apart.

Run: ``.venv/bin/python bench/redis_costs.py [--scale 0.5]``. Prints the figures and saves
bench/results/redis_costs.json. One process against a redis-server of its own, no Celery: each step
is called in a loop and measured in CPU time (this process's ``process_time``, Redis's
``used_cpu_*``), which a loaded host inflates far less than wall time. Best of three rounds.

- ``delivery_us_*``: one no-op delivery through the contract (BEGIN, the reconciler, END: lock,
  history, --concurrent-syncs slot, metrics), per delivery;
- ``publish_pass_us_*``: one pass of a worker keeper's publisher over every kind's delayed set
  with nothing due (every worker runs several a second, busy or idle);
- ``api_token_us_*``: one kube API request's token from the shared budget (``cluster_bucket`` at
  2000 QPS, a busy process), and ``api_token_draws`` the Redis round trips for 1500 tokens.
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/ must not be on sys.path: bench/queue.py would shadow the standard library's queue
ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]

import base64  # noqa: E402
import json  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from functools import partial  # noqa: E402
from typing import Any  # noqa: E402

import redis  # noqa: E402

from bench.common import context, parse_args, save, scaled  # noqa: E402
from mcm_sandbox.procs import RedisServer  # noqa: E402
from mcm_tasks.kube.ratelimit import cluster_bucket  # noqa: E402
from mcm_tasks.queue import enqueue_many, register_reconciler, registry  # noqa: E402
from mcm_tasks.queue.messages import queue_keys  # noqa: E402
from mcm_tasks.queue.processing import process  # noqa: E402
from mcm_tasks.queue.producer import publish_due  # noqa: E402
from mcm_tasks.redisdb import get_redis  # noqa: E402
from mcm_tasks.settings import configure  # noqa: E402

ROUNDS = 3
TOKENS = 1500  # within the bucket's burst: no waiting


def _redis_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def _per_call(client: redis.Redis, n: int, step: Callable[[], object]) -> tuple[float, float]:
    """Microseconds of this process's and Redis's CPU per call of ``step``."""
    redis_before, before = _redis_cpu(client), time.process_time()
    for _ in range(n):
        step()
    spent, redis_spent = time.process_time() - before, _redis_cpu(client) - redis_before
    return round(spent / n * 1e6, 1), round(redis_spent / n * 1e6, 1)


def _messages(client: redis.Redis, kind: str) -> list[tuple[str, str]]:
    out = []
    while (raw := client.rpop(queue_keys(kind).broker_list)) is not None:
        message = json.loads(raw)  # type: ignore[arg-type]
        (key,), _, _ = json.loads(base64.b64decode(message["body"]))
        out.append((key, message["headers"]["id"]))
    return out


def _deliver_next(pending: Iterator[tuple[str, str]]) -> None:
    process("machine", *next(pending))


def measure(deliveries: int) -> dict[str, Any]:
    rounds: dict[str, list[float]] = {}

    def note(name: str, pair: tuple[float, float]) -> None:
        rounds.setdefault(f"{name}_us_worker", []).append(pair[0])
        rounds.setdefault(f"{name}_us_redis", []).append(pair[1])

    with tempfile.TemporaryDirectory(prefix="mcm-redis-costs-") as tmp:
        server = RedisServer(Path(tmp) / "redis").start()
        try:
            configure({"redis_url": server.url})
            registry.unregister_all()
            registry.load_reconciler_modules([])
            register_reconciler("machine", lambda key: None)
            client = get_redis()
            for n in range(ROUNDS):
                enqueue_many([("machine", f"ns/m{n}-{i}") for i in range(deliveries)])
                pending = iter(_messages(client, "machine"))
                note("delivery", _per_call(client, deliveries, partial(_deliver_next, pending)))
                note("publish_pass", _per_call(client, 2000, partial(publish_due, client)))
                tokens = cluster_bucket(f"bench-{n}", 2000.0, 2000, server.url)
                note("api_token", _per_call(client, TOKENS, tokens.take))
                rounds.setdefault("api_token_draws", []).append(getattr(tokens, "draws", TOKENS))
        finally:
            server.stop()
    return {**{name: min(values) for name, values in rounds.items()}, "rounds": rounds}


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    ctx = context(args)
    figures = measure(scaled(3000, args.scale))
    save("redis_costs", args, figures, ctx)


if __name__ == "__main__":
    main()
