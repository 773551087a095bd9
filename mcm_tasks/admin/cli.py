"""``mcm-tasks admin …``: every verb prints a table (or lines) for people and, with ``--output
json``, JSON for scripts. Bad input (an unknown kind, a key nothing knows, an unreachable Redis or API
server) is one clear line on stderr and a non-zero exit (2 for what does not exist), never a
traceback."""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import Any, ParamSpec, TypeVar

import orjson
import redis
import typer
from kubernetes.client.exceptions import ApiException
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from mcm_tasks import standby
from mcm_tasks.admin.keys import NotFound, check_kind, exists, inspect_key, when, worker_of
from mcm_tasks.admin.tenants import each_tenant, seed_entries, served_now, tenant
from mcm_tasks.redisdb import get_redis
from mcm_tasks.settings import configure

admin_app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="Inspect and steer the queues.",
    epilog="Example: mcm-tasks admin inspect machine shoot--dev--demo/worker-a-5f7c9-abcde",
)
deadletter_app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="Keys that keep failing.",
    epilog="Example: mcm-tasks admin deadletter ls --output json",
)
admin_app.add_typer(deadletter_app, name="deadletter")
#: piped output (grep, tests) is not cut to 80 columns
console = Console(width=None if sys.stdout.isatty() else 200)
errors = Console(stderr=True, width=None if sys.stderr.isatty() else 200)

P = ParamSpec("P")
R = TypeVar("R")


class Output(StrEnum):
    TABLE = "table"
    JSON = "json"


OUTPUT = typer.Option(Output.TABLE, "--output", "-o", help="table, or json for scripts.")
KIND_FILTER = typer.Option("", "--kind", help="Only this kind.")
NAMESPACE = typer.Option(
    "", "--namespace", "-n", help="Seed mode: the served namespace (default: the key's namespace)."
)
LIST_NAMESPACE = typer.Option(
    "", "--namespace", "-n", help="Seed mode: only this served namespace (default: every served one)."
)


def fail(message: str, code: int) -> typer.Exit:
    errors.print(f"error: {message}", markup=False, highlight=False)
    return typer.Exit(code)


def clean_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Known failures as one line and an exit code instead of a traceback."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except NotFound as err:
            raise fail(str(err), 2) from None
        except ValueError as err:  # an unknown kind or an invalid key, from the queue layer
            raise fail(str(err), 2) from None
        except (redis.RedisError, OSError) as err:
            raise fail(f"cannot reach Redis: {type(err).__name__}: {err}", 1) from None
        except ApiException as err:
            raise fail(f"the API server answered {err.status} {err.reason}", 1) from None

    return run


def emit(output: Output, data: Any, table: Callable[[], Any]) -> None:
    if output is Output.JSON:
        sys.stdout.write(orjson.dumps(_plain(data), option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        console.print(table())


def _plain(data: Any) -> Any:
    if isinstance(data, BaseModel):
        return data.model_dump(mode="json")
    if isinstance(data, list | tuple):
        return [_plain(item) for item in data]
    if isinstance(data, dict):
        return {k: _plain(v) for k, v in data.items()}
    return data


def _table(columns: Sequence[str], rows: Sequence[Sequence[object]], empty: str) -> Any:
    if not rows:
        return empty
    table = Table(*columns)
    for row in rows:
        table.add_row(*(str(v) for v in row))
    return table


def _kind_or_none(kind: str) -> str | None:
    return check_kind(kind) if kind else None


@admin_app.callback()
def admin(
    redis_url: str = typer.Option("", help="Redis to use (default: MCM_REDIS_URL)."),
    namespaces: str = typer.Option(
        "", help="Seed mode: the served namespaces, as the installation's (default: MCM_NAMESPACES)."
    ),
    namespace_selector: str = typer.Option(
        "", help="Seed mode: the installation's namespace selector (default: MCM_NAMESPACE_SELECTOR)."
    ),
) -> None:
    given = {"redis_url": redis_url, "namespaces": namespaces, "namespace_selector": namespace_selector}
    if any(given.values()):
        configure({k: v for k, v in given.items() if v})


def _seed_mode() -> bool:
    from mcm_tasks.tenancy import process_settings

    return process_settings().seed_mode


def _seed_columns(
    columns: tuple[str, ...], rows: Sequence[Sequence[object]], found: list[dict[str, Any]]
) -> tuple[tuple[str, ...], list[Sequence[object]]]:
    """Seed mode's tables name each row's namespace first."""
    if not _seed_mode():
        return columns, list(rows)
    return ("namespace", *columns), [(f["namespace"], *row) for f, row in zip(found, rows, strict=True)]


def _with_namespace(namespace: str | None, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Seed mode's listings name each row's namespace (first); a single namespace's rows stay as they were."""
    return rows if namespace is None else [{"namespace": namespace, **row} for row in rows]


@admin_app.command(
    "enqueue", epilog="Example: mcm-tasks admin enqueue machineset shoot--dev--demo/worker-a-5f7c9"
)
@clean_errors
def admin_enqueue(kind: str, key: str, namespace: str = NAMESPACE) -> None:
    """Reconcile one key now (coalesces with a waiting message)."""
    from mcm_tasks.queue import enqueue

    check_kind(kind)
    with tenant(namespace, key):
        published = enqueue(kind, key)
    console.print(f"{kind} {key}: " + ("enqueued" if published else "already waiting or running (coalesced)"))


QUEUE_LEGEND = """\
messages   Celery messages in the queue's Redis list (not yet taken by a worker)
waiting    keys with a message on its way (the workqueue depth, coalesced per key)
delayed    keys waiting for a requeue-after or an error backoff (admin delayed)
running    keys whose reconcile runs now (admin running)
dirty      running keys that got an event meanwhile: each runs once more when it ends
failing    keys whose last reconcile failed, retried at the backoff forever (admin failing)
adds       keys added since the queues began (mcm_workqueue_adds_total)
retries    reconciles retried after a failure (mcm_workqueue_retries_total)
recovered  messages restored from dead workers (mcm_workqueue_recovered_total)"""


QUEUE_COLUMNS = ("queue", "messages", "waiting", "delayed", "running", "dirty", "failing", "adds", "retries",
                 "recovered")  # fmt: skip


def _queue_rows(stats: Sequence[Any]) -> list[tuple[Any, ...]]:
    return [(s.kind, s.queued_messages, s.pending, s.delayed, s.running, s.dirty, s.failing, s.adds,
             s.retries, s.recovered) for s in stats]  # fmt: skip


def seed_summary(per_namespace: Sequence[tuple[str, Sequence[Any]]]) -> list[dict[str, Any]]:
    """Seed mode's ``admin queues``: one row per served namespace, its queues' figures summed, and
    each queue's own row under ``queues`` (pure)."""
    out = []
    for namespace, stats in per_namespace:
        rows = [dict(zip(QUEUE_COLUMNS, row, strict=True)) for row in _queue_rows(stats)]
        totals = {c: sum(int(r[c]) for r in rows) for c in QUEUE_COLUMNS[1:]}
        out.append({"namespace": namespace, **totals, "queues": rows})
    return out


@admin_app.command("queues", epilog="Example: mcm-tasks admin queues --output json")
@clean_errors
def admin_queues(namespace: str = LIST_NAMESPACE, output: Output = OUTPUT) -> None:
    """Depth and state of every queue, with a legend. In seed mode without --namespace: one row per
    served namespace (its queues summed)."""
    from mcm_tasks.queue.stats import read_many, read_stats

    held = standby.read(get_redis())
    if held is not None and output is Output.JSON:
        # on stderr: the JSON on stdout keeps its shape
        errors.print(held.describe(), markup=False, highlight=False, soft_wrap=True)

    def explained(body: Any) -> Callable[[], Any]:
        def table() -> Any:
            if held is not None:  # first: the one line that explains every other number here
                console.print(held.describe(), style="bold", markup=False, highlight=False, soft_wrap=True)
            console.print(body)
            return QUEUE_LEGEND

        return table

    if _seed_mode() and not namespace:
        from mcm_tasks.tenancy import process_settings, tenant_settings

        base = process_settings()
        served = served_now(base)
        stats = read_many(None, [tenant_settings(base, ns) for ns in served])
        summary = seed_summary(list(zip(served, stats, strict=True)))
        columns = ("namespace", *QUEUE_COLUMNS[1:])
        rows = [tuple(row[c] for c in columns) for row in summary]
        if rows:
            rows.append(("(all)", *(sum(int(r[i]) for r in rows) for i in range(1, len(columns)))))
        body = _table(columns, rows, "seed mode: no namespace served yet")
        emit(output, summary, explained(body))
        return
    with tenant(namespace):
        rows = _queue_rows(read_stats())
    emit(output, [dict(zip(QUEUE_COLUMNS, row, strict=True)) for row in rows],
         explained(_table(QUEUE_COLUMNS, rows, "")))  # fmt: skip


@admin_app.command(
    "inspect", epilog="Example: mcm-tasks admin inspect machine shoot--dev--demo/worker-a-5f7c9-abcde"
)
@clean_errors
def admin_inspect(kind: str, key: str, namespace: str = NAMESPACE, output: Output = OUTPUT) -> None:
    """One key: idle / waiting / delayed until T / running on W since T / failing N times (last
    error), and its last runs."""
    check_kind(kind)
    with tenant(namespace, key):
        found = inspect_key(kind, key)

    def table() -> Any:
        console.print(f"{found.kind} {found.key}: {found.state}", markup=False, highlight=False)
        for line in found.summary:
            console.print(f"  {line}", markup=False, highlight=False)
        rows = [
            (when(r.start), "-" if r.duration is None else f"{r.duration:.3f}s", r.worker,
             r.outcome or ("running, or its worker died" if r.end is None else ""), r.error)
            for r in found.history
        ]  # fmt: skip
        return _table(("started", "took", "worker", "outcome", "error"), rows, "  no runs recorded")

    emit(output, found, table)


@admin_app.command(
    "why", epilog="Example: mcm-tasks admin why machinedeployment/shoot--dev--demo/worker-a-z1 --output json"
)
@clean_errors
def admin_why(
    target: str = typer.Argument(
        ..., metavar="KIND/NAMESPACE/NAME", help="machine, machineset, machinedeployment or node (node/NAME)."
    ),
    namespace: str = typer.Option(
        "",
        "--namespace",
        "-n",
        help="Seed mode: the served namespace (default: the target's; a Node needs it).",
    ),
    output: Output = OUTPUT,
) -> None:
    """What one object waits for and since when: its conditions, its queue state, its last runs, its
    recent Events and, for a set or deployment, the machines that hold it up."""
    from mcm_tasks.admin.why import gather, parse_target

    parts = target.split("/")
    with tenant(namespace or (parts[1] if len(parts) == 3 else "")):
        found = gather(parse_target(target))

    def table() -> Any:
        say = functools.partial(console.print, markup=False, highlight=False)
        where = f"{found.namespace}/{found.name}" if found.namespace else found.name
        say(f"{found.kind} {where}: {found.status}")
        if found.trace_id:
            say(f"trace: {found.trace_id}")
        say("waits for:")
        for line in found.waits:
            say(f"  - {line}")
        if found.conditions:
            say("conditions:")
            console.print(
                _table(
                    ("type", "status", "reason", "since", "message"),
                    [(c.type, c.status, c.reason, c.since, c.message) for c in found.conditions],
                    "",
                )
            )
        if found.holders:
            say("machines holding it up:")
            console.print(
                _table(
                    ("machine", "phase", "waits for", "for"),
                    [(h.name, h.phase, h.waits_for, f"{h.seconds:.0f}s") for h in found.holders],
                    "",
                )
            )
        for k in found.queue:
            say(f"queue {k.kind}: {k.state}")
            runs = [
                (
                    when(r.start),
                    "-" if r.duration is None else f"{r.duration:.3f}s",
                    r.worker,
                    r.outcome or ("running, or its worker died" if r.end is None else ""),
                    r.error,
                )
                for r in k.history[:5]
            ]
            console.print(
                _table(("started", "took", "worker", "outcome", "error"), runs, "  no runs recorded")
            )
        if not found.queue:
            say("queue: never queued (or its history expired)")
        say("recent events:" if found.events else "recent events: none")
        return _table(
            ("last", "type", "reason", "object", "count", "message"),
            [(e.last, e.type, e.reason, e.object, e.count, e.message) for e in found.events],
            "",
        )

    emit(output, found, table)


@admin_app.command("running", epilog="Example: mcm-tasks admin running --kind machine-termination")
@clean_errors
def admin_running(kind: str = KIND_FILTER, namespace: str = LIST_NAMESPACE, output: Output = OUTPUT) -> None:
    """Keys whose reconcile runs now, where and since when."""
    from mcm_tasks.queue.state import running

    now = time.time()
    only = _kind_or_none(kind)
    found = []
    for ns in each_tenant(namespace):
        found += _with_namespace(
            ns, [{**r.model_dump(), "worker": worker_of(r.kind, r)} for r in running(only)]
        )
    rows = [(r["kind"], r["key"], r["worker"] or "?", when(r["started"]), f"{now - r['started']:.1f}s")
            for r in found]  # fmt: skip
    columns: tuple[str, ...] = ("kind", "key", "worker", "since", "for")
    columns, shown = _seed_columns(columns, rows, found)
    emit(output, found, lambda: _table(columns, shown, "nothing running"))


@admin_app.command("delayed", epilog="Example: mcm-tasks admin delayed --kind machine")
@clean_errors
def admin_delayed(
    kind: str = KIND_FILTER,
    limit: int = typer.Option(1000, help="At most this many per kind (earliest first)."),
    namespace: str = LIST_NAMESPACE,
    output: Output = OUTPUT,
) -> None:
    """Keys waiting for a requeue-after or an error backoff, earliest first."""
    from mcm_tasks.queue.state import delayed

    now = time.time()
    only = _kind_or_none(kind)
    found: list[dict[str, Any]] = []
    for ns in each_tenant(namespace):
        found += _with_namespace(ns, [d.model_dump() for d in delayed(only, limit)])
    columns: tuple[str, ...] = ("kind", "key", "due", "in")
    rows = [(d["kind"], d["key"], when(d["due"]), f"{d['due'] - now:.1f}s") for d in found]
    columns, shown = _seed_columns(columns, rows, found)
    emit(output, found, lambda: _table(columns, shown, "nothing delayed"))


@admin_app.command("failing", epilog="Example: mcm-tasks admin failing --kind machine --output json")
@clean_errors
def admin_failing(kind: str = KIND_FILTER, namespace: str = LIST_NAMESPACE, output: Output = OUTPUT) -> None:
    """Keys whose reconciles fail, with their streak and last error (retried automatically)."""
    from mcm_tasks.queue.state import failing

    now = time.time()
    only = _kind_or_none(kind)
    found: list[dict[str, Any]] = []
    for ns in each_tenant(namespace):
        found += _with_namespace(ns, [f.model_dump() for f in failing(only)])
    rows = [
        (f["kind"], f["key"], f["count"], when(f["since"]), f"{f['retry_at'] - now:.1f}s",
         ("quarantined; " if f["quarantined"] else "") + f"{f['error']}: {f['message']}")
        for f in found
    ]  # fmt: skip
    columns: tuple[str, ...] = ("kind", "key", "failures", "since", "next retry in", "last error")
    columns, shown = _seed_columns(columns, rows, found)
    emit(output, found, lambda: _table(columns, shown, "no failing keys"))


@admin_app.command("replay", epilog="Example: mcm-tasks admin replay --failing --kind machine")
@clean_errors
def admin_replay(
    kind: str = typer.Argument("", help="Kind of the key."),
    key: str = typer.Argument("", help="The key (namespace/name, or a safety job)."),
    failing_: bool = typer.Option(False, "--failing", help="Replay every failing key (of --kind)."),
    only_kind: str = KIND_FILTER,
    namespace: str = typer.Option(
        "",
        "--namespace",
        "-n",
        help="Seed mode: the served namespace (default: the key's; with --failing, every served one).",
    ),
    output: Output = OUTPUT,
) -> None:
    """Forget a key's failure streak and reconcile it now; or every failing key."""
    from mcm_tasks.queue.state import replay, replay_failing

    if failing_:
        if kind or key:
            raise typer.BadParameter("give KIND KEY, or --failing, not both")
        only = _kind_or_none(only_kind)
        n = sum(replay_failing(only) for _ in each_tenant(namespace))
        emit(output, {"replayed": n}, lambda: f"replayed {n} failing keys")
        return
    if not kind or not key:
        raise typer.BadParameter("give KIND KEY, or --failing")
    check_kind(kind)
    with tenant(namespace, key):
        was_failing = replay(kind, key) if exists(kind, key) else None
    if was_failing is None:
        raise NotFound(f"no {kind} {key!r} in the mirror")
    text = f"replayed {kind} {key}" + ("" if was_failing else " (it was not failing; enqueued)")
    emit(output, {"kind": kind, "key": key, "was_failing": was_failing}, lambda: text)


def _freeze(kind: str, key: str, frozen: bool, namespace: str, output: Output) -> None:
    from mcm_tasks.admin.freeze import set_frozen

    check_kind(kind)
    with tenant(namespace, key):
        metadata = set_frozen(kind, key, frozen)
    name = f"{metadata.get('namespace', '')}/{metadata.get('name', key)}"
    text = (f"froze {kind} {name}" if frozen
            else f"asked the safety controller to unfreeze {kind} {name} (it runs now)")  # fmt: skip
    body = {"kind": kind, "key": name, "labels": metadata.get("labels") or {},
            "annotations": metadata.get("annotations") or {}}  # fmt: skip
    emit(output, body, lambda: text)


@admin_app.command(
    "freeze", epilog="Example: mcm-tasks admin freeze machinedeployment shoot--dev--demo/worker-a"
)
@clean_errors
def admin_freeze(kind: str, key: str, namespace: str = NAMESPACE, output: Output = OUTPUT) -> None:
    """Freeze a MachineSet or MachineDeployment (MCM's ``freeze`` label): no scale-up."""
    _freeze(kind, key, True, namespace, output)


@admin_app.command(
    "unfreeze", epilog="Example: mcm-tasks admin unfreeze machineset shoot--dev--demo/worker-a-5f7c9"
)
@clean_errors
def admin_unfreeze(kind: str, key: str, namespace: str = NAMESPACE, output: Output = OUTPUT) -> None:
    """Unfreeze it (MCM's ``safety.machine.sapcloud.io/unfreeze`` annotation)."""
    _freeze(kind, key, False, namespace, output)


@admin_app.command("held", epilog="Example: mcm-tasks admin held -n shoot--dev--demo")
@clean_errors
def admin_held(
    namespace: str = typer.Option(
        "", "--namespace", "-n", help="Namespace (default: MCM_NAMESPACE; in seed mode every served one)."
    ),
    output: Output = OUTPUT,
) -> None:
    """Machines held by a node-deletion storm (kept, with their VMs, although their Node was deleted)."""
    from mcm_tasks.admin.holds import list_held

    if not _seed_mode():
        found = list_held(namespace or None)
    else:
        from mcm_tasks.kube.target_secret import TargetSecretError

        found = []
        for ns in each_tenant(namespace):
            try:
                found += list_held(ns)
            except TargetSecretError as err:  # one namespace's broken Secrets hide only its machines
                if namespace:
                    raise
                errors.print(f"warning: {ns} not read: {err}", markup=False, highlight=False, soft_wrap=True)
    rows = [(h.namespace, h.machine, h.deployment, h.node, h.reason, h.since) for h in found]
    columns = ("namespace", "machine", "deployment", "node", "reason", "since")
    emit(output, found, lambda: _table(columns, rows, "no machine is held"))


@admin_app.command(
    "release", epilog="Example: mcm-tasks admin release deployment/worker-a-z1 -n shoot--dev--demo"
)
@clean_errors
def admin_release(
    target: str = typer.Argument(..., help="deployment/<name> or machine/<name>"),
    namespace: str = typer.Option(
        "", "--namespace", "-n", help="Namespace (default: MCM_NAMESPACE; seed mode: a served one, required)."
    ),
    output: Output = OUTPUT,
) -> None:
    """End a node-deletion storm's hold: the machines stay, their health check decides again."""
    from mcm_tasks.admin.holds import release

    with tenant(namespace):
        released = release(target, namespace or None)
    text = f"released {len(released)} machines of {target}" + (f": {', '.join(released)}" if released else "")
    emit(output, {"target": target, "released": released}, lambda: text)


@deadletter_app.command("ls", epilog="Example: mcm-tasks admin deadletter ls")
@clean_errors
def deadletter_ls(namespace: str = LIST_NAMESPACE, output: Output = OUTPUT) -> None:
    """Failing keys (an alias of ``admin failing``)."""
    admin_failing("", namespace, output)


@deadletter_app.command("replay", epilog="Example: mcm-tasks admin deadletter replay --all")
@clean_errors
def deadletter_replay(
    kind: str = typer.Argument("", help="Kind of the key to replay."),
    key: str = typer.Argument("", help="The key."),
    all_: bool = typer.Option(False, "--all", help="Replay every failing key."),
    namespace: str = NAMESPACE,
) -> None:
    """Forget a key's failures and reconcile it now (an alias of ``admin replay``)."""
    admin_replay(kind, key, all_, "", namespace, Output.TABLE)


@admin_app.command("seed", epilog="Example: mcm-tasks admin seed --output json")
@clean_errors
def admin_seed(output: Output = OUTPUT) -> None:
    """Seed mode: the namespaces this installation serves, since when, and any problem serving one
    (its target Secrets missing or refused, its informer stopped)."""
    found = seed_entries()
    rows = [(s.namespace, "-" if s.since is None else when(s.since), s.problem or "served") for s in found]
    emit(
        output,
        found,
        lambda: _table(("namespace", "since", "state"), rows, "seed mode: no namespace served yet"),
    )
