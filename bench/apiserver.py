"""Sandbox API server benchmark: write throughput with open watches, big LIST, watch latency, memory.

Run: ``.venv/bin/python bench/apiserver.py``. Prints the figures and saves bench/results/apiserver.json.

- writes_per_second: creates from 8 concurrent keep-alive clients while 20 watches stream every event
  (the watchers run in another process and check that each of them received every event).
- list_10000_seconds: median wall time of one JSON LIST of 10 000 objects, body fully read.
- watch_latency_p99_ms: commit-to-delivery latency over 20 watches at a paced 200 writes/s.
- memory_mb_per_1000_objects: server RSS growth per 1 000 stored objects of the size given.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, this folder is sys.path[0] and its modules (bench/queue.py) would shadow the
# standard library in this process and in the spawned watcher processes: put the repo root there.
ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]

import asyncio  # noqa: E402
import json  # noqa: E402
import multiprocessing as mp  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import aiohttp  # noqa: E402
import orjson  # noqa: E402

from mcm_sandbox.procs import ApiServer, scratch_dir  # noqa: E402

WRITERS = 8
WATCHERS = 20
WRITES = 10_000
PAYLOAD = "x" * 400  # ~1 KiB objects, about a small Machine's size


def _obj(name: str, stamp: float = 0.0) -> bytes:
    return orjson.dumps(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "labels": {"bench": "yes", "shard": name[-1]},
                "annotations": {"sent": repr(stamp)},
            },
            "data": {"payload": PAYLOAD, "more": PAYLOAD},
        }
    )


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


# --- watchers (child process) ---------------------------------------------------------------------


async def _watch(url: str, rv: str, expect: int, parse: bool, out: list[Any]) -> None:
    timeout = aiohttp.ClientTimeout(total=None, sock_read=120)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        path = f"{url}/api/v1/namespaces/bench/configmaps?watch=true&resourceVersion={rv}"
        async with session.get(path) as resp:
            count, latencies, buf = 0, [], b""
            async for chunk in resp.content.iter_any():
                now = time.time()
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    count += 1
                    if parse:
                        sent = float(orjson.loads(line)["object"]["metadata"]["annotations"]["sent"])
                        latencies.append((now - sent) * 1000)
                if count >= expect:
                    break
            out.append((count, latencies))


def _watchers_main(url: str, rv: str, expect: int, parse: bool, queue: Any, ready: Any) -> None:
    async def main() -> None:
        out: list[Any] = []
        tasks = [asyncio.create_task(_watch(url, rv, expect, parse, out)) for _ in range(WATCHERS)]
        await asyncio.sleep(0.5)
        ready.set()
        await asyncio.gather(*tasks)
        queue.put(out)

    asyncio.run(main())


def _start_watchers(url: str, rv: str, expect: int, parse: bool) -> tuple[Any, Any]:
    ctx = mp.get_context("spawn")
    queue, ready = ctx.Queue(), ctx.Event()
    proc = ctx.Process(target=_watchers_main, args=(url, rv, expect, parse, queue, ready))
    proc.start()
    ready.wait(30)
    return proc, queue


# --- writers --------------------------------------------------------------------------------------


async def _write_all(url: str, names: list[str], pace: float = 0.0) -> float:
    connector = aiohttp.TCPConnector(limit=WRITERS)
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=connector) as session:
        queue: asyncio.Queue[str] = asyncio.Queue()
        for name in names:
            queue.put_nowait(name)

        async def writer() -> None:
            while not queue.empty():
                name = queue.get_nowait()
                body = _obj(name, time.time())
                async with session.post(
                    f"{url}/api/v1/namespaces/bench/configmaps", data=body, headers=headers
                ) as resp:
                    await resp.read()
                    assert resp.status == 201, resp.status
                if pace:
                    await asyncio.sleep(pace)

        began = time.perf_counter()
        await asyncio.gather(*(writer() for _ in range(WRITERS if not pace else 1)))
        return time.perf_counter() - began


async def _request(url: str, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
    async with aiohttp.ClientSession() as session, session.request(method, url + path, json=body) as resp:
        return resp.status, await resp.read()


async def _list_seconds(url: str) -> tuple[float, int]:
    times, count = [], 0
    async with aiohttp.ClientSession() as session:
        for _ in range(5):
            began = time.perf_counter()
            async with session.get(f"{url}/api/v1/namespaces/bench/configmaps") as resp:
                raw = await resp.read()
            times.append(time.perf_counter() - began)
        count = raw.count(b'"kind":"ConfigMap"')
    return statistics.median(times), count


def main() -> dict[str, Any]:
    server = ApiServer(scratch_dir("mcm-bench-"), name="bench").start()
    try:
        url = server.url
        asyncio.run(_request(url, "POST", "/api/v1/namespaces", {"metadata": {"name": "bench"}}))
        rss_before = _rss_mb(server.process.pid)  # type: ignore[union-attr]
        _, raw = asyncio.run(_request(url, "GET", "/api/v1/namespaces/bench/configmaps"))
        rv = orjson.loads(raw)["metadata"]["resourceVersion"]

        proc, queue = _start_watchers(url, rv, WRITES, parse=False)
        elapsed = asyncio.run(_write_all(url, [f"cm-{i:05d}" for i in range(WRITES)]))
        results = queue.get(timeout=300)
        proc.join(30)
        delivered = [count for count, _ in results]
        assert delivered == [WRITES] * WATCHERS, f"watchers missed events: {delivered}"
        writes_per_second = WRITES / elapsed
        rss_after = _rss_mb(server.process.pid)  # type: ignore[union-attr]

        list_seconds, listed = asyncio.run(_list_seconds(url))
        assert listed == WRITES, listed

        _, raw = asyncio.run(_request(url, "GET", "/api/v1/namespaces/bench/configmaps?limit=1"))
        rv = orjson.loads(raw)["metadata"]["resourceVersion"]
        paced = 600
        proc, queue = _start_watchers(url, rv, paced, parse=True)
        asyncio.run(_write_all(url, [f"lat-{i:05d}" for i in range(paced)], pace=1 / 200))
        results = queue.get(timeout=300)
        proc.join(30)
        latencies = sorted(lat for _, lats in results for lat in lats)
        p99 = latencies[int(len(latencies) * 0.99) - 1]
        object_bytes = len(_obj("cm-00000"))
        figures = {
            "writes_per_second": round(writes_per_second, 1),
            "list_10000_seconds": round(list_seconds, 4),
            "watch_latency_p99_ms": round(p99, 2),
            "memory_mb_per_1000_objects": round((rss_after - rss_before) / (WRITES / 1000), 2),
            "details": {
                "writers": WRITERS,
                "watchers": WATCHERS,
                "writes": WRITES,
                "object_bytes": object_bytes,
                "watch_latency_rate_per_second": 200,
                "watch_latency_p50_ms": round(latencies[len(latencies) // 2], 2),
                "server_rss_mb_after": round(rss_after, 1),
                "cpus": mp.cpu_count(),
            },
        }
    finally:
        server.stop()
    out = ROOT / "bench" / "results" / "apiserver.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))
    return figures


if __name__ == "__main__":
    main()
