"""The spacing of a MachineSet's passes (``spacing``) kept in Redis, where every worker finds it: a
pass may run on any worker pod, and a pod SIGKILLed mid-pass leaves no spacing behind (the key is
written after the pass, and expires when it no longer holds anything back)."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from contextvars import ContextVar

import redis

from mcm_tasks.controllers.machineset.spacing import held_back, spacing
from mcm_tasks.queue import Requeue
from mcm_tasks.redisdb import get_redis, rkey
from mcm_tasks.settings import get_settings

log = logging.getLogger(__name__)

#: whether the running pass created or deleted machines (``acted``): such a pass is not spaced
_ACTED: ContextVar[bool] = ContextVar("machineset_pass_acted", default=False)


def acted() -> None:
    """The running pass created or deleted machines. Its successor is not held back: a scale-down
    of 10 000 deletes a batch a pass, and spacing those passes slowed it (527 s against 325 s); what
    grows with the square of the set is the passes that only recount it."""
    _ACTED.set(True)


def _key(key: str) -> str:
    return rkey("machineset", "not-before", key)


def spaced(reconcile: Callable[[str], Requeue | None]) -> Callable[[str], Requeue | None]:
    """``reconcile`` with its passes spaced (``--machine-set-pass-spacing``): a key whose last pass
    asked for room is handed back, requeued for when its room ends, without a read."""

    @functools.wraps(reconcile)
    def run(key: str) -> Requeue | None:
        settings = get_settings()
        if settings.machine_set_pass_spacing <= 0:
            return reconcile(key)
        client = get_redis()
        wait = held_back(_read(client, key), time.time())
        if wait > 0:
            log.debug("MachineSet %s: next pass in %.2fs (spaced by the last one's cost)", key, wait)
            return Requeue(wait, note=f"spaced: {wait:.1f}s after the last pass")
        started = time.thread_time()  # the pass's own CPU: not its waits on a busy host
        token = _ACTED.set(False)
        try:
            return reconcile(key)
        finally:
            room = (
                0.0
                if _ACTED.get()
                else spacing(
                    time.thread_time() - started,
                    settings.machine_set_pass_spacing,
                    settings.machine_updates_batch_period,
                )
            )
            _ACTED.reset(token)
            if room > 0:
                try:
                    client.set(_key(key), repr(time.time() + room), px=max(1, int(room * 1000)))
                except redis.RedisError as err:  # the pass is done: only its spacing is lost
                    log.warning("MachineSet %s: pass spacing not kept: %s", key, err)

    return run


def _read(client: redis.Redis, key: str) -> float | None:
    raw = client.get(_key(key))
    try:
        return float(raw) if raw is not None else None
    except ValueError:
        return None
