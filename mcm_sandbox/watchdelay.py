"""A proxy in front of a sandbox API server that delays every watch stream by a fixed time, as the
watches of a loaded API server arrive late (issue 29). Every other request passes straight through,
so an informer behind it lists at once and sees each change ``--delay`` seconds after it happened,
while workers talking to the API server directly write and read live.

Each chunk of a watch response is held until ``delay`` seconds after it arrived, in order, so the
stream stays a faithful, late copy (bookmarks and the end of the stream included).

    python -m mcm_sandbox.watchdelay --upstream http://127.0.0.1:6443 --port 7443 --delay 3

``--delay-for RESOURCE=SECONDS`` (repeatable) holds the watches of one resource (its plural, the
last segment of the watch's path) that long instead: two watches late by different times deliver
the changes of two kinds out of the order they were written in, as two informers of a loaded API
server can (a MachineSet's scale seen after its machine's move, or before).

    python -m mcm_sandbox.watchdelay --upstream … --port 7443 --delay 0 --delay-for machinesets=2
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Mapping, Sequence

import aiohttp
from aiohttp import web

log = logging.getLogger(__name__)

#: headers that belong to one hop, not to the request or response passed on
HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "host", "content-length"}
)


def is_watch(request: web.Request) -> bool:
    return request.query.get("watch", "").lower() in ("1", "true")


def resource_of(request: web.Request) -> str:
    """The resource a list or watch is of: the last segment of its path (``…/machinesets``)."""
    return request.path.rstrip("/").rsplit("/", 1)[-1]


def parse_delay_for(values: Sequence[str]) -> dict[str, float]:
    """``RESOURCE=SECONDS`` pairs; a malformed one is an error naming it."""
    found: dict[str, float] = {}
    for value in values:
        resource, sep, seconds = value.partition("=")
        try:
            delay = float(seconds)
        except ValueError:
            delay = -1.0
        if not sep or not resource or not 0 <= delay <= 3600:
            raise ValueError(f"--delay-for {value!r}: expected RESOURCE=SECONDS (0-3600), e.g. machinesets=2")
        found[resource] = delay
    return found


def make_app(upstream: str, delay: float, delay_for: Mapping[str, float] | None = None) -> web.Application:
    upstream = upstream.rstrip("/")
    by_resource = dict(delay_for or {})

    async def start(app: web.Application) -> None:
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        app["session"] = aiohttp.ClientSession(timeout=timeout, auto_decompress=False)

    async def stop(app: web.Application) -> None:
        await app["session"].close()

    async def handle(request: web.Request) -> web.StreamResponse:
        session: aiohttp.ClientSession = request.app["session"]
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        body = await request.read()
        async with session.request(
            request.method, upstream + str(request.rel_url), headers=headers, data=body or None
        ) as answer:
            out_headers = {k: v for k, v in answer.headers.items() if k.lower() not in HOP_BY_HOP}
            if not is_watch(request):
                data = await answer.read()
                return web.Response(status=answer.status, body=data, headers=out_headers)
            held_for = by_resource.get(resource_of(request), delay)
            out = web.StreamResponse(status=answer.status, headers=out_headers)
            await out.prepare(request)
            loop = asyncio.get_running_loop()
            held: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()

            async def pump() -> None:
                try:
                    async for chunk in answer.content.iter_any():
                        await held.put((loop.time() + held_for, chunk))
                finally:
                    await held.put(None)

            task = asyncio.create_task(pump())
            try:
                while (item := await held.get()) is not None:
                    due, chunk = item
                    wait = due - loop.time()
                    if wait > 0:
                        await asyncio.sleep(wait)
                    await out.write(chunk)
                await asyncio.sleep(max(0.0, held_for))  # the end of the stream is late too
            finally:
                task.cancel()
            return out

    app = web.Application()
    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="the API server's URL")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--delay", type=float, default=3.0, help="seconds every watch event is held")
    parser.add_argument("--delay-for", action="append", default=[], metavar="RESOURCE=SECONDS",
                        help="seconds the watches of one resource (plural) are held instead")  # fmt: skip
    args = parser.parse_args(argv)
    try:
        delay_for = parse_delay_for(args.delay_for)
    except ValueError as err:
        parser.error(str(err))
    logging.basicConfig(level=logging.INFO)
    web.run_app(make_app(args.upstream, args.delay, delay_for), host=args.host, port=args.port, print=None)


if __name__ == "__main__":
    main()
