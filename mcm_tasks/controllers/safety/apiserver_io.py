"""The API-server check's I/O: the probes, the freeze state in Redis, and the unfreeze writes.

Both the freeze flag (``controllers.common.frozen``, read by every machine reconcile) and the time
the servers were first seen down live in Redis: beat and worker processes come and go, and whichever
worker runs the next check must see the timer the previous one started.

An unfreeze that fails half-way (a status write refused) leaves the controller frozen and raises, so
the check is retried: the machines it did reset stay reset, the rest get theirs on the retry.
"""

from __future__ import annotations

import copy
import logging
import os
import time
import weakref
from typing import Any

from kubernetes.client import ApiClient, Configuration
from kubernetes.client.exceptions import ApiException

from mcm_tasks import kinds
from mcm_tasks.api import Machine, MachineOperationType, MachinePhase, MachineState
from mcm_tasks.controllers.common.frozen_io import is_frozen, set_frozen
from mcm_tasks.controllers.common.scope import PassScope
from mcm_tasks.controllers.common.status_io import write_operation
from mcm_tasks.controllers.safety import reads_io
from mcm_tasks.controllers.safety.apiserver import PROBE_NAME, RESET_DESCRIPTION, FreezeAction, decide
from mcm_tasks.controllers.safety.scope import SafetyScope
from mcm_tasks.kinds import machine_queue_items
from mcm_tasks.kube import ops, rest
from mcm_tasks.kube.errors import describe, is_conflict, is_not_found
from mcm_tasks.kube.resources import Resource
from mcm_tasks.queue import Requeue, enqueue_after
from mcm_tasks.redisdb import get_redis, rkey

log = logging.getLogger(__name__)

#: a probe gives up after this long at most (it is shorter when the status-check timeout is)
PROBE_TIMEOUT_MAX = 10.0


def down_since_key() -> str:
    return rkey("safety", "apiserver-down-since")


#: client configuration (a server and its credentials) → (pid, the probe's client). Weak: a tenant's
#: target rebuilt from rotated Secrets drops its configuration, and its probe client (a pool, maybe
#: an open socket) goes with it instead of piling up for the life of the worker. The pid: a forked
#: child builds its own rather than use its parent's sockets.
_probe_clients: weakref.WeakKeyDictionary[Configuration, tuple[int, ApiClient]] = weakref.WeakKeyDictionary()


#: how long a good answer of the control API server to one namespace's check stands for another's
#: (``probe_control``)
CONTROL_ANSWER_SHARED = 5.0
#: client configuration of the control cluster → (pid, when, namespace) of its last good answer
_control_up: weakref.WeakKeyDictionary[Configuration, tuple[int, float, str]] = weakref.WeakKeyDictionary()
#: the clock of those answers (a test moves it)
_now = time.monotonic


def probe_client(api: ApiClient) -> ApiClient:
    """A client of the same server and credentials that neither retries nor waits for the shared rate
    limit: a probe measures the server, so one attempt within its timeout is the answer (the regular
    client retries a 503 with Retry-After three times, and a throttled budget is not an outage).

    One per configuration, not per client: in seed mode every namespace's control client is its own
    (a budget of its own) over the process's one configuration, and a probe client per namespace
    found its pooled connection closed by the server's idle timeout at most runs (each namespace
    probes once a minute, on any worker): a TLS handshake per probe. Shared, the control server's
    fifty probes a minute keep one connection warm. Each target has its own configuration."""
    configuration = api.configuration
    found = _probe_clients.get(configuration)
    if found is None or found[0] != os.getpid():
        copied = copy.deepcopy(configuration)
        copied.retries = False
        found = _probe_clients[configuration] = (os.getpid(), ApiClient(copied))
    return found[1]


def probe(api: ApiClient, res: Resource, namespace: str | None, timeout: float) -> bool:
    """Whether the server answers for ``res`` (see ``apiserver``: NotFound is the good answer).

    Upstream: ``isAPIServerUp``.
    """
    try:
        rest.request(probe_client(api), "GET", res.path(namespace, PROBE_NAME), timeout=timeout)
    except ApiException as err:
        if is_not_found(err):
            return True
        log.warning("API server %s unhealthy: %s", api.configuration.host, describe(err))
        return False
    except Exception as err:  # refused, reset, timed out: all mean "down"
        log.warning("API server %s unreachable: %s: %s", api.configuration.host, type(err).__name__, err)
        return False
    return True


def probe_control(api: ApiClient, namespace: str, timeout: float) -> bool:
    """Whether the control API server answers, for ``namespace``'s check: the probe, or another
    namespace's good answer from this process within ``CONTROL_ANSWER_SHARED``.

    In seed mode every namespace's check probes the one control server (each namespace's client
    is its own, over the process's one configuration), and beat fires the fifty checks of a period
    together: fifty GETs a minute that all say the same. A good answer stands for the other
    namespaces' checks for a few seconds (the answer is a few seconds older than the check, against
    a period of a minute between checks); a namespace's own earlier answer never stands for its next
    check (its re-check asks the server again), and a failed probe is never shared: while the server
    may be down every namespace asks for itself, so no freeze waits on another's answer. A
    single-namespace installation probes at every check, as upstream."""
    configuration = api.configuration
    shared = _control_up.get(configuration)
    if (
        shared is not None
        and shared[0] == os.getpid()
        and shared[2] != namespace
        and _now() - shared[1] < CONTROL_ANSWER_SHARED
    ):
        return True
    up = probe(api, kinds.MACHINE.resource, namespace, timeout)
    if up:
        _control_up[configuration] = (os.getpid(), _now(), namespace)
    else:
        _control_up.pop(configuration, None)
    return up


def check_apiservers(scope: SafetyScope) -> Requeue | None:
    settings = scope.settings
    timeout = settings.machine_safety_apiserver_statuscheck_timeout
    probe_timeout = max(0.5, min(PROBE_TIMEOUT_MAX, timeout or PROBE_TIMEOUT_MAX))
    control_up = probe_control(scope.api, settings.namespace, probe_timeout)
    target = scope.target
    target_up = True if target is None else probe(target, kinds.NODE.resource, None, probe_timeout)
    client = get_redis()
    raw = client.get(down_since_key())
    down_since = float(raw) if raw else None
    now = time.time()
    decision = decide(control_up, target_up, is_frozen(client), down_since, now, timeout)
    down = ", ".join(n for n, up in (("control", control_up), ("target", target_up)) if not up)
    match decision.action:
        case FreezeAction.START_TIMER:
            client.set(down_since_key(), repr(now), nx=True)
            log.warning(
                "%s API server down; the machine controller freezes in %.0fs unless it answers", down, timeout
            )
        case FreezeAction.WAIT:
            log.warning(
                "%s API server still down for %.1fs of %.0fs", down, now - (down_since or now), timeout
            )
        case FreezeAction.FREEZE:
            set_frozen(True, client)
            log.error("%s API server down for over %.0fs: machine controller frozen", down, timeout)
        case FreezeAction.STAY_FROZEN:
            log.warning("%s API server still down: machine controller stays frozen", down)
        case FreezeAction.CLEAR_TIMER:
            client.delete(down_since_key())
            log.info("API servers answer again before the freeze timeout")
        case FreezeAction.UNFREEZE:
            unfreeze(scope)
    return None if decision.recheck_after is None else Requeue(decision.recheck_after)


def unfreeze(scope: PassScope[Any]) -> None:
    """Give Unknown machines their health timeout back, reconcile every machine soon, then unfreeze."""
    settings = scope.settings
    machines = reads_io.machines_live(scope)
    reset = 0
    for machine in machines:
        if machine.status.current_status.phase == MachinePhase.UNKNOWN and reset_health_timeout(
            scope, machine
        ):
            reset += 1
    # after the status-check timeout (MCM waits a fixed 30 s, the default of that timeout): time for
    # kubelets to report again, so the health check does not judge nodes on conditions from the outage
    delay = settings.machine_safety_apiserver_statuscheck_timeout
    for kind, key in machine_queue_items(machines):
        enqueue_after(kind, key, delay)
    client = get_redis()
    set_frozen(False, client)
    client.delete(down_since_key())
    log.warning(
        "API servers answer again: machine controller unfrozen; %d Unknown machines reset to Running, "
        "%d machines reconcile in %.0fs",
        reset,
        len(machines),
        delay,
    )


def reset_health_timeout(scope: PassScope[Any], machine: Machine) -> bool:
    """Unknown → Running with MCM's description (re-read on a Conflict); False when it changed meanwhile."""
    current = [machine]

    def attempt() -> bool:
        obj = current[0]
        if obj.status.current_status.phase != MachinePhase.UNKNOWN:
            return False
        try:
            write_operation(
                scope,
                obj,
                RESET_DESCRIPTION,
                MachineState.SUCCESSFUL,
                MachineOperationType.HEALTH_CHECK,
                phase=MachinePhase.RUNNING,
            )
        except Exception as err:
            if is_conflict(err):
                fresh = ops.get(
                    scope.api,
                    kinds.MACHINE.resource,
                    obj.metadata.name or "",
                    obj.metadata.namespace,
                )
                current[0] = Machine.model_validate(fresh)
            raise
        return True

    try:
        return ops.retry_on_conflict(attempt)
    except Exception as err:
        if is_not_found(err):
            return False
        raise
