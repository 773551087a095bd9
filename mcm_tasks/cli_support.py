"""What every long-running command does first: settings from the environment plus MCM-style flags
(``--machine-health-timeout=5m``), with a bad value reported as a usage error naming the flag.

An upstream command line must start as it is (a drop-in swap for Go MCM): upstream flags that
have no meaning here (``--profiling``, ``--vmodule``, ``--kube-api-content-type`` …) are accepted and
named in one start-up warning; ``--v`` sets the log level unless the command's ``--loglevel`` does."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import typer

from mcm_tasks.settings import (
    LEASE_LOCKS,
    Settings,
    SettingsError,
    configure,
    get_settings,
    split_flags,
    take_verbosity,
)

log = logging.getLogger(__name__)


def command_settings(flags: Sequence[str], clusters: bool = False) -> Settings:
    """Settings from the environment and ``flags``; with ``clusters``, the kubeconfigs loaded once
    (a missing or empty token file, a failing exec plugin, ``inClusterConfig`` outside a pod) so
    that a bad one is one line naming the flag and the path, and exit code 2, before anything runs."""
    global _verbosity
    try:
        verbosity, flags = take_verbosity(flags)
        overrides, ignored = split_flags(flags)
        settings = configure(overrides) if flags else get_settings()
    except SettingsError as err:
        raise typer.BadParameter(str(err)) from None
    _verbosity = verbosity or 0
    for line in startup_warnings(settings, ignored):
        log.warning("%s", line)
    if clusters:
        check_kubeconfigs(settings)
    return settings


def check_kubeconfigs(settings: Settings) -> None:
    from mcm_tasks.kube.clients import TARGET_DISABLED, ClusterConfigError, load_configuration

    try:
        load_configuration(settings.control_kubeconfig, "control_kubeconfig")
        if settings.target_kubeconfig != TARGET_DISABLED:
            load_configuration(settings.target_kubeconfig, "target_kubeconfig")
    except ClusterConfigError as err:
        typer.echo(f"Error: {' '.join(str(err).split())}", err=True)
        raise typer.Exit(2) from None


#: upstream's ``--v`` of this process's command line (0 when not given)
_verbosity = 0
#: klog levels from which upstream logs what we log at debug level (MCM logs routine detail at V(4))
DEBUG_VERBOSITY = 4


def log_level(option: str) -> str:
    """A command's ``--loglevel`` if given, else upstream's ``--v``: 4 and above is debug, below info."""
    if option:
        return option
    return "debug" if _verbosity >= DEBUG_VERBOSITY else "info"


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
