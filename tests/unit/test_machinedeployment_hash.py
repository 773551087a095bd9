"""Template hash (consistent, unique, blind to what propagates in place), new-set detection, revisions
and the annotations copied between a deployment and its sets."""

from __future__ import annotations

from typing import Any

import pytest

from mcm_tasks.api import Machine, MachineSet, MachineTemplateSpec
from mcm_tasks.api.constants import (
    DESIRED_REPLICAS_ANNOTATION,
    MACHINE_TEMPLATE_HASH_LABEL_KEY,
    PREFER_NO_SCHEDULE_KEY,
    REVISION_ANNOTATION,
    REVISION_HISTORY_ANNOTATION,
)
from mcm_tasks.controllers.machinedeployment.hash import (
    SAFE_ALPHABET,
    HashKeyStep,
    equal_ignore_hash,
    hash_key_step,
    machine_set_name,
    template_hash,
)
from mcm_tasks.controllers.machinedeployment.revisions import (
    last_revision,
    max_revision,
    new_set_annotations,
    rolled_back_annotations,
)
from mcm_tasks.controllers.machinedeployment.sets import find_new_set, synced_new_set
from tests.unit.machinedeployment_support import deployment, machine_set, template


def tmpl(**changes: Any) -> MachineTemplateSpec:
    base = template(
        "class-v1",
        nodeTemplate={"metadata": {"labels": {"pool": "a"}}},
        drainTimeout="2h",
        creationTimeout="20m",
    )
    for path, value in changes.items():
        section, _, key = path.partition("__")
        target = base["metadata"] if section == "metadata" else base["spec"]
        target[key] = value
    return MachineTemplateSpec.model_validate(base)


#: pins the hash of one template so an accidental change of the algorithm shows (sets would be renamed)
PINNED = "ng7wrmcfwm"


def test_hash_is_consistent_and_pinned() -> None:
    first = template_hash(tmpl(), None)
    assert first == template_hash(tmpl(), None)
    assert len(first) == 10 and set(first) <= set(SAFE_ALPHABET)
    assert first == PINNED


@pytest.mark.parametrize(
    "change",
    [
        {"metadata__labels": {"name": "pool", "zone": "b"}},
        {"metadata__annotations": {"checksum": "x"}},
        {"spec__class": {"kind": "MachineClass", "name": "class-v2"}},
        {"spec__providerID": "aws:///x"},
    ],
)
def test_rollout_relevant_changes_change_the_hash(change: dict[str, Any]) -> None:
    assert template_hash(tmpl(**change), None) != template_hash(tmpl(), None)
    assert not equal_ignore_hash(tmpl(**change), tmpl())


@pytest.mark.parametrize(
    "change",
    [
        {"spec__nodeTemplate": {"metadata": {"labels": {"pool": "b"}}, "spec": {"taints": []}}},
        {"spec__nodeTemplate": None},
        {"spec__drainTimeout": "5m"},
        {"spec__healthTimeout": "1m"},
        {"spec__maxEvictRetries": 3},
        {"spec__nodeConditions": "KernelDeadlock"},
        {"spec__class": {"kind": "AWSMachineClass", "name": "class-v1"}},
        {"metadata__labels": {"name": "pool", MACHINE_TEMPLATE_HASH_LABEL_KEY: "whatever"}},
        {"metadata__annotations": {}},
    ],
)
def test_in_place_changes_keep_the_hash_and_the_new_set(change: dict[str, Any]) -> None:
    assert template_hash(tmpl(**change), None) == template_hash(tmpl(), None)
    assert equal_ignore_hash(tmpl(**change), tmpl())


def test_collision_count_changes_the_hash() -> None:
    hashes = {template_hash(tmpl(), count) for count in (None, 0, 1, 2, 3)}
    assert len(hashes) == 5


def test_hashes_of_many_templates_are_unique() -> None:
    hashes = {
        template_hash(tmpl(spec__class={"kind": "MachineClass", "name": f"c-{i}"}), None) for i in range(2000)
    }
    assert len(hashes) == 2000


def test_machine_set_name_uses_five_hash_characters() -> None:
    assert machine_set_name("pool-a", "bcdfghjklm") == "pool-a-bcdfg"


def test_find_new_set_is_the_oldest_matching_and_ignores_in_place_fields() -> None:
    d = deployment(
        3, tmpl=template("class-v2", drainTimeout="1h", nodeTemplate={"metadata": {"labels": {"x": "y"}}})
    )
    old = machine_set("old", 3, tmpl=template("class-v1"), age=0)
    newer = machine_set("newer", 0, tmpl=template("class-v2"), age=5)
    newest = machine_set("newest", 0, tmpl=template("class-v2", drainTimeout="3h"), age=9)
    assert find_new_set(d, [newest, old, newer]) is newer
    assert find_new_set(d, [old]) is None


# --- revisions -------------------------------------------------------------------------------------------


def test_max_and_last_revision() -> None:
    sets = [machine_set("a", 0, revision=1), machine_set("b", 0, revision=3), machine_set("c", 0, revision=2)]
    assert (max_revision(sets), last_revision(sets)) == (3, 2)
    assert (max_revision([]), last_revision([machine_set("a", 0, revision=4)])) == (0, 0)
    broken = machine_set("x", 0, annotations={REVISION_ANNOTATION: "not-a-number"})
    assert max_revision([*sets, broken]) == 3


def test_new_set_annotations_raise_revision_and_keep_history() -> None:
    deployment_notes = {
        "team": "infra",
        REVISION_ANNOTATION: "9",
        DESIRED_REPLICAS_ANNOTATION: "4",
        PREFER_NO_SCHEDULE_KEY: "True",
        "kubectl.kubernetes.io/last-applied-configuration": "{}",
    }
    fresh = new_set_annotations({}, deployment_notes, 3)
    assert fresh == {"team": "infra", REVISION_ANNOTATION: "3"}
    again = new_set_annotations({REVISION_ANNOTATION: "1", REVISION_HISTORY_ANNOTATION: "0"}, {}, 5)
    assert again == {REVISION_ANNOTATION: "5", REVISION_HISTORY_ANNOTATION: "0,1"}
    higher = new_set_annotations({REVISION_ANNOTATION: "7"}, {}, 5)
    assert higher == {REVISION_ANNOTATION: "7"}


def test_rolled_back_annotations_take_the_sets_but_keep_the_deployments_own() -> None:
    mine = {REVISION_ANNOTATION: "4", "team": "old", "gone": "x"}
    theirs = {REVISION_ANNOTATION: "2", "team": "new", DESIRED_REPLICAS_ANNOTATION: "3"}
    assert rolled_back_annotations(mine, theirs) == {REVISION_ANNOTATION: "4", "team": "new"}


# --- addHashKeyToISAndMachines, one step per pass -------------------------------------------------------

H = "hhhhh"
HASH = MACHINE_TEMPLATE_HASH_LABEL_KEY


def _set(*, selector_hash: bool = False, template_hash_label: str | None = None, generation: int = 1,
         observed: int = 1, replicas: int = 2, fully: int = 2) -> MachineSet:  # fmt: skip
    labels = {"name": "pool"}
    template_labels = dict(labels) if template_hash_label is None else {**labels, HASH: template_hash_label}
    match = {**labels, HASH: H} if selector_hash else labels
    return MachineSet.model_validate(
        {
            "metadata": {"name": "s", "generation": generation},
            "spec": {"replicas": replicas, "selector": {"matchLabels": match},
                     "template": {"metadata": {"labels": template_labels}}},
            "status": {"observedGeneration": observed, "fullyLabeledReplicas": fully},
        }
    )  # fmt: skip


def _machine(label: str | None, phase: str = "Running") -> Machine:
    labels = {"name": "pool"} if label is None else {"name": "pool", HASH: label}
    return Machine.model_validate(
        {"metadata": {"name": "m", "labels": labels}, "status": {"currentStatus": {"phase": phase}}}
    )


@pytest.mark.parametrize(
    ("machine_set", "machines", "step"),
    [
        pytest.param(_set(selector_hash=True), [_machine(None)], HashKeyStep.DONE,
                     id="the selector has the hash label: it's done syncing"),
        pytest.param(_set(), [_machine(None)], HashKeyStep.LABEL_TEMPLATE, id="1. add hash template label"),
        pytest.param(_set(template_hash_label="other"), [], HashKeyStep.LABEL_TEMPLATE,
                     id="1. precondition: a different hash in the template is replaced"),
        pytest.param(_set(template_hash_label=H, generation=2, observed=1), [_machine(None)],
                     HashKeyStep.WAIT_OBSERVED, id="WaitForMachineSetUpdated: generation not observed"),
        pytest.param(_set(template_hash_label=H), [_machine(H), _machine(None)], HashKeyStep.LABEL_MACHINES,
                     id="2. LabelMachinesWithHash: a machine without the hash"),
        pytest.param(_set(template_hash_label=H, fully=0), [_machine(H), _machine(None, "Failed")],
                     HashKeyStep.WAIT_FULLY_LABELED, id="Failed machines are inactive"),
        pytest.param(_set(template_hash_label=H, fully=1), [_machine(H), _machine(H)],
                     HashKeyStep.WAIT_FULLY_LABELED, id="WaitForMachinesHashPopulated"),
        pytest.param(_set(template_hash_label=H), [_machine(H), _machine(H)], HashKeyStep.LABEL_SELECTOR,
                     id="3. update label and selector"),
        pytest.param(_set(template_hash_label=H, replicas=3, fully=2), [_machine(H), _machine(H)],
                     HashKeyStep.LABEL_SELECTOR, id="a set short of its replicas (quota) does not hold"),
    ],
)  # fmt: skip
def test_hash_key_step(machine_set: MachineSet, machines: list[Machine], step: HashKeyStep) -> None:
    assert hash_key_step(machine_set, machines, H) is step


@pytest.mark.parametrize(("on_set", "on_deployment"), [(None, 2), (2, 1), (1, 0), (3, None)])
def test_the_new_set_follows_the_deployments_auto_preserve_maximum(
    on_set: int | None, on_deployment: int | None
) -> None:
    """Upstream getNewMachineSet updates the new set's autoPreserveFailedMachineMax when the
    deployment's changes; lowering it there is how auto-preserved machines above it are let go."""
    d = deployment(autoPreserveFailedMachineMax=on_deployment)
    ms = machine_set("new", 3, tmpl=d.spec.template.model_dump(by_alias=True, exclude_none=True))
    ms.spec.auto_preserve_failed_machine_max = on_set
    assert synced_new_set(d, ms, 2).spec.auto_preserve_failed_machine_max == on_deployment


def test_a_templates_identity_is_dumped_once_per_object_and_a_copy_judged_on_its_own() -> None:
    """``rollout_identity`` remembers its answer for the template object it was asked about (a
    deployment pass compares the same templates several times), never for another object that
    happens to have been given the same ``id``: a changed copy gets its own answer."""
    from mcm_tasks.controllers.machinedeployment import hash as hashes

    base = tmpl()
    first = hashes.rollout_identity(base)
    assert hashes.rollout_identity(base) is first  # remembered
    renamed = base.spec.class_.model_copy(update={"name": "class-v2"})
    changed = base.model_copy(update={"spec": base.spec.model_copy(update={"class_": renamed})})
    assert not equal_ignore_hash(base, changed)
    assert template_hash(base, None) != template_hash(changed, None)
    hashes._IDENTITIES.clear()
    assert hashes.rollout_identity(base) == first and hashes.rollout_identity(base) is not first
    for _ in range(hashes._IDENTITIES_LIMIT + 1):  # bounded: a full table starts again
        hashes.rollout_identity(tmpl())
    assert len(hashes._IDENTITIES) <= hashes._IDENTITIES_LIMIT
