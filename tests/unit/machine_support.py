"""The machine decision tests' clock, settings (fixture, registered by tests/unit/conftest.py) and
Machine builder."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from mcm_tasks.api import Machine
from mcm_tasks.settings import Settings, load_settings

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


@pytest.fixture()
def settings() -> Settings:
    return load_settings(
        {
            "short_retry": "5s",
            "medium_retry": "3m",
            "resource_exhausted_retry": "10m",
            "machine_creation_timeout": "20m",
        }
    )


def machine(age: timedelta = timedelta(minutes=1), **spec: object) -> Machine:
    return Machine.model_validate(
        {
            "metadata": {
                "name": "m1",
                "namespace": "default",
                "resourceVersion": "7",
                "creationTimestamp": (NOW - age).isoformat(),
            },
            "spec": {"class": {"kind": "MachineClass", "name": "c1"}, **spec},
        }
    )
