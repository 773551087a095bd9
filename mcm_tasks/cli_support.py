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


#: ``command_settings(clusters=…)``: load no kubeconfig, only those given (not empty), or all
NO_CLUSTERS, GIVEN_CLUSTERS, ALL_CLUSTERS = "none", "given", "all"


def command_settings(flags: Sequence[str], clusters: str = NO_CLUSTERS) -> Settings:
    """Settings from the environment and ``flags``; then the kubeconfigs ``clusters`` names loaded
    once (a missing or empty token file, a failing exec plugin, ``inClusterConfig`` outside a pod),
    so that a bad one is one line naming the flag and the path, and exit code 2, before anything
    runs. The informer needs both clusters at once (``ALL_CLUSTERS``); a worker builds its clients
    at its first reconcile that needs them, and some run none (a worker of only the safety queue in
    a test), so it checks what is given (``GIVEN_CLUSTERS``): an empty setting stays lazy."""
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
    if clusters != NO_CLUSTERS:
        check_kubeconfigs(settings, only_given=clusters == GIVEN_CLUSTERS)
    return settings


def check_kubeconfigs(settings: Settings, only_given: bool = False) -> None:
    from mcm_tasks.kube.clients import TARGET_DISABLED, ClusterConfigError, load_configuration

    try:
        for setting in ("control_kubeconfig", "target_kubeconfig"):
            value = getattr(settings, setting)
            if (setting == "target_kubeconfig" and value == TARGET_DISABLED) or (only_given and not value):
                continue
            if setting == "target_kubeconfig" and settings.seed_mode:
                continue  # each served namespace's target comes from its Secrets (mcm_tasks.tenancy)
            load_configuration(value, setting)
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
