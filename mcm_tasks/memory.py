"""A long-lived process's resident memory kept near what it uses (issue 28: memory at rest).

Python hands objects above 512 bytes (JSON bodies, dict tables, long strings) to the C library's
``malloc``. glibc gives every thread that allocates an arena of its own, up to eight per core, and
returns freed memory to the system only from the top of each heap: a worker whose reconciles run
on pool threads, beside the keeper's and the event dispatcher's threads, ends a burst of 1000
machines holding tens of MB it no longer uses, spread over as many arenas. Two glibc calls answer
it, both no-ops where the C library is not glibc (``ctypes`` finds no ``mallopt``):

- ``limit_arenas``: at most ``ARENAS`` arenas (``M_ARENA_MAX``, what ``MALLOC_ARENA_MAX=2`` sets),
  set at start-up before any thread allocates;
- ``Trimmer``: at most once per ``TRIM_PERIOD`` while a process works, and once more that long
  after its last work, ``malloc_trim(0)`` returns the free pages of every arena to the system (a
  few ms of CPU); a process at rest is not woken for it. Not "after a quiet spell": a real fleet at
  rest still reconciles (health rechecks, heartbeats), so a worker is never quiet for long.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from typing import Any, Final

log = logging.getLogger(__name__)

#: glibc's ``mallopt`` parameter number of ``M_ARENA_MAX``
M_ARENA_MAX: Final = -8
#: arenas per process: the threads of a worker contend little for malloc (they hold the GIL)
ARENAS: Final = 2
#: at most one trim per this many seconds, the last this long after the last work
TRIM_PERIOD: Final = 10.0


def _libc() -> Any:
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt, libc.malloc_trim  # noqa: B018  (glibc only)
    except (OSError, AttributeError):
        return None
    return libc


_LIBC: Final = _libc()


def limit_arenas(arenas: int = ARENAS) -> bool:
    """Cap glibc's malloc arenas (before the process starts its threads); False where not glibc."""
    return bool(_LIBC is not None and _LIBC.mallopt(M_ARENA_MAX, arenas) == 1)


def trim() -> bool:
    """Return the free pages of every malloc arena to the system; whether any was returned."""
    return bool(_LIBC is not None and _LIBC.malloc_trim(0) == 1)


class Trimmer:
    """Trims ``period`` after work (``worked()`` counts it), at most once per ``period``."""

    def __init__(self, period: float = TRIM_PERIOD) -> None:
        self.period = period
        self.trims = 0
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-trimmer", daemon=True)

    def worked(self) -> None:
        """Some work was done (a reconcile, a batch of events): trim within a period."""
        self._wake.set()

    def start(self) -> Trimmer:
        if _LIBC is not None:
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()  # at rest: asleep until work comes
            if self._stop.wait(self.period):  # the work goes on meanwhile: one trim per period
                return
            self._wake.clear()  # work from now on asks for the next trim
            trim()
            self.trims += 1
