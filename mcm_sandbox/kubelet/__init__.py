"""The kubelet simulator: plays every Node's kubelet (and the node agent) for the sandbox."""
