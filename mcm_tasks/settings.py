"""One settings object for the whole controller: every MCM and machine-controller flag with
MCM's defaults, plus the engine's own knobs (Redis, queues, retry periods).

Sources, lowest to highest precedence: defaults, environment (``MCM_`` + the flag in upper snake
case, e.g. ``MCM_MACHINE_HEALTH_TIMEOUT=5m``), then command-line flags spelled as MCM spells them
(``--machine-health-timeout=5m``). Durations accept Go strings. Every period and timeout can be
shortened, which is how tests run on compressed time.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, PrivateAttr, ValidationError, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, SettingsConfigDict

from mcm_tasks.durations import parse_duration
from mcm_tasks.kinds import QUEUES

#: seconds, parsed from Go duration strings (``90s``, ``10m``) or plain numbers
Duration = Annotated[float, BeforeValidator(parse_duration), Field(ge=0)]

#: --leader-elect-resource-lock values that hold a Lease (the *leases forms are client-go's
#: migration locks: their Lease half is what we keep)
LEASE_LOCKS = ("leases", "endpointsleases", "configmapsleases")

#: Upstream flags (MCM, MC, component-base logs) accepted for a drop-in command line and not acted
#: on: the name, and whether it is a boolean (``--profiling`` takes no value, as pflag's bools).
UPSTREAM_IGNORED_FLAGS: dict[str, bool] = {
    "cloud-provider": False,
    "profiling": True,
    "contention-profiling": True,
    "kube-api-content-type": False,
    "controller-start-interval": False,
    "machine-replace-cycle-count-threshold": False,
    # older upstream releases' flags, still on seeds' command lines
    "delete-migrated-machine-class": True,
    "autoscaler-scaldown-annotation-during-rollout": True,
    "machine-safety-apiserver-period": False,
    "machine-safety-apiserver-timeout": False,
    "vmodule": False,
    "log-flush-frequency": False,
    "logging-format": False,
    "log-json-split-stream": True,
    "log-json-info-buffer-size": False,
    "log-text-split-stream": True,
    "log-text-info-buffer-size": False,
    "feature-gates": False,
    "logtostderr": True,
    "alsologtostderr": True,
    "stderrthreshold": False,
    "log-dir": False,
    "log-file": False,
    "log-file-max-size": False,
    "log-backtrace-at": False,
    "add-dir-header": True,
    "skip-headers": True,
    "skip-log-headers": True,
    "one-output": True,
}


class SettingsError(ValueError):
    """An invalid setting; the message names it by its flag and its environment variable."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MCM_", extra="forbid", validate_default=True)

    # --- shared flags (MCM and MC) ---
    port: int = Field(10258, description="metrics/health endpoint port (MCM 10258, MC 10259)")
    address: str = Field("0.0.0.0", description="address the metrics/health endpoint binds")
    concurrent_syncs: int = Field(
        10,
        description="reconciles of one kind running at once across all workers (a Redis semaphore per "
        "queue; upstream: workers per queue per process, MCM 10, MC 50)",
    )
    min_resync_period: Duration = Field(
        12 * 3600.0, description="period of the informer's full resync (every key enqueued again)"
    )
    control_kubeconfig: str = Field(
        "",
        description='kubeconfig of the control cluster (machine objects, secrets); `inClusterConfig` or "" = '
        "the pod's ServiceAccount; a tokenFile, exec plugin or replaced file is re-read as it rotates",
    )
    target_kubeconfig: str = Field(
        "",
        description='kubeconfig of the target cluster (nodes, pods); `inClusterConfig` or "" = the pod\'s '
        "ServiceAccount, `none` = no target",
    )
    namespace: str = Field(
        "default",
        description="namespace of the machine objects in the control cluster (in seed mode: the namespace of "
        "the installation's own Leases)",
    )
    namespaces: str = Field(
        "",
        description="seed mode: the namespaces served, comma-separated, each with its own target cluster "
        "read from its Secrets (not in MCM)",
    )
    namespace_selector: str = Field(
        "",
        description="seed mode: serve the control cluster's namespaces matching this label selector, picked "
        "up and dropped as they come and go (not in MCM)",
    )
    target_kubeconfig_secret: str = Field(
        "",
        description="seed mode: the Secret of a served namespace holding its target kubeconfig; empty = as "
        "Gardener names it (the namespace's Cluster annotation, else `generic-token-kubeconfig`)",
    )
    background_aging: Duration = Field(
        10.0,
        gt=0,
        description="an informer resync's reconciles wait behind user-facing ones for at most this long, "
        "then are served in turn (not in MCM)",
    )
    seed_refresh_period: Duration = Field(
        2.0, gt=0, description="seed mode: how often the served namespaces are listed again"
    )
    kube_api_qps: float = Field(
        20.0, description="API requests per second per cluster, shared by all processes through Redis"
    )
    kube_api_burst: int = Field(30, description="burst of the shared per-cluster API request budget")
    leader_elect: bool = Field(True, description="elect one active informer (and beat) through a Lease")
    leader_elect_lease_duration: Duration = Field(
        15.0, description="how long a lease is valid; a standby takes over after it"
    )
    leader_elect_renew_deadline: Duration = Field(
        10.0, description="the leader gives up if it cannot renew within this"
    )
    leader_elect_retry_period: Duration = Field(
        2.0, description="how often candidates try to acquire or renew"
    )
    leader_elect_resource_lock: str = Field(
        "leases",
        description="lock object kind: `leases`; `endpointsleases` and `configmapsleases` use their Lease "
        "half (the others are gone from client-go and stop start-up)",
    )

    # --- machine-controller-manager (MachineSet / MachineDeployment / overshooting) ---
    safety_up: int = Field(2, description="overshooting: freeze a MachineSet at replicas + maxSurge + this")
    safety_down: int = Field(1, description="overshooting: unfreeze this many below the freeze threshold")
    machine_safety_overshooting_period: Duration = Field(
        60.0, description="period of the overshooting safety job"
    )
    autoscaler_scaledown_annotation_during_rollout: bool = Field(
        True, description="annotate nodes scale-down-disabled for the cluster-autoscaler during rollouts"
    )

    # --- machine-controller ---
    machine_creation_timeout: Duration = Field(
        20 * 60.0, description="a machine that has not joined after this is Failed"
    )
    machine_creation_timeout_max: Duration = Field(
        0.0,
        description="ceiling of the adaptive creation timeout: repeated join timeouts of a MachineDeployment "
        "raise its effective-creation-timeout annotation in steps up to this (0 = 2 x the declared timeout; "
        "not in MCM)",
    )
    machine_health_timeout: Duration = Field(
        10 * 60.0, description="an Unknown machine unhealthy this long is Failed (rate-limited)"
    )
    machine_drain_timeout: Duration = Field(
        2 * 3600.0, description="a drain running longer than this is forced"
    )
    machine_inplace_update_timeout: Duration = Field(
        20 * 60.0, description="a machine updating in place longer than this is InPlaceUpdateFailed"
    )
    machine_preserve_timeout: Duration = Field(
        3 * 3600.0,
        description="how long a preserved machine is kept (a Machine's spec.machinePreserveTimeout wins; "
        "3h as upstream's code)",
    )
    machine_max_evict_retries: int = Field(360, description="eviction retries on 429 before a pod is deleted")
    machine_pv_detach_timeout: Duration = Field(
        2 * 60.0, description="wait for a drained pod's volumes to detach"
    )
    machine_pv_reattach_timeout: Duration = Field(
        90.0, description="wait for a drained pod's volumes to re-attach elsewhere (warning only)"
    )
    machine_safety_orphan_vms_period: Duration = Field(
        15 * 60.0, description="period of the orphan-VM collection (15m as in MCM's code; its docs say 30m)"
    )
    machine_safety_apiserver_statuscheck_period: Duration = Field(
        60.0, description="period of the API-server health probe"
    )
    machine_safety_apiserver_statuscheck_timeout: Duration = Field(
        30.0, description="API servers down this long freeze the machine controller"
    )
    safety_event_min_interval: Duration = Field(
        10.0,
        description="orphan-VM and overshooting runs start at most once per this; requests in between "
        "(bursts of Machine events, beat) wait for its end (not in MCM; 0 = every request runs)",
    )
    max_replacements: str = Field(
        "1",
        description="machines of one MachineDeployment being replaced at once (int or percent of its "
        "replicas, rounded up; MCM's fixed maxReplacements is 1); annotation mcm-tasks.io/max-replacements",
    )
    max_unhealthy: str = Field(
        "",
        description="above this many Unknown or Failed machines of a MachineDeployment none is marked "
        'Failed (int or percent of replicas, rounded down; "" = off, as MCM); annotation '
        "mcm-tasks.io/max-unhealthy",
    )
    zone_unhealthy_threshold: str = Field(
        "50%",
        description="a zone with at least 3 machines of which this share (or number) is unhealthy is "
        'in an outage: its machines are not marked Failed (not in MCM; "" or 0 = off)',
    )
    node_deletion_storm_threshold: str = Field(
        "20%",
        description="machines of one MachineDeployment whose deleted Nodes may delete them within the "
        "window (int, or percent of its replicas and at least 3); the rest are held, listed by `mcm-tasks "
        'admin held` (not in MCM; "" or 0 = off)',
    )
    node_deletion_storm_window: Duration = Field(
        5 * 60.0, description="the window of --node-deletion-storm-threshold (not in MCM)"
    )
    node_conditions: str = Field(
        "KernelDeadlock,ReadonlyFilesystem,DiskPressure,NetworkUnavailable",
        description="node conditions that make a machine unhealthy when not False",
    )
    bootstrap_token_auth_extra_groups: str = Field(
        "", description="extra groups of generated bootstrap tokens"
    )
    resource_exhausted_retry: Duration = Field(
        10 * 60.0, description="retry period after a ResourceExhausted create error"
    )

    # --- retry periods (constants upstream; settings here so tests can compress time) ---
    short_retry: Duration = Field(
        15.0, description="ShortRetry (15s as in the seeds; current MCM code uses 5s)"
    )
    medium_retry: Duration = Field(3 * 60.0, description="MediumRetry")
    long_retry: Duration = Field(10 * 60.0, description="LongRetry")
    conflict_retry: Duration = Field(0.2, description="requeue after a write conflict")
    machine_updates_batch_period: Duration = Field(
        0.5,
        description="a Machine event wakes its MachineSet (and a deletion its class and the orphan-VM "
        "sweep) after this, so that a burst of them joins one pass, as kube-controller-manager's "
        "--endpoint-updates-batch-period (not in MCM; 0 = at once)",
    )
    machine_set_pass_spacing: float = Field(
        3.0,
        ge=0,
        description="k: a MachineSet pass that took d seconds lets the set's next pass start k·d "
        "after it (where k·d is longer than --machine-updates-batch-period), so a large set's "
        "recounting passes take at most 1/(k+1) of a worker whatever its size; a pass that "
        "created or deleted machines is not spaced (not in MCM; 0 = off)",
    )
    machine_set_recount_interval: Duration = Field(
        5.0,
        ge=0,
        description="a MachineSet pass that created or deleted no machine lets the next one woken by "
        "its machines' changes start no sooner than this after it (they wait in the delayed set: "
        "a burst of changes costs one pass per interval, not one per batch period); its own changes "
        "wake it at once, a pass that acted lifts the wait, and a set whose deployment rolls is not "
        "held (not in MCM; 0 = off, as is a batch period of 0)",
    )
    deletion_steps_per_pass: int = Field(
        7,
        ge=1,
        description="deletion-flow steps one pass runs back to back while each moves the flow on; "
        "the status is written once, where the pass stops (1 = a pass and a write per step, as MCM)",
    )
    health_recheck_period: Duration = Field(
        60.0, description="re-check of Pending/Unknown machines that have not timed out yet"
    )
    pod_eviction_retry_interval: Duration = Field(
        20.0, description="eviction retry interval on 429 and between volume-pod rounds (constant upstream)"
    )
    force_drain_unhealthy_after: Duration = Field(
        5 * 60.0,
        description="NotReady / ReadonlyFilesystem this long forces a deletion's drain (constant upstream)",
    )
    force_drain_timeout: Duration = Field(
        60.0, description="drain timeout once a drain is forced (constant upstream)"
    )
    permit_stale_after: Duration = Field(
        3600.0, description="permit giver: permits older than this are dropped"
    )
    class_resync_period: Duration = Field(
        10 * 60.0, description="MachineClass / Secret reconciles come back after this"
    )
    secret_cache_ttl: Duration = Field(
        30.0,
        description="a worker keeps the data of a MachineClass secret, read from the API server, this long "
        "in its memory (never in Redis); 0 = read it on every driver call",
    )

    # --- provider local (the sandbox's stand-in cloud) ---
    local_cloud_redis_url: str = Field(
        "",
        description="Redis holding the local provider's VMs (the sandbox may give its stand-in cloud a "
        "Redis of its own, as a real cloud is no load on ours); empty = redis_url",
    )

    # --- provider AWS (environment MCM_AWS_*; the driver reads them through get_driver) ---
    aws_endpoint_url: str = Field(
        "", description="EC2/STS endpoint the AWS driver calls (a moto server in tests); empty = AWS's own"
    )
    aws_describe_timeout: Duration = Field(
        300.0, description="how long the AWS driver waits for a new instance to show in DescribeInstances"
    )
    aws_rate_limit: bool = Field(
        True,
        description="the AWS driver draws every EC2 request from a token bucket in Redis shared by all "
        "workers, per account and region (EC2 throttles per account and region, not per process)",
    )
    aws_rate_limit_qps: float = Field(
        20.0, gt=0, description="EC2 requests per second per account and region, across all workers"
    )
    aws_rate_limit_burst: int = Field(100, ge=1, description="burst of the shared EC2 request bucket")
    aws_rate_limit_max_wait: Duration = Field(
        5.0,
        description="a request that would wait longer than this for the EC2 bucket fails Unavailable and "
        "the key is retried, so no worker slot sleeps on a throttle",
    )

    # --- engine: Redis, queues, workers ---
    redis_url: str = Field(
        "redis://127.0.0.1:6379/0",
        description="Redis for the cache, queues (Celery broker), locks and permits",
    )
    redis_sentinel_master: str = Field(
        "", description="with a `sentinel://H1:P1;sentinel://H2:P2/0` --redis-url: the master's name"
    )
    redis_sentinel_password: str = Field("", description="password of the sentinels themselves")
    redis_username: str = Field("", description="Redis ACL user (overrides the URL's)")
    redis_password: str = Field("", description="Redis password (overrides the URL's)")
    redis_tls: bool = Field(False, description="TLS to Redis and its sentinels (implied by `rediss://`)")
    redis_tls_ca_file: str = Field("", description="CA bundle that signs Redis' certificate")
    redis_tls_cert_file: str = Field("", description="client certificate presented to Redis")
    redis_tls_key_file: str = Field("", description="key of the client certificate")
    redis_failover_timeout: Duration = Field(
        30.0, description="with Sentinel: a command retries this long through a failover"
    )
    key_prefix: str = Field(
        "mcm",
        description="prefix of every Redis key and queue name (several installations can share one Redis)",
    )
    worker_concurrency: int = Field(
        2, description="reconciles one `mcm-tasks worker` runs at once (threads, or pool processes)"
    )
    worker_pool: Literal["prefork", "threads", "solo"] = Field(
        "threads",
        description="Celery execution pool of `mcm-tasks worker`: `prefork` (a process per slot), `threads` "
        "(one process: less memory and no process hop per task, one core per pod), `solo` (one at a time)",
    )
    reconcile_lock_ttl: Duration = Field(
        60.0, description="per-key reconcile lock lifetime; exceeds any reconcile's run time"
    )
    visibility_timeout: Duration = Field(
        3600.0,
        description="kombu restores a message unacknowledged this long (a backstop: workers renew the "
        "messages they hold, and the sweep restores a dead worker's after worker-lost-timeout)",
    )
    worker_lost_timeout: Duration = Field(
        15.0,
        description="a worker that has not renewed its heartbeat and held messages for this long is "
        "dead: any worker's sweep puts its messages back on their queues (not in MCM)",
    )
    delayed_publish_interval: Duration = Field(
        0.2,
        description="the longest a key due at once waits for a worker's publisher (a burst of wake-ups "
        "costs one read of the delayed sets per interval; not in MCM)",
    )
    error_backoff_base: Duration = Field(
        0.005, description="per-key error backoff start (doubles per failure)"
    )
    error_backoff_max: Duration = Field(
        1000.0,
        description="per-key error backoff ceiling; a key that keeps failing is retried at it, forever",
    )
    poison_after: int = Field(
        3,
        description="worker deaths in a row during one key's reconcile before the key is quarantined: "
        "retried at long-retry instead of at once (not in MCM)",
    )
    log_format: Literal["text", "json"] = Field(
        "text", description="log lines as text or one JSON object per line (with kind and key)"
    )
    liveness_timeout: Duration = Field(
        120.0, description="/healthz fails when the consumer or watch loop made no progress for this long"
    )
    history_length: int = Field(
        20, ge=0, description="runs kept per key in its history (admin inspect); 0 keeps none"
    )
    expectations_timeout: Duration = Field(
        5 * 60.0, description="MachineSet expectations expire after this (client-go's ExpectationsTimeout)"
    )
    mirror_lag_threshold: Duration = Field(
        2.0,
        ge=0,
        description="a mirror whose Machines, MachineSets or MachineDeployments arrive this late "
        "(mcm_informer_lag_seconds) lags: a rollout's passes then wake each other and read live "
        "(0: never; the lag has 1 s resolution)",
    )
    mirror_lag_node_poll: Duration = Field(
        0.5,
        gt=0,
        description="while the mirror lags, a Pending machine reads its Node from the API server this "
        "often instead of waiting for the Node's late events",
    )
    watch_timeout: Duration = Field(
        5 * 60.0,
        description="a watch asks the API server to end it after between this and twice this "
        "(timeoutSeconds; client-go's minWatchTimeout)",
    )
    watch_client_timeout: Duration = Field(
        6 * 60.0, description="client-side read timeout of a watch stream, so a silent stream cannot stall"
    )

    #: a tenant's view (seed mode, ``mcm_tasks.tenancy``): the installation's own key prefix
    _install_prefix: str = PrivateAttr("")

    @property
    def install_prefix(self) -> str:
        """The installation's key prefix, under which the broker, the keepers and the tenants'
        registry live; a tenant's own keys are under ``key_prefix``."""
        return self._install_prefix or self.key_prefix

    @property
    def namespace_list(self) -> list[str]:
        return [n.strip() for n in self.namespaces.split(",") if n.strip()]

    @property
    def seed_mode(self) -> bool:
        """Whether this installation serves many namespaces (``--namespaces``/``--namespace-selector``)."""
        return bool(self.namespaces.strip() or self.namespace_selector.strip())

    @property
    def node_condition_list(self) -> list[str]:
        return [c.strip() for c in self.node_conditions.split(",") if c.strip()]

    @property
    def no_target(self) -> bool:
        return self.target_kubeconfig == "none"

    def queue_name(self, kind: str) -> str:
        if kind not in QUEUES:
            raise KeyError(f"unknown queue {kind!r}")
        return f"{self.key_prefix}.{kind}"

    @model_validator(mode="after")
    def _mcm_rules(self) -> Settings:
        """MCM's own flag validation, so a bad value stops start-up instead of misbehaving later."""
        problems: list[tuple[str, str]] = []
        if not 1 <= self.port <= 65535:
            problems.append(("port", f"must be between 1 and 65535, got {self.port}"))
        try:
            ipaddress.ip_address(self.address)
        except ValueError:
            problems.append(("address", f"{self.address!r} is not an IP address"))
        for name in ("concurrent_syncs", "worker_concurrency", "poison_after"):
            if getattr(self, name) <= 0:
                problems.append((name, "must be greater than 0"))
        if self.kube_api_qps <= 0:
            problems.append(("kube_api_qps", "must be greater than 0"))
        for name in ("kube_api_burst", "safety_up", "safety_down", "machine_max_evict_retries"):
            if getattr(self, name) < 0:
                problems.append((name, "must not be negative"))
        check_period = self.machine_safety_apiserver_statuscheck_period
        if check_period < self.machine_safety_apiserver_statuscheck_timeout:
            problems.append(
                (
                    "machine_safety_apiserver_statuscheck_period",
                    "must be at least machine-safety-apiserver-statuscheck-timeout",
                )
            )
        for name in (
            "max_replacements",
            "max_unhealthy",
            "zone_unhealthy_threshold",
            "node_deletion_storm_threshold",
        ):
            problem = budget_problem(getattr(self, name))
            if problem:
                problems.append((name, problem))
        lock = self.leader_elect_resource_lock
        if lock not in LEASE_LOCKS:
            allowed = ", ".join(LEASE_LOCKS)
            problems.append(("leader_elect_resource_lock", f"{lock!r} is not supported, use {allowed}"))
        problems += seed_problems(self)
        if self.no_target and not self.control_kubeconfig:
            problems.append(("control_kubeconfig", "is required when --target-kubeconfig=none"))
        if self.worker_lost_timeout >= self.visibility_timeout:
            # kombu's own restore (after the visibility timeout) is the backstop of the sweep
            problems.append(("worker_lost_timeout", "must be shorter than visibility-timeout"))
        sentinel = self.redis_url.startswith("sentinel")
        if sentinel and not self.redis_sentinel_master:
            problems.append(("redis_sentinel_master", "is required when --redis-url names sentinels"))
        if sentinel and self.redis_failover_timeout >= 0.8 * self.reconcile_lock_ttl:
            # a command retrying through a failover must not outlast the reconcile's soft time limit
            problems.append(("redis_failover_timeout", "must be below 80% of reconcile-lock-ttl"))
        if problems:
            raise ValueError("; ".join(f"{_describe(n)}: {msg}" for n, msg in problems))
        return self


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def seed_problems(s: Settings) -> list[tuple[str, str]]:
    """Seed mode's flags: one way to name the namespaces, each a namespace name."""
    problems: list[tuple[str, str]] = []
    if s.namespaces.strip() and s.namespace_selector.strip():
        problems.append(("namespaces", "and --namespace-selector exclude each other"))
    for name in s.namespace_list:
        if not _DNS_LABEL.match(name):
            problems.append(("namespaces", f"{name[:70]!r} is not a namespace name"))
    if len(s.namespace_selector) > 1024:
        problems.append(("namespace_selector", "is longer than 1024 characters"))
    if s.target_kubeconfig_secret and not re.match(
        r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$", s.target_kubeconfig_secret
    ):
        problems.append(
            ("target_kubeconfig_secret", f"{s.target_kubeconfig_secret[:70]!r} is not a Secret name")
        )
    return problems


def budget_problem(value: str) -> str:
    """Why a budget (``3``, ``30%``, or empty for unset) is not one; empty when it is."""
    text = value.strip()
    if not text:
        return ""
    number = text[:-1] if text.endswith("%") else text
    if not number.isdigit():
        return f"{value!r} is neither a non-negative integer nor a percentage such as 30%"
    return ""


def _describe(field: str) -> str:
    return f"--{field.replace('_', '-')} (MCM_{field.upper()})"


def load_settings(overrides: Mapping[str, Any] | None = None) -> Settings:
    """Settings from the environment plus overrides (flag or field names), or SettingsError."""
    values = {_field_name(k): v for k, v in (overrides or {}).items()}
    try:
        return Settings(**values)
    except ValidationError as err:
        lines = []
        for e in err.errors():
            loc = ".".join(str(p) for p in e["loc"])
            lines.append(f"{_describe(loc)}: {e['msg']}" if loc else e["msg"].removeprefix("Value error, "))
        raise SettingsError("invalid settings: " + "; ".join(lines)) from None


def _field_name(flag: str) -> str:
    name = flag.lstrip("-").replace("-", "_").lower()
    if name not in Settings.model_fields:
        raise SettingsError(f"unknown setting {flag!r}")
    return name


#: klog's verbosity flag (``--v=3`` on Gardener's command lines): not a setting, it picks the log level
VERBOSITY_FLAG = "v"


def take_verbosity(args: Sequence[str]) -> tuple[int | None, list[str]]:
    """Upstream's ``--v`` (or ``-v``, ``--v 3``) out of a command line: (its value or None, the
    other arguments). A value that is not a number is a SettingsError, as pflag refuses it."""
    rest: list[str] = []
    value: str | None = None
    it = iter(args)
    for arg in it:
        name, eq, given = arg.lstrip("-").partition("=")
        if not arg.startswith("-") or name != VERBOSITY_FLAG:
            rest.append(arg)
            continue
        if not eq:
            nxt = next(it, None)
            if nxt is None:
                raise SettingsError("flag --v needs a value")
            given = nxt
        value = given
    if value is None:
        return None, rest
    try:
        level = int(value)
    except ValueError:
        raise SettingsError(f"flag --v: {value!r} is not a number") from None
    if level < 0:
        raise SettingsError(f"flag --v: {value!r} must not be negative")
    return level, rest


def parse_flags(args: Sequence[str]) -> dict[str, str]:
    """MCM-style flags (``--machine-health-timeout=5m`` or ``--safety-up 3``) to overrides; the
    upstream flags we do not act on are dropped (see :func:`split_flags`)."""
    return split_flags(args)[0]


def split_flags(args: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """Flags to (overrides, upstream flags accepted and ignored), with pflag's syntax: ``--f=v``,
    ``--f v``, single-dash long names (``-v=3``), and booleans that take a value only after ``=``.
    ``--v`` is passed over (``take_verbosity`` reads it)."""
    out: dict[str, str] = {}
    ignored: list[str] = []
    it = iter(args)
    for arg in it:
        if not arg.startswith("-") or arg in ("-", "--"):
            raise SettingsError(f"unexpected argument {arg!r}")
        name, eq, value = arg.lstrip("-").partition("=")
        boolean = UPSTREAM_IGNORED_FLAGS.get(name, False if name == VERBOSITY_FLAG else None)
        field = None if boolean is not None else _field_name(f"--{name}")
        if field is not None and Settings.model_fields[field].annotation is bool:
            boolean = True
        if not eq:
            if boolean:
                value = "true"
            else:
                nxt = next(it, None)
                if nxt is None:
                    raise SettingsError(f"flag --{name} needs a value")
                value = nxt
        if field is None:
            if name not in ignored and name != VERBOSITY_FLAG:  # --v: take_verbosity's
                ignored.append(name)
        else:
            out[field] = value
    return out, ignored


_current: Settings | None = None
#: a tenant's settings while its work runs (seed mode: ``mcm_tasks.tenancy.serving``)
SCOPED: ContextVar[Settings | None] = ContextVar("mcm_tenant_settings", default=None)


def get_settings() -> Settings:
    """The settings in force: the tenant's while a seed-mode tenant's work runs
    (``mcm_tasks.tenancy``), else the process-wide ones: what configure() set, else the
    environment's (loaded once)."""
    scoped = SCOPED.get()
    if scoped is not None:
        return scoped
    global _current
    if _current is None:
        _current = load_settings()
    return _current


def configure(overrides: Mapping[str, Any] | None = None) -> Settings:
    """Replace the process-wide settings: CLI start-up with flags, and tests."""
    global _current
    _current = load_settings(overrides)
    return _current


def reset_settings() -> None:
    """Forget the process-wide settings so the next get_settings() reads the environment again."""
    global _current
    _current = None


def _is_duration(field: FieldInfo) -> bool:
    return any(isinstance(m, BeforeValidator) and m.func is parse_duration for m in field.metadata)
