"""Builders for the MachineDeployment table tests (no tests here): deployments and MachineSets as
the controller reads them, with only the fields a case cares about."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from mcm_tasks.api import MachineDeployment, MachineSet, parse
from mcm_tasks.api.constants import (
    DESIRED_REPLICAS_ANNOTATION,
    MACHINE_TEMPLATE_HASH_LABEL_KEY,
    MAX_REPLICAS_ANNOTATION,
    REVISION_ANNOTATION,
)
from tests.machinedeployment_support import LABELS, deployment_body, template

__all__ = ["LABELS", "T0", "deployment", "machine_set", "template"]

T0 = datetime(2024, 5, 6, 7, 0, 0, tzinfo=UTC)


def deployment(
    replicas: int = 10,
    *,
    strategy: str = "RollingUpdate",
    surge: int | str | None = 1,
    unavailable: int | str | None = 0,
    name: str = "mcd",
    tmpl: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
    status: dict[str, Any] | None = None,
    generation: int = 1,
    **spec: Any,
) -> MachineDeployment:
    body = deployment_body(
        name, replicas, strategy=strategy, surge=surge, unavailable=unavailable, tmpl=tmpl, **spec
    )
    body["metadata"].update(
        namespace="ns", uid=f"uid-{name}", generation=generation, annotations=dict(annotations or {})
    )
    obj = parse({**body, "status": status or {}})
    assert isinstance(obj, MachineDeployment)
    return obj


def machine_set(
    name: str,
    spec: int,
    replicas: int | None = None,
    available: int | None = None,
    *,
    age: int = 0,
    revision: int | None = None,
    desired: int | None = None,
    maximum: int | None = None,
    tmpl: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
    generation: int = 1,
    observed: int = 1,
    conditions: list[dict[str, Any]] | None = None,
) -> MachineSet:
    """A set created ``age`` minutes after T0 (so larger ages are newer)."""
    notes = dict(annotations or {})
    if revision is not None:
        notes[REVISION_ANNOTATION] = str(revision)
    if desired is not None:
        notes[DESIRED_REPLICAS_ANNOTATION] = str(desired)
    if maximum is not None:
        notes[MAX_REPLICAS_ANNOTATION] = str(maximum)
    body = tmpl or template()
    body = {
        **body,
        "metadata": {**body["metadata"], "labels": {**LABELS, MACHINE_TEMPLATE_HASH_LABEL_KEY: name}},
    }
    replicas = spec if replicas is None else replicas
    obj = parse(
        {
            "apiVersion": "machine.sapcloud.io/v1alpha1",
            "kind": "MachineSet",
            "metadata": {
                "name": name,
                "namespace": "ns",
                "uid": f"uid-{name}",
                "generation": generation,
                "creationTimestamp": (T0 + timedelta(minutes=age)).isoformat(),
                "annotations": notes,
                "ownerReferences": [
                    {
                        "apiVersion": "machine.sapcloud.io/v1alpha1",
                        "kind": "MachineDeployment",
                        "name": "mcd",
                        "uid": "uid-mcd",
                        "controller": True,
                    }
                ],
            },
            "spec": {"replicas": spec, "template": body},
            "status": {
                "replicas": replicas,
                "availableReplicas": replicas if available is None else available,
                "readyReplicas": replicas if available is None else available,
                "observedGeneration": observed,
                "machineSetCondition": conditions or [],
            },
        }
    )
    assert isinstance(obj, MachineSet)
    return obj
