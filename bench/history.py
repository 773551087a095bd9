"""What a key's history costs per reconcile: the queue contract's path run in-process (BEGIN, a
no-op reconciler, END) over a pre-filled queue, with the history on (``history_length`` 20) and off
(0), in interleaved rounds on the same redis-server.

    .venv/bin/python bench/history.py [--keys 4000] [--rounds 3]

Figures are CPU, not time (the machine is shared): ``client_us`` is this process's CPU per delivery,
``redis_us`` the redis-server's (``INFO cpu``) per delivery; best round of each mode. The history adds
one script call to BEGIN's round trip and one to END's (no round trip of its own). Results go to
stdout and bench/results/history.json.
"""

from __future__ import annotations

import os
import sys

# Run as a script, this folder comes first on sys.path, and bench/queue.py is named like the standard
# library's ``queue`` that redis imports: take the folder off before anything else.
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)

import argparse
import base64
import json
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mcm_sandbox.procs import RedisServer, scratch_dir  # noqa: E402
from mcm_tasks.queue import enqueue_many, register_reconciler, registry  # noqa: E402
from mcm_tasks.queue.messages import queue_keys  # noqa: E402
from mcm_tasks.queue.processing import deliver  # noqa: E402
from mcm_tasks.redisdb import close_all, get_redis  # noqa: E402
from mcm_tasks.settings import configure  # noqa: E402

KIND = "machine"


def redis_cpu(client: object) -> float:
    info = client.info("cpu")  # type: ignore[attr-defined]
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def one_round(url: str, keys: int, length: int) -> tuple[float, float]:
    """(client µs, redis µs) per delivery of ``keys`` fresh keys."""
    close_all()
    configure({"redis_url": url, "history_length": length})
    client = get_redis()
    client.flushall()
    enqueue_many([(KIND, f"ns/m-{i}") for i in range(keys)])
    messages = []
    while (raw := client.rpop(queue_keys(KIND).broker_list)) is not None:
        message = json.loads(raw)  # type: ignore[arg-type]
        (key,), _, _ = json.loads(base64.b64decode(message["body"]))
        messages.append((key, message["headers"]["id"]))
    cpu, server = time.process_time(), redis_cpu(client)
    for key, message_id in messages:
        deliver(KIND, key, message_id, worker="bench@host")
    n = len(messages)
    return (time.process_time() - cpu) / n * 1e6, (redis_cpu(client) - server) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--keys", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "history.json"))
    args = parser.parse_args()
    registry.unregister_all()
    registry.load_reconciler_modules([])
    register_reconciler(KIND, lambda key: None)
    server = RedisServer(scratch_dir("mcm-bench-history-")).start()
    rounds: dict[str, list[tuple[float, float]]] = {"on": [], "off": []}
    try:
        for _ in range(args.rounds):
            rounds["on"].append(one_round(server.url, args.keys, 20))
            rounds["off"].append(one_round(server.url, args.keys, 0))
    finally:
        close_all()
        server.stop()
    best = {mode: min(values) for mode, values in rounds.items()}
    result = {
        "client_us_with_history": round(best["on"][0], 1),
        "client_us_without": round(best["off"][0], 1),
        "redis_us_with_history": round(best["on"][1], 1),
        "redis_us_without": round(best["off"][1], 1),
        "history_client_us": round(best["on"][0] - best["off"][0], 1),
        "history_redis_us": round(best["on"][1] - best["off"][1], 1),
        "rounds": {mode: [[round(c, 1), round(r, 1)] for c, r in values] for mode, values in rounds.items()},
        "config": {"keys": args.keys, "rounds": args.rounds},
    }
    text = json.dumps(result, indent=2)
    print(text)
    Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
