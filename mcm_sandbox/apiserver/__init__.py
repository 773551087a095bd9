"""The sandbox Kubernetes API server: the real REST protocol over an in-memory store, one process."""
