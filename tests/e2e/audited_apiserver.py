"""The sandbox API server with every authorization decision appended to ``$MCM_AUDIT_LOG`` (one JSON
line: user, verb, API group, resource, namespace, allowed), so the chart's RBAC test can list the
grants each ServiceAccount used and the requests it was refused. A test kit: it wraps the server's
own authorizer, the product never sees it.

    python -m tests.e2e.audited_apiserver --port 0 --kubeconfig K --authorization-mode RBAC
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any

from mcm_sandbox.apiserver import app as server_app
from mcm_sandbox.apiserver.routing import Target

_lock = threading.Lock()


def _record(log: str, entry: dict[str, Any]) -> None:
    with _lock, open(log, "a") as out:
        out.write(json.dumps(entry) + "\n")


def install(log: str) -> None:
    original = server_app.Server._authorize

    def _authorize(self: Any, user: Any, path: str, verb: str, found: Any) -> None:
        entry: dict[str, Any] = {"user": user.name, "verb": verb, "path": path}
        if isinstance(found, Target):
            entry.update(group=found.rt.group, resource=found.resource, namespace=found.namespace or "")
        try:
            original(self, user, path, verb, found)
        except Exception:
            _record(log, {**entry, "allowed": False})
            raise
        _record(log, {**entry, "allowed": True})

    server_app.Server._authorize = _authorize  # type: ignore[method-assign]


def main() -> None:
    install(os.environ["MCM_AUDIT_LOG"])
    from mcm_sandbox.cli import app

    sys.argv = ["mcm-tasks-sandbox", "apiserver", *sys.argv[1:]]
    app(prog_name="mcm-tasks sandbox")


if __name__ == "__main__":
    main()
