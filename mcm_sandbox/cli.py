"""``mcm-tasks sandbox …`` verbs."""

from __future__ import annotations

import json
import secrets
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import typer

from mcm_sandbox.cloud_cli import cloud_app, kubelet_command

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="The embedded sandbox: API server, cloud, kubelets.",
    epilog="Example: mcm-tasks sandbox up --dir /tmp/sb && source /tmp/sb/env",
)
app.add_typer(cloud_app, name="cloud", help="The local cloud's VMs.")
app.command(
    "kubelet", epilog="Example: mcm-tasks sandbox kubelet --target-kubeconfig /tmp/sb/target-kubeconfig"
)(kubelet_command)
faults_app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="Inject faults into a sandbox API server.",
    epilog="Example: mcm-tasks sandbox faults add --server http://127.0.0.1:6443 --action error",
)
app.add_typer(faults_app, name="faults")


@app.command(epilog="Example: mcm-tasks sandbox apiserver --port 0 --kubeconfig /tmp/kubeconfig")
def apiserver(
    port: int = typer.Option(6443, help="Port to listen on (0: any free port)."),
    host: str = typer.Option("127.0.0.1", help="Address to bind."),
    kubeconfig: Path = typer.Option(..., help="Where to write a kubeconfig for this server."),
    token: str = typer.Option("", help="Require this static bearer token (401 without it)."),
    history_window: int = typer.Option(
        20_000, help="Watch events retained; older resourceVersions get 410 Expired."
    ),
    pod_grace_mode: str = typer.Option(
        "timer", help="Who ends graceful pod deletion: timer (grace period elapses), kubelet, immediate."
    ),
    bookmark_interval: float = typer.Option(
        60.0,
        help="Seconds between BOOKMARK events on watches that allow them (kube-apiserver: about a minute).",
    ),
    authorization_mode: str = typer.Option(
        "AlwaysAllow",
        help="AlwaysAllow, or RBAC to enforce Roles and bindings as kube-apiserver's "
        "--authorization-mode=RBAC does (the kubeconfig then carries an admin token).",
    ),
    secure_port: int | None = typer.Option(
        None,
        help="Also serve HTTPS (self-signed) on this port, 0 for any, and write the kubeconfig for it; "
        "RBAC mode and virtual clusters do this by default.",
    ),
    eviction: bool = typer.Option(
        True,
        "--eviction/--no-eviction",
        help="Serve the pods/eviction subresource (and list it in discovery).",
    ),
    virtual_cluster: list[str] = typer.Option(
        [],
        help="Also serve a virtual cluster of this name at <url>/clusters/NAME, with its own objects, "
        "watches and token (repeatable).",
    ),
    virtual_clusters: int = typer.Option(
        0, help="Also serve this many virtual clusters, named shoot-1 … shoot-N."
    ),
    clusters_dir: Path | None = typer.Option(
        None,
        help="Where each virtual cluster's kubeconfig is written as NAME.kubeconfig "
        "(default: a 'clusters' folder beside --kubeconfig).",
    ),
) -> None:
    """Run the sandbox Kubernetes API server in the foreground."""
    from mcm_sandbox.apiserver.app import ServerOptions
    from mcm_sandbox.apiserver.deletion import PodGraceMode
    from mcm_sandbox.apiserver.main import run

    try:
        mode = PodGraceMode(pod_grace_mode)
    except ValueError as exc:
        raise typer.BadParameter(
            f"--pod-grace-mode must be one of {[m.value for m in PodGraceMode]}"
        ) from exc
    if authorization_mode not in ("AlwaysAllow", "RBAC"):
        raise typer.BadParameter("--authorization-mode must be AlwaysAllow or RBAC")
    names = [*virtual_cluster, *(f"shoot-{i}" for i in range(1, virtual_clusters + 1))]
    if len(set(names)) != len(names):
        raise typer.BadParameter("virtual cluster names must be unique")
    if secure_port is None and (authorization_mode == "RBAC" or names):
        secure_port = 0  # kubectl sends tokens (a virtual cluster always has one) only over https
    if names and not token:
        token = secrets.token_urlsafe(24)  # over https kubectl asks for a credential it lacks
    opts = ServerOptions(
        token=token,
        history_window=history_window,
        pod_grace_mode=mode,
        bookmark_interval=bookmark_interval,
        authorization_mode=authorization_mode,
        secure_port=secure_port,
        eviction=eviction,
    )
    run(host, port, kubeconfig, opts, tuple(names), clusters_dir)


def _admin(server: str, method: str, path: str, token: str, body: Any = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(server.rstrip("/") + path, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        typer.echo(exc.read().decode(errors="replace"), err=True)
        raise typer.Exit(1) from exc


@faults_app.command(
    "add",
    epilog="Example: mcm-tasks sandbox faults add --server http://127.0.0.1:6443 --action latency "
    "--latency-ms 200 --resources pods",
)
def faults_add(
    server: str = typer.Option(..., help="API server URL, e.g. http://127.0.0.1:6443."),
    action: str = typer.Option(..., help="error, hang, latency or cut-watches."),
    verbs: str = typer.Option("", help="Comma-separated verbs (default: all)."),
    resources: str = typer.Option("", help="Comma-separated resources, e.g. pods,nodes (default: all)."),
    duration: float = typer.Option(0.0, help="Seconds the rule stays active (0: until cleared)."),
    times: int = typer.Option(0, help="Requests the rule answers before it is gone (0: no limit)."),
    status_code: int = typer.Option(503, help="HTTP status for action=error."),
    latency_ms: int = typer.Option(0, help="Added delay for action=latency."),
    token: str = typer.Option("", help="Bearer token, when the server requires one."),
) -> None:
    """Activate a fault rule; prints its id."""
    rule: dict[str, Any] = {
        "action": action,
        "status_code": status_code,
        "latency_ms": latency_ms,
        "verbs": [v for v in verbs.split(",") if v],
        "resources": [r for r in resources.split(",") if r],
    }
    if duration > 0:
        rule["duration_seconds"] = duration
    if times > 0:
        rule["times"] = times
    typer.echo(_admin(server, "POST", "/sandbox/faults", token, rule)["id"])


@faults_app.command("clear", epilog="Example: mcm-tasks sandbox faults clear --server http://127.0.0.1:6443")
def faults_clear(
    server: str = typer.Option(..., help="API server URL."),
    rule_id: str = typer.Option("", "--id", help="Remove only this rule."),
    token: str = typer.Option("", help="Bearer token, when the server requires one."),
) -> None:
    """Remove every fault rule (or one)."""
    _admin(server, "DELETE", "/sandbox/faults" + (f"/{rule_id}" if rule_id else ""), token)


@faults_app.command("list", epilog="Example: mcm-tasks sandbox faults list --server http://127.0.0.1:6443")
def faults_list(
    server: str = typer.Option(..., help="API server URL."),
    token: str = typer.Option("", help="Bearer token, when the server requires one."),
) -> None:
    """Print the active fault rules as JSON."""
    typer.echo(json.dumps(_admin(server, "GET", "/sandbox/faults", token)["items"], indent=2))


@app.command("up", epilog="Example: mcm-tasks sandbox up --dir /tmp/sb --workers 4")
def sandbox_up(
    dir: Path = typer.Option(..., "--dir", help="Folder for kubeconfigs, env, state and logs."),
    workers: int = typer.Option(2, help="Worker processes to start."),
    aws_endpoint: str = typer.Option("", help="Point the workers' boto3 at this EC2 endpoint (moto)."),
    beat: bool = typer.Option(True, help="Start Celery beat for the periodic jobs."),
    timeout: float = typer.Option(90.0, help="Seconds to wait for everything to be ready."),
    force: bool = typer.Option(False, "--force", help="Replace a sandbox still running in --dir."),
) -> None:
    """Start Redis, API servers, kubelet simulator, informer, workers and beat in the background."""
    from mcm_sandbox.runner import SandboxRunning, up

    try:
        up(
            dir,
            workers=workers,
            aws_endpoint=aws_endpoint or None,
            with_beat=beat,
            timeout=timeout,
            force=force,
        )
    except SandboxRunning as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1) from None


@app.command("down", epilog="Example: mcm-tasks sandbox down --dir /tmp/sb")
def sandbox_down(dir: Path = typer.Option(..., "--dir", help="The folder given to `sandbox up`.")) -> None:
    """Stop everything `sandbox up` started."""
    from mcm_sandbox.runner import down

    down(dir)


@app.command("install-crds", epilog="Example: mcm-tasks sandbox install-crds --kubeconfig /tmp/sb/kubeconfig")
def sandbox_install_crds(
    kubeconfig: Path = typer.Option(..., help="Kubeconfig of the control cluster."),
    timeout: float = typer.Option(60.0, help="Seconds to wait for the API server and the CRDs."),
) -> None:
    """Register the machine.sapcloud.io CRDs and wait until they are served (compose's sandbox
    profile; on a real cluster: `mcm-tasks crds | kubectl apply -f -`)."""
    from urllib3.exceptions import HTTPError

    from mcm_sandbox.procs import wait_until
    from mcm_sandbox.runner import register_crds

    def registered() -> bool:
        try:
            register_crds(kubeconfig, timeout)
        except (OSError, HTTPError) as err:  # the API server is not listening yet
            typer.echo(f"waiting for the API server: {err}", err=True)
            return False
        return True

    wait_until(registered, timeout, interval=1.0, what="CRDs registered")
    typer.echo("machine.sapcloud.io CRDs registered")
