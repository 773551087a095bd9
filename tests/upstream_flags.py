"""An upstream command line: every flag Go MCM (machine-controller-manager) and the machine
controller (machine-controller) take, with values a Gardener deployment would pass."""

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
