"""The embedded sandbox: a Kubernetes API server emulator, a local cloud, a kubelet simulator
and a runner that starts them, so the whole lifecycle runs on one machine with no cluster."""
