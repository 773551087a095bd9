"""What every long-running command does first: settings from the environment plus MCM-style flags
(``--machine-health-timeout=5m``), with a bad value reported as a usage error naming the flag.

An upstream command line must start as it is (a drop-in swap for Go MCM): upstream flags that
have no meaning here (``--profiling``, ``--v``, ``--kube-api-content-type`` …) are accepted and
named in one start-up warning."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import typer

from mcm_tasks.settings import LEASE_LOCKS, Settings, SettingsError, configure, get_settings, split_flags

log = logging.getLogger(__name__)


def command_settings(flags: Sequence[str]) -> Settings:
    try:
        overrides, ignored = split_flags(flags)
        settings = configure(overrides) if flags else get_settings()
    except SettingsError as err:
        raise typer.BadParameter(str(err)) from None
    for line in startup_warnings(settings, ignored):
        log.warning("%s", line)
    return settings


def startup_warnings(settings: Settings, ignored: Sequence[str]) -> list[str]:
    """The warnings a start-up logs: upstream flags accepted and not acted on (one line naming
    them all), and a migration lock of which only the Lease half is kept."""
    lines = []
    if ignored:
        names = ", ".join(f"--{n}" for n in ignored)
        lines.append(f"upstream flags accepted and ignored (no effect in mcm-tasks): {names}")
    lock = settings.leader_elect_resource_lock
    if lock != LEASE_LOCKS[0]:
        lines.append(f"--leader-elect-resource-lock={lock}: only its Lease half is used")
    return lines
