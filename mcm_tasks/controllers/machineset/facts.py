"""What a MachineSet pass reads of each machine, decided once per machine version (pure).

A pass looks at every machine of its set several times (claim, propagation, preservation, the
replica plan, the status, the scaling conditions), each time through a few attribute reads and
annotation lookups: about fifteen small decisions per machine, which at a thousand machines were
most of a pass (issue 28). None of them depends on the clock, only on the machine and on the set's
identity, selector and template labels; ``facts_of`` takes them all at once, so that a machine
shared through the process's parsed-object cache (``Lister.shared``) is decided on the first pass
that reads its version and looked up on every later one (``reconcile.facts_reader``). What does
depend on the clock (a preservation's expiry, a machine marked for deletion coming of age, how long
a machine has waited) is decided afresh on each pass, but only for the machines whose facts say it
can apply (``preserving``, ``triggered``), or from what the facts kept (``wait``: what a machine
waits for and since when), so a pass's cost follows the machines that changed and the few that
need a look, not the size of the set. ``Census`` then groups a pass's machines in one look.

Each fact is the answer of the function it stands for, to the letter: ``claim`` is
``owners.claim_action``, ``candidate`` is what ``reconcile.candidate_machines`` keeps,
``terminating`` is ``replicas.is_terminating``, ``wait`` is ``holdup.wait_of``, and so on;
``tests/unit/test_machineset_facts.py`` holds them to it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mcm_tasks.api import Machine, MachinePhase, MachineSet, MachineState, dump
from mcm_tasks.api.constants import (
    MACHINE_PRIORITY_ANNOTATION,
    MACHINE_PRIORITY_TRIGGERED,
    NODE_LABEL_KEY,
    PRESERVE_ANNOTATION,
    UPDATE_RESULT_LABEL_KEY,
)
from mcm_tasks.controllers.common.holdup import Wait, wait_of
from mcm_tasks.controllers.common.owners import ClaimAction, claim_action, selects
from mcm_tasks.controllers.common.preservation import LAST_APPLIED_NODE_PRESERVE_ANNOTATION, is_auto_preserved

#: prefix of the name of a machine's facts for one set in the parsed-object cache
FACTS = "machineset.facts:"


@dataclass(frozen=True, slots=True)
class SetFacts:
    """One machine as its set's pass decides on it, without the clock."""

    #: ``reconcile.candidate_machines`` keeps it: the set controls it, or it is an orphan the set selects
    candidate: bool
    #: ``owners.claim_action`` for the set
    claim: ClaimAction
    phase: str
    #: ``replicas.is_terminating``: a deletionTimestamp, or the Terminating phase
    terminating: bool
    #: a deletionTimestamp
    deleting: bool
    #: ``replicas.is_failed``: the Failed phase
    failed: bool
    #: what it waits for (``holdup.wait_of``), None while it serves (Running, not being deleted)
    wait: Wait | None
    #: ``lastOperation.state`` Failed (``status.failed_summary`` lists it)
    failed_operation: bool
    #: carries every label of the set's template (``status.is_fully_labeled``)
    fully_labeled: bool
    #: ``preservation.is_auto_preserved``
    auto_preserved: bool
    #: a preserve or last-applied Node preserve annotation: only such a machine can be preserved
    #: (``preservation.is_preserved`` is False without one)
    preserving: bool
    #: ``status.currentStatus.preserveExpiryTime`` is set
    has_expiry: bool
    #: the autoscaler's deletion priority (``machinepriority`` = 1)
    triggered: bool
    #: an in-place update moves it between sets (the ``update-result`` label)
    in_transfer: bool
    #: the ``node`` label
    node_name: str


def set_identity(machine_set: MachineSet) -> str:
    """What the facts depend on of the set (equal for equal sets): the name they are cached under."""
    meta = machine_set.metadata
    selector = None if machine_set.spec.selector is None else dump(machine_set.spec.selector)
    template_labels = sorted(machine_set.spec.template.metadata.labels.items())
    return FACTS + repr((meta.namespace, meta.uid, meta.is_deleting, selector, template_labels))


def facts_of(machine: Machine, machine_set: MachineSet) -> SetFacts:
    """The facts of one machine for ``machine_set``."""
    meta, status = machine.metadata, machine.status
    phase = status.current_status.phase
    deleting = meta.is_deleting
    annotations, labels = meta.annotations, meta.labels
    controller = meta.controller_ref()
    if meta.namespace != machine_set.metadata.namespace:
        candidate = False
    elif controller is not None:
        candidate = bool(controller.uid == machine_set.metadata.uid)
    else:
        candidate = selects(machine_set.spec.selector, labels)
    return SetFacts(
        candidate=candidate,
        claim=claim_action(meta, machine_set.metadata, machine_set.spec.selector),
        phase=phase,
        terminating=deleting or phase == MachinePhase.TERMINATING,
        deleting=deleting,
        failed=phase == MachinePhase.FAILED,
        wait=wait_of(machine),
        failed_operation=status.last_operation.state == MachineState.FAILED,
        fully_labeled=machine_set.spec.template.metadata.labels.items() <= labels.items(),
        auto_preserved=is_auto_preserved(machine),
        preserving=PRESERVE_ANNOTATION in annotations or LAST_APPLIED_NODE_PRESERVE_ANNOTATION in annotations,
        has_expiry=status.current_status.preserve_expiry_time is not None,
        triggered=annotations.get(MACHINE_PRIORITY_ANNOTATION) == MACHINE_PRIORITY_TRIGGERED,
        in_transfer=UPDATE_RESULT_LABEL_KEY in labels,
        node_name=labels.get(NODE_LABEL_KEY, ""),
    )


#: the facts of a machine for the pass's set (``reconcile.facts_reader``: looked up per version)
FactsOf = Callable[[Machine], SetFacts]


def direct(machine_set: MachineSet) -> FactsOf:
    """Facts computed on every call (what a caller without the cache uses)."""

    def read(machine: Machine) -> SetFacts:
        return facts_of(machine, machine_set)

    return read


@dataclass(frozen=True)
class Census:
    """A pass's claimed machines grouped by their facts, in one look at each: what the replica plan,
    the status and the scaling conditions read of them. Every list keeps the machines' order."""

    #: the claimed machines and their facts, index for index
    machines: tuple[Machine, ...]
    facts: tuple[SetFacts, ...]
    #: not terminating (``replicas.is_terminating``)
    active: tuple[Machine, ...]
    #: an active machine an in-place update moves between sets
    in_transfer: bool
    #: active machines the autoscaler triggered for deletion
    triggered: tuple[Machine, ...]
    #: active Failed machines
    failed: tuple[Machine, ...]
    #: machines whose lastOperation failed
    failed_operation: tuple[Machine, ...]
    #: Failed machines with a preserve annotation (the only ones that can be preserved Failed ones)
    preserved_failed_candidates: tuple[Machine, ...]
    #: machines being deleted (a deletionTimestamp)
    deleting: tuple[Machine, ...]
    #: what the machines not being deleted that do not serve wait for (``holdup.wait_of``)
    waiting: tuple[Wait, ...]
    #: what the machines being deleted wait for
    deleting_waits: tuple[Wait, ...]
    #: machines with a preservation expiry
    expiring: tuple[Machine, ...]
    running: int
    available: int
    fully_labeled: int
    #: auto-preserved machines not being deleted
    auto_preserved: int

    @property
    def live(self) -> int:
        """Machines not being deleted."""
        return len(self.machines) - len(self.deleting)


def census_of(machines: Sequence[Machine], read: FactsOf) -> Census:
    """The census of ``machines`` (the set's claimed ones), their facts from ``read``."""
    found = tuple(read(m) for m in machines)
    active: list[Machine] = []
    triggered: list[Machine] = []
    failed: list[Machine] = []
    failed_operation: list[Machine] = []
    preserved: list[Machine] = []
    deleting: list[Machine] = []
    waiting: list[Wait] = []
    deleting_waits: list[Wait] = []
    expiring: list[Machine] = []
    in_transfer = False
    running = available = fully_labeled = auto_preserved = 0
    for machine, f in zip(machines, found, strict=True):
        if f.phase == MachinePhase.RUNNING:
            running += 1
        elif f.phase == MachinePhase.AVAILABLE:
            available += 1
        fully_labeled += f.fully_labeled
        if f.failed_operation:
            failed_operation.append(machine)
        if f.deleting:
            deleting.append(machine)
            if f.wait is not None:  # always: a machine being deleted does not serve
                deleting_waits.append(f.wait)
        else:
            auto_preserved += f.auto_preserved
            if f.wait is not None:
                waiting.append(f.wait)
        if f.failed and f.preserving:
            preserved.append(machine)
        if f.has_expiry:
            expiring.append(machine)
        if f.terminating:
            continue
        active.append(machine)
        in_transfer = in_transfer or f.in_transfer
        if f.triggered:
            triggered.append(machine)
        if f.failed:
            failed.append(machine)
    return Census(
        machines=tuple(machines),
        facts=found,
        active=tuple(active),
        in_transfer=in_transfer,
        triggered=tuple(triggered),
        failed=tuple(failed),
        failed_operation=tuple(failed_operation),
        preserved_failed_candidates=tuple(preserved),
        deleting=tuple(deleting),
        waiting=tuple(waiting),
        deleting_waits=tuple(deleting_waits),
        expiring=tuple(expiring),
        running=running,
        available=running + available,
        fully_labeled=fully_labeled,
        auto_preserved=auto_preserved,
    )
