"""Upstream command lines: every flag Go MCM (machine-controller-manager) and the machine
controller (machine-controller) take, with values a Gardener deployment would pass; Gardener's own
two command lines (gardener/gardener, component machine-controller-manager) as a seed runs them;
and flags of older upstream releases still found on seeds."""

from __future__ import annotations

from pathlib import Path


def upstream_command_line(control: Path, target: Path) -> list[str]:
    return [
        "--port=10258",
        "--address=0.0.0.0",
        "--cloud-provider=aws",
        "--concurrent-syncs=30",
        "--min-resync-period=12h",
        "--profiling",
        "--contention-profiling=false",
        f"--target-kubeconfig={target}",
        f"--control-kubeconfig={control}",
        "--namespace=default",
        "--kube-api-content-type=application/vnd.kubernetes.protobuf",
        "--kube-api-qps=500",
        "--kube-api-burst=500",
        "--controller-start-interval=0s",
        "--safety-up=2",
        "--safety-down=1",
        "--machine-safety-overshooting-period=1m",
        "--machine-replace-cycle-count-threshold=3",
        "--autoscaler-scaledown-annotation-during-rollout=true",
        "--machine-creation-timeout=20m",
        "--machine-health-timeout=10m",
        "--machine-drain-timeout=2h",
        "--machine-inplace-update-timeout=20m",
        "--machine-max-evict-retries=360",
        "--machine-pv-detach-timeout=2m",
        "--machine-pv-reattach-timeout=90s",
        "--machine-safety-apiserver-statuscheck-timeout=30s",
        "--machine-preserve-timeout=3h",
        "--machine-safety-orphan-vms-period=15m",
        "--machine-safety-apiserver-statuscheck-period=1m",
        "--node-conditions=KernelDeadlock,ReadonlyFilesystem,DiskPressure,NetworkUnavailable",
        "--bootstrap-token-auth-extra-groups=system:bootstrappers:gardener",
        "--v=3",
        "--vmodule=machine=4",
        "--log-flush-frequency=5s",
        "--leader-elect=true",
        "--leader-elect-lease-duration=15s",
        "--leader-elect-renew-deadline=10s",
        "--leader-elect-retry-period=2s",
        "--leader-elect-resource-lock=leases",
    ]


#: where Gardener mounts the shoot's generic kubeconfig (its user has ``tokenFile:``)
GARDENER_TARGET_KUBECONFIG = "/var/run/secrets/gardener.cloud/shoot/generic-kubeconfig/kubeconfig"


def gardener_manager_command_line(namespace: str, target: str = GARDENER_TARGET_KUBECONFIG) -> list[str]:
    """The manager container (``machine-controller-manager``) of Gardener's deployment."""
    return [
        "--control-kubeconfig=inClusterConfig",
        "--machine-safety-overshooting-period=1m",
        f"--namespace={namespace}",
        "--port=10258",
        "--safety-up=2",
        "--safety-down=1",
        f"--target-kubeconfig={target}",
        "--concurrent-syncs=30",
        "--kube-api-qps=150",
        "--kube-api-burst=200",
        "--v=3",
    ]


def gardener_provider_command_line(namespace: str, target: str = GARDENER_TARGET_KUBECONFIG) -> list[str]:
    """The provider sidecar (``machine-controller``) of Gardener's deployment."""
    return [
        "--control-kubeconfig=inClusterConfig",
        "--machine-creation-timeout=20m",
        "--machine-drain-timeout=2h",
        "--machine-health-timeout=10m",
        "--machine-safety-apiserver-statuscheck-timeout=30s",
        "--machine-safety-apiserver-statuscheck-period=1m",
        "--machine-safety-orphan-vms-period=30m",
        f"--namespace={namespace}",
        "--port=10259",
        f"--target-kubeconfig={target}",
        "--v=3",
    ]


#: flags of older upstream releases that seeds' command lines still carry
OLDER_UPSTREAM_FLAGS = [
    "--delete-migrated-machine-class=true",
    "--autoscaler-scaldown-annotation-during-rollout=false",
    "--machine-safety-apiserver-period=1m",
    "--machine-safety-apiserver-timeout=30s",
]
