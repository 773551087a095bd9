"""The deletion flow serves the machine-termination queue of the queue contract."""

from __future__ import annotations

import importlib

from mcm_tasks.controllers.machine import deletion, register_termination
from mcm_tasks.queue import registry


def test_termination_queue_is_served_by_the_deletion_flow() -> None:
    registry.unregister_all()
    try:
        importlib.reload(register_termination)
        assert "machine-termination" in registry.registered_kinds()
        assert registry.get_reconciler("machine-termination") is deletion.reconcile_termination
    finally:
        registry.unregister_all()
