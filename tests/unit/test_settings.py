from __future__ import annotations

import pytest

from mcm_tasks.durations import format_duration, parse_duration
from mcm_tasks.kinds import QUEUES
from mcm_tasks.settings import SettingsError, load_settings, parse_flags


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90.0),
        ("10m", 600.0),
        ("2h", 7200.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("300ms", 0.3),
        ("0", 0.0),
        ("45", 45.0),
        (12, 12.0),
        ("1m30.5s", 90.5),
    ],
)
def test_go_durations(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "10x", "m", "1h 30m", "abc", "5mm"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


def test_format_duration_is_go_like() -> None:
    assert format_duration(5400) == "1h30m0s"
    assert format_duration(90) == "1m30s"
    assert format_duration(0) == "0s"


def test_defaults_are_mcms(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in list(__import__("os").environ):
        if var.startswith("MCM_"):
            monkeypatch.delenv(var)
    s = load_settings()
    assert s.machine_creation_timeout == 20 * 60
    assert s.machine_health_timeout == 10 * 60
    assert s.machine_drain_timeout == 2 * 3600
    assert s.machine_max_evict_retries == 360
    assert s.machine_pv_detach_timeout == 120 and s.machine_pv_reattach_timeout == 90
    assert s.machine_safety_orphan_vms_period == 15 * 60
    assert s.machine_safety_apiserver_statuscheck_period == 60
    assert s.machine_safety_apiserver_statuscheck_timeout == 30
    assert s.node_condition_list == [
        "KernelDeadlock",
        "ReadonlyFilesystem",
        "DiskPressure",
        "NetworkUnavailable",
    ]
    assert s.resource_exhausted_retry == 600
    assert (s.safety_up, s.safety_down, s.machine_safety_overshooting_period) == (2, 1, 60)
    assert (s.kube_api_qps, s.kube_api_burst) == (20, 30)
    assert (s.short_retry, s.medium_retry, s.long_retry) == (15, 180, 600)
    assert s.min_resync_period == 12 * 3600
    assert s.namespace == "default" and s.leader_elect
    assert s.autoscaler_scaledown_annotation_during_rollout


def test_environment_uses_mcm_flag_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCM_MACHINE_HEALTH_TIMEOUT", "5m")
    monkeypatch.setenv("MCM_SAFETY_UP", "4")
    monkeypatch.setenv("MCM_SHORT_RETRY", "2s")
    s = load_settings()
    assert (s.machine_health_timeout, s.safety_up, s.short_retry) == (300, 4, 2)


def test_flags_override_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCM_MACHINE_DRAIN_TIMEOUT", "1h")
    s = load_settings(parse_flags(["--machine-drain-timeout=30s", "--namespace", "shoot--x"]))
    assert s.machine_drain_timeout == 30 and s.namespace == "shoot--x"


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"port": 0}, "--port (MCM_PORT)"),
        ({"address": "not-an-ip"}, "--address"),
        ({"concurrent_syncs": 0}, "--concurrent-syncs"),
        ({"kube_api_qps": 0}, "--kube-api-qps"),
        ({"kube_api_burst": -1}, "--kube-api-burst"),
        ({"machine_health_timeout": "-5m"}, "--machine-health-timeout (MCM_MACHINE_HEALTH_TIMEOUT)"),
        ({"machine_drain_timeout": "soon"}, "--machine-drain-timeout"),
        (
            {"machine_safety_apiserver_statuscheck_period": "10s"},
            "--machine-safety-apiserver-statuscheck-period",
        ),
        ({"target_kubeconfig": "none"}, "--control-kubeconfig"),
        ({"visibility_timeout": "10s"}, "--worker-lost-timeout"),
        ({"poison_after": 0}, "--poison-after"),
    ],
)
def test_invalid_settings_name_the_setting(overrides: dict[str, object], named: str) -> None:
    with pytest.raises(SettingsError) as err:
        load_settings(overrides)
    assert named in str(err.value)


def test_unknown_flag_is_refused() -> None:
    with pytest.raises(SettingsError, match="unknown setting '--no-such-flag'"):
        parse_flags(["--no-such-flag=1"])


def test_no_target_mode_needs_control_kubeconfig() -> None:
    s = load_settings({"target-kubeconfig": "none", "control-kubeconfig": "/k"})
    assert s.no_target


def test_queue_names_are_prefixed() -> None:
    s = load_settings({"key_prefix": "x"})
    assert [s.queue_name(q) for q in QUEUES][:2] == ["x.machine", "x.machine-termination"]
    with pytest.raises(KeyError):
        s.queue_name("pods")


def test_an_upstream_command_line_is_accepted() -> None:
    from pathlib import Path

    from mcm_tasks.cli_support import startup_warnings
    from mcm_tasks.settings import split_flags, take_verbosity
    from tests.upstream_flags import upstream_command_line

    verbosity, flags = take_verbosity(upstream_command_line(Path("/c"), Path("/t")))
    assert verbosity == 3
    overrides, ignored = split_flags(flags)
    s = load_settings(overrides)
    assert (s.concurrent_syncs, s.machine_preserve_timeout, s.machine_inplace_update_timeout) == (
        30,
        3 * 3600,
        20 * 60,
    )
    assert s.leader_elect is True and s.control_kubeconfig == "/c"
    assert ignored == [
        "cloud-provider",
        "profiling",
        "contention-profiling",
        "kube-api-content-type",
        "controller-start-interval",
        "machine-replace-cycle-count-threshold",
        "vmodule",
        "log-flush-frequency",
    ]
    (warning,) = startup_warnings(s, ignored)
    assert "--profiling" in warning and "--machine-replace-cycle-count-threshold" in warning


@pytest.mark.parametrize(
    ("args", "expected", "ignored"),
    [
        (["--leader-elect", "--safety-up", "3"], {"leader_elect": "true", "safety_up": "3"}, []),
        (["--leader-elect=false"], {"leader_elect": "false"}, []),
        (["--profiling", "--safety-up=4"], {"safety_up": "4"}, ["profiling"]),
        (["-v", "2", "--v=3"], {}, []),
        (["--cloud-provider", "aws"], {}, ["cloud-provider"]),
    ],
)
def test_pflag_syntax(args: list[str], expected: dict[str, str], ignored: list[str]) -> None:
    from mcm_tasks.settings import split_flags

    assert split_flags(args) == (expected, ignored)


@pytest.mark.parametrize(("lock", "ok"), [("leases", True), ("endpointsleases", True), ("endpoints", False)])
def test_leader_elect_resource_lock(lock: str, ok: bool) -> None:
    from mcm_tasks.cli_support import startup_warnings

    if ok:
        s = load_settings({"leader_elect_resource_lock": lock})
        assert bool(startup_warnings(s, [])) is (lock != "leases")
    else:
        with pytest.raises(SettingsError, match="--leader-elect-resource-lock"):
            load_settings({"leader_elect_resource_lock": lock})


def test_unknown_flags_still_stop_start_up() -> None:
    with pytest.raises(SettingsError, match="unknown setting"):
        parse_flags(["--no-such-flag=1"])


def test_preserve_and_inplace_timeouts_default_as_upstream_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """Upstream's NewMCServer: MachinePreserveTimeout 3h (the shared reference says 96h; the code
    wins), MachineInPlaceUpdateTimeout 20m."""
    for var in list(__import__("os").environ):
        if var.startswith("MCM_"):
            monkeypatch.delenv(var)
    s = load_settings()
    assert (s.machine_preserve_timeout, s.machine_inplace_update_timeout) == (3 * 3600, 20 * 60)


@pytest.mark.parametrize("which", ["manager", "provider", "merged"])
def test_gardeners_command_lines_are_accepted(which: str) -> None:
    """Gardener's two command lines, and both at once (one of our processes plays both upstream
    binaries: later flags win, as pflag's do), with older releases' flags: every flag parsed, the
    ones we do not act on named in one warning."""
    from mcm_tasks.cli_support import startup_warnings
    from mcm_tasks.settings import split_flags, take_verbosity
    from tests.upstream_flags import (
        GARDENER_TARGET_KUBECONFIG,
        OLDER_UPSTREAM_FLAGS,
        gardener_manager_command_line,
        gardener_provider_command_line,
    )

    manager, provider = (
        gardener_manager_command_line("shoot--p--s"),
        gardener_provider_command_line("shoot--p--s"),
    )
    line = {"manager": manager, "provider": provider, "merged": manager + provider}[
        which
    ] + OLDER_UPSTREAM_FLAGS
    verbosity, flags = take_verbosity(line)
    overrides, ignored = split_flags(flags)
    s = load_settings(overrides)
    assert verbosity == 3
    assert (s.control_kubeconfig, s.target_kubeconfig, s.namespace) == (
        "inClusterConfig",
        GARDENER_TARGET_KUBECONFIG,
        "shoot--p--s",
    )
    if which != "provider":
        assert (s.concurrent_syncs, s.kube_api_qps, s.kube_api_burst, s.safety_up) == (30, 150, 200, 2)
    if which != "manager":
        assert (s.machine_safety_orphan_vms_period, s.machine_drain_timeout) == (1800, 7200)
    assert s.port == (10258 if which == "manager" else 10259)
    assert ignored == [
        "delete-migrated-machine-class",
        "autoscaler-scaldown-annotation-during-rollout",
        "machine-safety-apiserver-period",
        "machine-safety-apiserver-timeout",
    ]
    (warning,) = startup_warnings(s, ignored)
    assert "--delete-migrated-machine-class" in warning


@pytest.mark.parametrize(
    ("args", "level", "rest"),
    [
        (["--v=3", "--port=1"], 3, ["--port=1"]),
        (["-v", "5"], 5, []),
        (["--v", "0", "--v=4"], 4, []),
        (["--port=1"], None, ["--port=1"]),
    ],
)
def test_verbosity_is_taken_out(args: list[str], level: int | None, rest: list[str]) -> None:
    from mcm_tasks.settings import take_verbosity

    assert take_verbosity(args) == (level, rest)


@pytest.mark.parametrize("args", [["--v=x"], ["--v"], ["--v=-1"]])
def test_a_bad_verbosity_is_a_settings_error(args: list[str]) -> None:
    from mcm_tasks.settings import SettingsError, take_verbosity

    with pytest.raises(SettingsError, match="--v"):
        take_verbosity(args)


def test_verbosity_picks_the_log_level_unless_loglevel_does() -> None:
    from mcm_tasks import cli_support

    cli_support.command_settings(["--v=3"])
    assert cli_support.log_level("") == "info"
    cli_support.command_settings(["--v=4"])
    assert cli_support.log_level("") == "debug"
    assert cli_support.log_level("warning") == "warning"
