"""Which queue a controller hands an object to."""

from __future__ import annotations

from mcm_tasks.api import Machine


def machine_queue_items(machines: list[Machine]) -> list[tuple[str, str]]:
    return [("machine-termination" if m.metadata.is_deleting else "machine", m.key) for m in machines]
