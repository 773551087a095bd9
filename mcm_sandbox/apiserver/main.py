"""Run the server in the foreground until SIGTERM/SIGINT; the kubeconfig appears once it listens
(after the virtual clusters' kubeconfigs, so a poller that sees it finds theirs too)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path

from aiohttp import web

from mcm_sandbox.apiserver.app import Server, ServerOptions
from mcm_sandbox.apiserver.clusters import ClusterHost
from mcm_sandbox.apiserver.kubeconfig import write_kubeconfig


async def serve(
    host: str,
    port: int,
    kubeconfig: Path,
    opts: ServerOptions,
    virtual_clusters: tuple[str, ...] = (),
    clusters_dir: Path | None = None,
) -> None:
    opts.server_address = f"{host}:{port}"
    server = Server(opts)
    clusters = ClusterHost(server, clusters_dir or kubeconfig.parent / "clusters")
    for name in virtual_clusters:
        clusters.add(name)
    runner = web.AppRunner(clusters.make_app(), access_log=None, shutdown_timeout=2.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True, backlog=1024)
    await site.start()
    if port == 0:
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        opts.server_address = f"{host}:{port}"
    url = f"http://{host}:{port}"
    ca_pem = b""
    if opts.secure_port is not None:  # kubectl sends credentials only over https
        from mcm_sandbox.apiserver.tls import self_signed, server_context, small_tls_buffers

        small_tls_buffers()

        ca_pem, key_pem = self_signed(host)
        secure = web.TCPSite(
            runner, host, opts.secure_port, ssl_context=server_context(ca_pem, key_pem), reuse_address=True
        )
        await secure.start()
        port = secure._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        url = f"https://{host}:{port}"
    clusters.serving(host, port, url, ca_pem)
    write_kubeconfig(kubeconfig, url, opts.token, ca_pem=ca_pem)
    print(
        f"sandbox apiserver ready: {url} kubeconfig={kubeconfig} virtual clusters={len(clusters.clusters)}",
        flush=True,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def run(
    host: str,
    port: int,
    kubeconfig: Path,
    opts: ServerOptions,
    virtual_clusters: tuple[str, ...] = (),
    clusters_dir: Path | None = None,
) -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(serve(host, port, kubeconfig, opts, virtual_clusters, clusters_dir))
