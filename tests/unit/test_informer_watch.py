"""How a reflector asks for its watches (no server: the request is caught as it is made)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from informers.informer import Reflector
from informers.resources import WATCHES
from mcm_tasks import kinds
from mcm_tasks.kube import rest
from mcm_tasks.settings import Settings


class Asked(Exception):
    pass


def test_watches_ask_to_end_between_the_watch_timeout_and_twice_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """client-go's reflector asks for minWatchTimeout × [1, 2): a seed informer's 550 watches were
    reopened every 4.5-5 minutes (0.9-1.0 ×), each a request, a third of its watches' idle CPU."""
    asked: list[int] = []

    def open_request(*_: Any, query: dict[str, str], **__: Any) -> None:
        asked.append(int(query["timeoutSeconds"]))
        raise Asked()

    monkeypatch.setattr(rest, "open_request", open_request)
    settings = Settings(watch_timeout=300)
    reflector = Reflector(WATCHES[kinds.MACHINE_CLASS], None, "ns", [].append, settings, threading.Event())  # type: ignore[arg-type]
    for _ in range(300):
        with pytest.raises(Asked):
            reflector._watch()
    assert min(asked) >= 300 and max(asked) < 600
    assert max(asked) - min(asked) > 200, "spread over the range"
    assert sum(asked) / len(asked) > 400, "about 7.5 minutes on average"
