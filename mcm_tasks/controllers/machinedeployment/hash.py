"""Which template a MachineSet stands for: the rollout identity of a template, its hash and the name
of the MachineSet made from it.

A template's *rollout identity* is the template without what propagates in place (MCD → MCS →
Machine → Node) and without the hash label itself: the node template, the machine configuration
(timeouts, node conditions…) and the class kind. Two templates with the same identity are served by
the same MachineSet, so changing only those fields never rolls out; a change of labels, annotations,
class name or anything else in the spec does.

The hash is ours (Go's FNV of the Go struct cannot be reproduced, and need not be): SHA-256 of the
identity's canonical JSON and the collisionCount, written in Kubernetes' "safe" alphabet (no vowels,
no look-alike digits). It is stable across processes and versions of this code as long as the wire
form of the template does not change, and a different template or a bumped collisionCount gives a
different hash. MachineSet names take its first five characters, like MCM's ``<mcd>-<hash[:5]>``; a
clash of names between different templates is resolved by bumping collisionCount.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from enum import StrEnum
from typing import Any, Final

import orjson

from mcm_tasks.api import Machine, MachinePhase, MachineSet, MachineTemplateSpec, dump
from mcm_tasks.api.constants import MACHINE_TEMPLATE_HASH_LABEL_KEY
from mcm_tasks.controllers.common.template import CONFIGURATION_FIELDS, pruned

#: Kubernetes' rand.SafeEncodeString alphabet: no vowels (no words), no 0/1/3 (no look-alikes)
SAFE_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"
#: characters of the hash label value
HASH_LENGTH: Final = 10
#: characters of the hash in a MachineSet's name
NAME_HASH_LENGTH: Final = 5

_IN_PLACE_SPEC_KEYS: Final = frozenset({"nodeTemplate", *(wire for _, wire in CONFIGURATION_FIELDS)})


#: rollout identities by template object (``id`` → the template and its identity), so that the
#: several comparisons a MachineDeployment pass makes between its template and each set's (the new
#: set's search, its conditions, the revision sync) dump each template once. Sound because no code
#: edits a template in place (sets from the parsed-object cache are shared between passes, and a
#: deployment's new set is built from copies); an entry is only used for the very object it holds.
#: Small, as it keeps its templates alive (a deployment's is read afresh by every pass): a pass needs
#: its deployment's and its sets' entries, and a full table starts again.
_IDENTITIES: dict[int, tuple[MachineTemplateSpec, Any]] = {}
_IDENTITIES_LIMIT: Final = 256


def rollout_identity(template: MachineTemplateSpec) -> Any:
    """The part of a template whose change needs new machines (empty values dropped, so that ``{}``
    and a missing field are the same template). The value is shared: read it, never edit it."""
    hit = _IDENTITIES.get(id(template))
    if hit is not None and hit[0] is template:
        return hit[1]
    identity = _rollout_identity(template)
    if len(_IDENTITIES) >= _IDENTITIES_LIMIT:
        _IDENTITIES.clear()
    _IDENTITIES[id(template)] = (template, identity)
    return identity


def _rollout_identity(template: MachineTemplateSpec) -> Any:
    data = dump(template)
    metadata = dict(data.get("metadata") or {})
    labels = {k: v for k, v in (metadata.get("labels") or {}).items() if k != MACHINE_TEMPLATE_HASH_LABEL_KEY}
    metadata["labels"] = labels
    spec = {k: v for k, v in (data.get("spec") or {}).items() if k not in _IN_PLACE_SPEC_KEYS}
    spec["class"] = {k: v for k, v in (spec.get("class") or {}).items() if k != "kind"}
    return pruned({**data, "metadata": metadata, "spec": spec})


def equal_ignore_hash(a: MachineTemplateSpec, b: MachineTemplateSpec) -> bool:
    """MCM's EqualIgnoreHash: the same rollout identity (hash label, node template, machine
    configuration and class kind do not count)."""
    return bool(rollout_identity(a) == rollout_identity(b))


def _safe_encode(digest: bytes, length: int) -> str:
    number = int.from_bytes(digest, "big")
    chars = []
    for _ in range(length):
        number, index = divmod(number, len(SAFE_ALPHABET))
        chars.append(SAFE_ALPHABET[index])
    return "".join(chars)


def template_hash(template: MachineTemplateSpec, collision_count: int | None) -> str:
    """The ``machine-template-hash`` label value for a template and a collisionCount.

    Upstream: ``ComputeHash``.
    """
    canonical = orjson.dumps(rollout_identity(template), option=orjson.OPT_SORT_KEYS)
    hasher = hashlib.sha256(canonical)
    if collision_count is not None:
        hasher.update(b"\x00collision=" + str(collision_count).encode())
    return _safe_encode(hasher.digest(), HASH_LENGTH)


def machine_set_name(deployment_name: str, template_hash_value: str) -> str:
    return f"{deployment_name}-{template_hash_value[:NAME_HASH_LENGTH]}"


# --- the hash label on adopted sets (upstream addHashKeyToISAndMachines) ----------------------------------


class HashKeyStep(StrEnum):
    """The next step of putting the ``machine-template-hash`` label on a set the deployment adopted
    without it. Upstream waits inside its worker between the steps; here each pass takes the step that
    is due, and a set not yet through them holds its deployment's pass (``WAIT_*``), as upstream's
    waits hold its worker: an unlabelled set overlaps with the new set the deployment would make."""

    #: the selector carries the label: nothing to do
    DONE = "done"
    #: 1. the label into the set's machine template, so machines it creates from now on carry it
    LABEL_TEMPLATE = "label-template"
    #: the MachineSet controller has not yet observed the template change
    WAIT_OBSERVED = "wait-observed"
    #: 2. the label onto the set's active machines that lack it
    LABEL_MACHINES = "label-machines"
    #: the set's status does not yet count all its replicas as fully labelled
    WAIT_FULLY_LABELED = "wait-fully-labeled"
    #: 3. the label into the set's own labels and selector
    LABEL_SELECTOR = "label-selector"


def is_machine_active(machine: Machine) -> bool:
    """Upstream ``IsMachineActive``: neither Failed nor Terminating."""
    return machine.status.current_status.phase not in (MachinePhase.FAILED, MachinePhase.TERMINATING)


def has_hash_key(machine_set: MachineSet) -> bool:
    """Whether the set's selector carries the ``machine-template-hash`` label (then it is done)."""
    selector = machine_set.spec.selector
    return selector is not None and MACHINE_TEMPLATE_HASH_LABEL_KEY in selector.match_labels


def hash_key_step(machine_set: MachineSet, machines: Sequence[Machine], hash_value: str) -> HashKeyStep:
    """Which step of upstream's ``addHashKeyToISAndMachines`` is due for a set and its machines.

    ``hash_value`` is upstream's ``GetMachineSetHash``: ``template_hash`` of the set's own template
    with the deployment's collisionCount."""
    key = MACHINE_TEMPLATE_HASH_LABEL_KEY
    if has_hash_key(machine_set):
        return HashKeyStep.DONE
    if machine_set.spec.template.metadata.labels.get(key) != hash_value:
        return HashKeyStep.LABEL_TEMPLATE
    if machine_set.status.observed_generation < (machine_set.metadata.generation or 0):
        return HashKeyStep.WAIT_OBSERVED
    active = [m for m in machines if is_machine_active(m)]
    if any(m.metadata.labels.get(key) != hash_value for m in active):
        return HashKeyStep.LABEL_MACHINES
    # upstream waits for fullyLabeledReplicas == spec.replicas; a set that cannot reach its replicas
    # (a quota) would then hold its deployment for good, even the rollout that would fix it: the
    # set's status counting the labelled active machines is what the selector change needs
    if machine_set.status.fully_labeled_replicas < len(active):
        return HashKeyStep.WAIT_FULLY_LABELED
    return HashKeyStep.LABEL_SELECTOR
