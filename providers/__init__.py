"""Cloud providers behind the Driver contract, found through the ``mcm_tasks.providers``
entry-point group and keyed by ``MachineClass.provider`` (e.g. ``AWS``, ``local``)."""

from __future__ import annotations

from functools import cache
from importlib.metadata import entry_points
from typing import Any

from providers.driver import Driver
from providers.errors import Code, MachineError

ENTRY_POINT_GROUP = "mcm_tasks.providers"

__all__ = ["Code", "Driver", "MachineError", "UnknownProviderError", "get_driver", "provider_names"]


class UnknownProviderError(LookupError):
    """No installed provider answers to this name."""


def provider_names() -> list[str]:
    """The installed providers' names. Read once per process, as ``get_driver`` builds each driver
    once: scanning the installed packages' entry points cost the MachineClass reconcile, which asks
    on every pass, about 10 ms."""
    return list(_provider_names())


@cache
def _provider_names() -> tuple[str, ...]:
    return tuple(sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)))


@cache
def get_driver(name: str, **options: Any) -> Driver:
    """One driver instance per provider name (and options) and process: drivers keep client
    caches, so they must be shared, not rebuilt per reconcile. Without options, a provider whose
    class has ``from_settings`` is built from the process's settings (what workers do)."""
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            factory = ep.load()
            from_settings = None if options else getattr(factory, "from_settings", None)
            driver = from_settings() if from_settings is not None else factory(**options)
            if not isinstance(driver, Driver):
                raise TypeError(f"provider {name!r} ({ep.value}) does not implement the Driver contract")
            return driver
    raise UnknownProviderError(
        f"unknown provider {name!r}: installed providers are {', '.join(provider_names()) or 'none'}"
    )
