"""Access to the control and target clusters through the official ``kubernetes`` client.

``clients`` builds the per-process clients (kubeconfig, in-cluster or none) and runs the start-up
check; ``ratelimit`` puts every request behind the cluster's Redis-shared token bucket; ``ops``
reads and writes objects as API dicts with preconditions and retry-on-conflict; ``events``
records Events with cross-process aggregation; ``errors`` classifies API errors.
"""
