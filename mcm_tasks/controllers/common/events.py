"""The Events the MachineSet, MachineDeployment and safety controllers record, under MCM's component
name (the machine controller records as ``machine-controller``, in ``common.status``)."""

from __future__ import annotations

from typing import Final

from kubernetes.client import ApiClient

from mcm_tasks.kube.events import EventRecorder, recorder_for

COMPONENT: Final = "machine-controller-manager"


def recorder(api: ApiClient) -> EventRecorder:
    return recorder_for(api, COMPONENT)
