"""The Events every controller records, under MCM's component names: ``machine-controller`` for what the
machine controller says about Machines (``common.status_io``), ``machine-controller-manager`` for the
MachineSet, MachineDeployment and safety controllers and for the queue's reports on failing keys.
One recorder per process and component (``kube.events.recorder_for`` folds repeats across pods).
"""

from __future__ import annotations

from typing import Final

from kubernetes.client import ApiClient

from mcm_tasks.kube.events import EventRecorder, recorder_for

COMPONENT: Final = "machine-controller-manager"
MACHINE_COMPONENT: Final = "machine-controller"


def recorder(api: ApiClient, component: str = COMPONENT) -> EventRecorder:
    """The recorder on the control cluster ``api`` (a pass's ``scope.api``)."""
    return recorder_for(api, component)
