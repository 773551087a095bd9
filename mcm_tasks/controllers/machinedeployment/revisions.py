"""Rollout revisions and the annotations a deployment keeps on its MachineSets (pure).

Each MachineSet carries ``deployment.kubernetes.io/revision``; the new set always has the highest
(max of the old ones + 1), and when an old set becomes new again (a rollback, or a template changed
back) its earlier revisions go to ``revision-history``. The deployment carries its new set's
revision. The new set also receives the deployment's annotations, except the ones that describe a
particular set or rollout (``ANNOTATIONS_TO_SKIP``); on a rollback the deployment takes the
annotations of the set it rolls back to, under the same exception.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from mcm_tasks.api import MachineSet
from mcm_tasks.api.constants import (
    DESIRED_REPLICAS_ANNOTATION,
    MAX_REPLICAS_ANNOTATION,
    PREFER_NO_SCHEDULE_KEY,
    REVISION_ANNOTATION,
    REVISION_HISTORY_ANNOTATION,
    UNFREEZE_ANNOTATION,
)

#: kubectl's last-applied configuration: describes the deployment object, not its sets
LAST_APPLIED_CONFIG_ANNOTATION: Final = "kubectl.kubernetes.io/last-applied-configuration"

#: never copied between a deployment and its sets
ANNOTATIONS_TO_SKIP: Final = frozenset(
    {
        LAST_APPLIED_CONFIG_ANNOTATION,
        REVISION_ANNOTATION,
        REVISION_HISTORY_ANNOTATION,
        DESIRED_REPLICAS_ANNOTATION,
        MAX_REPLICAS_ANNOTATION,
        PREFER_NO_SCHEDULE_KEY,
        UNFREEZE_ANNOTATION,
    }
)


def revision_of(annotations: Mapping[str, str]) -> int | None:
    """The revision number; 0 when absent, None when it does not parse (such sets are skipped)."""
    raw = annotations.get(REVISION_ANNOTATION)
    if raw is None or raw == "":
        return 0
    try:
        return int(raw)
    except ValueError:
        return None


def revisions(machine_sets: Iterable[MachineSet]) -> list[int]:
    found = (revision_of(ms.metadata.annotations) for ms in machine_sets)
    return [r for r in found if r is not None]


def max_revision(machine_sets: Iterable[MachineSet]) -> int:
    return max(revisions(machine_sets), default=0)


def last_revision(machine_sets: Iterable[MachineSet]) -> int:
    """The second highest revision (what "roll back to the previous revision" means); 0 if none."""
    ordered = sorted(revisions(machine_sets), reverse=True)
    return ordered[1] if len(ordered) > 1 else 0


def copied_annotations(source: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in source.items() if k not in ANNOTATIONS_TO_SKIP}


def new_set_annotations(
    current: Mapping[str, str], deployment_annotations: Mapping[str, str], new_revision: int
) -> dict[str, str]:
    """A new set's annotations: the deployment's (minus the skipped ones) over its own, and its
    revision raised to ``new_revision`` when lower, the revision it had going into the history."""
    out = dict(current)
    out.update(copied_annotations(deployment_annotations))
    old = revision_of(current)
    if old is None:
        # an unparsable revision is left alone, as MCM does (and reported by the caller's logs)
        return out
    if old < new_revision:
        out[REVISION_ANNOTATION] = str(new_revision)
        if REVISION_ANNOTATION in current:
            history = [h for h in current.get(REVISION_HISTORY_ANNOTATION, "").split(",") if h]
            out[REVISION_HISTORY_ANNOTATION] = ",".join([*history, current[REVISION_ANNOTATION]])
    return out


def replicas_annotations(desired: int, maximum: int) -> dict[str, str]:
    """``desired-replicas`` (the deployment's replicas) and ``max-replicas`` (replicas + maxSurge)."""
    return {DESIRED_REPLICAS_ANNOTATION: str(desired), MAX_REPLICAS_ANNOTATION: str(maximum)}


def int_annotation(annotations: Mapping[str, str], key: str) -> int | None:
    raw = annotations.get(key)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


def rolled_back_annotations(
    deployment_annotations: Mapping[str, str], set_annotations: Mapping[str, str]
) -> dict[str, str]:
    """MCM's SetMachineDeploymentAnnotationsTo: the deployment keeps only its skipped annotations and
    takes every other annotation of the set it rolls back to."""
    out = {k: v for k, v in deployment_annotations.items() if k in ANNOTATIONS_TO_SKIP}
    out.update(copied_annotations(set_annotations))
    return out
