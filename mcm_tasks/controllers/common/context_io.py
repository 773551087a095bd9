"""What a machine reconcile reads: the machine, its class, the class's secrets merged, its node.

Reads come from the informers' Redis mirror when it holds a complete list of the kind, and from
the API server otherwise (a worker started before the informer synced, tests without an informer).
Secret data always comes from the API server (``secretdata``): the mirror never holds it. Either
way callers get models or API dicts and never know which; they write only the API server.

Secrets: the merged data travels in a ``providers.driver.Secret`` (whose repr hides the values) and
is handed to drivers only. Nothing here logs it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import redis
from kubernetes.client import ApiClient

from mcm_tasks import kinds
from mcm_tasks.api import (
    K8sObject,
    Machine,
    MachineClass,
    MachineDeployment,
    MachineSet,
    Obj,
    SecretReference,
)
from mcm_tasks.api.constants import NODE_LABEL_KEY
from mcm_tasks.cache import Listers, get_listers
from mcm_tasks.cache.layout import BY_CLASS, object_key, split_key
from mcm_tasks.cache.listers import Lister
from mcm_tasks.cache.models import Unreadable, parse_object
from mcm_tasks.cache.reader import get_reader
from mcm_tasks.controllers.common import secretdata_io
from mcm_tasks.kube import ops
from mcm_tasks.kube.clients import get_clusters
from mcm_tasks.kube.resources import Resource
from mcm_tasks.redisdb import get_redis, rkey
from mcm_tasks.settings import Settings
from providers.driver import Secret

log = logging.getLogger(__name__)

M = TypeVar("M", bound=K8sObject)


# --- clients ---------------------------------------------------------------------------------------------


def control_api() -> ApiClient:
    """The control cluster's client: read by the scope builders only (``scope.PassScope.api``)."""
    return get_clusters().control.api


def target_api() -> ApiClient | None:
    """The target cluster's client; None in no-target mode (``--target-kubeconfig=none``). Read by
    the scope builders only (``scope.PassScope.target``)."""
    target = get_clusters().target
    return None if target is None else target.api


def _listers() -> Listers:
    return get_listers()


def mirror_has(lister: Lister[Any]) -> bool:
    """Whether to trust the mirror for this kind: only once the informer listed it completely. The
    one policy of every controller's reads: a mirror that cannot say (Redis unavailable) is not
    trusted, and the caller asks the API server instead."""
    try:
        return lister.synced()
    except redis.RedisError:
        return False


def prefetch(wanted: Iterable[tuple[str, str]], exists: Iterable[str] = ()) -> list[bool] | None:
    """Read ahead, in one round trip, what the pass is about to get (``CacheReader.prefetch``): the
    objects ``wanted`` as (mirror kind, ``object_key``), then read from the pass's memory by
    ``get_raw``, ``get_object`` and the listers; and whether each Redis key of ``exists`` exists.
    None when Redis could not say: the caller reads on its own, as it would have without this."""
    try:
        return get_reader().prefetch(list(wanted), list(exists))
    except redis.RedisError:
        return None


def list_objects(
    lister: Lister[Any],
    api: ApiClient,
    resource: Resource,
    namespace: str | None = None,
    *,
    mirror: Callable[[], Iterable[Obj]] | None = None,
    label_selector: str | None = None,
    field_selector: str | None = None,
    all_namespaces: bool = False,
    live: bool = False,
) -> list[Obj]:
    """Objects of a kind as API dicts: from the mirror when it is complete (``mirror_has``), else one
    LIST from the API server; ``live`` skips the mirror (a decision that must not act on a lagging one).

    ``mirror`` narrows the mirror read through an index and must pick what the selectors pick on the
    API server; without it the mirror read is every object of the kind (in ``namespace``, if given).
    The list counterpart of ``get_object``.
    """
    if not live and mirror_has(lister):
        if mirror is not None:
            return list(mirror())
        return [o for o in lister.raw.list() if namespace is None or _namespace_of(o) == namespace]
    found = ops.list_(
        api,
        resource,
        namespace,
        all_namespaces=all_namespaces,
        label_selector=label_selector,
        field_selector=field_selector,
    )
    return list(found["items"])


def _namespace_of(obj: Mapping[str, Any]) -> str | None:
    return (obj.get("metadata") or {}).get("namespace")


# --- machines and classes --------------------------------------------------------------------------------


def namespace_of(key: str, default_namespace: str) -> tuple[str, str]:
    """(namespace, name) of a queue key; a bare name is in ``default_namespace`` (the controller's,
    ``settings.namespace``)."""
    namespace, name = split_key(key)
    return namespace or default_namespace, name


def get_raw(
    lister: Lister[Obj], api: ApiClient, resource: Resource, name: str, namespace: str | None = None
) -> Obj | None:
    """One object of a kind read as API dicts (Nodes, Secrets' metadata): from the mirror when it is
    complete (``mirror_has``), else a GET from the API server; None when it does not exist. The
    one-object counterpart of ``list_objects``; ``get_object`` is its typed sibling."""
    if mirror_has(lister):
        return lister.get(name, namespace)
    return ops.get(api, resource, name, namespace, missing_ok=True)


def get_object(
    lister: Lister[M], api: ApiClient, resource: Resource, model: type[M], name: str, namespace: str
) -> M | None:
    """One object of a control-cluster kind: from the mirror when it is complete (``mirror_has``),
    else a GET from the API server ``api``; None when it does not exist."""
    if mirror_has(lister):
        return lister.get(name, namespace)
    data = ops.get(api, resource, name, namespace, missing_ok=True)
    return None if data is None else parse_object(model, data)


def get_pass_object(
    lister: Lister[M],
    api: ApiClient,
    resource: Resource,
    model: type[M],
    name: str,
    namespace: str,
    *,
    lagging: bool,
) -> M | None:
    """The object a Machine, MachineSet or termination pass is about: ``get_object``, but from the
    API server while the mirror lags (``lagging``: ``lagging_io.mirror_lagging``), as the pass that
    wrote it may have woken this one before the watch brought the change (``lagging_io.wake``)."""
    if lagging:
        data = ops.get(api, resource, name, namespace, missing_ok=True)
        return None if data is None else parse_object(model, data)
    return get_object(lister, api, resource, model, name, namespace)


def get_machine(api: ApiClient, name: str, namespace: str, *, lagging: bool = False) -> Machine | None:
    """The machine ``namespace/name`` (``get_pass_object``: live while the mirror lags)."""
    return get_pass_object(
        _listers().machines, api, kinds.MACHINE.resource, Machine, name, namespace, lagging=lagging
    )


def get_node_live(target: ApiClient | None, name: str) -> Obj | None:
    """The target cluster's Node from the API server (None: absent, or no-target mode): what a
    machine waiting to join reads while the mirror lags (``MachineScope.node``)."""
    if not name or target is None:
        return None
    return ops.get(target, kinds.NODE.resource, name, missing_ok=True)


def get_machine_live(api: ApiClient, name: str, namespace: str) -> Machine | None:
    data = ops.get(api, kinds.MACHINE.resource, name, namespace, missing_ok=True)
    return None if data is None else parse_object(Machine, data)


def get_machine_set(api: ApiClient, name: str, namespace: str) -> MachineSet | None:
    return get_object(_listers().machine_sets, api, kinds.MACHINE_SET.resource, MachineSet, name, namespace)


def get_machine_deployment(api: ApiClient, name: str, namespace: str) -> MachineDeployment | None:
    return get_object(
        _listers().machine_deployments,
        api,
        kinds.MACHINE_DEPLOYMENT.resource,
        MachineDeployment,
        name,
        namespace,
    )


def set_setting(api: ApiClient, machine_set: MachineSet, key: str, default_namespace: str) -> str | None:
    """An mcm-tasks setting (annotation ``key``) a MachineDeployment or MachineSet carries for its
    machines: the deployment's value when it has one (it is what people edit; the set's copy may be
    older), else the set's own; None when neither sets it. The owner is found by the controller
    reference and read like every other object (the mirror, else the API server)."""
    ref = machine_set.metadata.controller_ref()
    if ref is not None and ref.kind == "MachineDeployment":
        namespace = machine_set.metadata.namespace or default_namespace
        deployment = get_machine_deployment(api, ref.name, namespace)
        if deployment is not None and key in deployment.metadata.annotations:
            return deployment.metadata.annotations[key]
    return machine_set.metadata.annotations.get(key)


def machine_setting(api: ApiClient, machine: Machine, key: str, default_namespace: str) -> str | None:
    """``set_setting`` for the machine's MachineSet (None for a machine without one)."""
    ref = machine.metadata.controller_ref()
    if ref is None or ref.kind != "MachineSet":
        return None
    namespace = machine.metadata.namespace or default_namespace
    owner = get_machine_set(api, ref.name, namespace)
    return None if owner is None else set_setting(api, owner, key, default_namespace)


def get_machine_class(api: ApiClient, name: str, namespace: str) -> MachineClass | None:
    return get_object(
        _listers().machine_classes, api, kinds.MACHINE_CLASS.resource, MachineClass, name, namespace
    )


def get_machine_class_live(api: ApiClient, name: str, namespace: str) -> MachineClass | None:
    data = ops.get(api, kinds.MACHINE_CLASS.resource, name, namespace, missing_ok=True)
    return None if data is None else parse_object(MachineClass, data)


def readable(model: type[M], raws: Iterable[Obj]) -> list[M]:
    """The objects that parse, as models; one that does not is left out without a word, as the
    listers leave it out of every mirror list: its own reconcile reads it, fails to parse it and
    answers with an ``Unreadable`` Event (``controllers.problems_io.answers_unreadable``), and one bad
    object cannot stall the pass that lists it."""
    out = []
    for raw in raws:
        try:
            out.append(parse_object(model, raw))
        except Unreadable as err:
            log.debug("left out of a list: %s", err)
    return out


def machines_of_class(api: ApiClient, name: str, namespace: str, *, live: bool = False) -> list[Machine]:
    """The machines of a class (upstream's ``findMachinesForClass``) that can be read, through
    ``list_objects``: the mirror's class index, else (or ``live``) one LIST of the namespace."""
    lister = _listers().machines

    def of_class_in_mirror() -> list[Obj]:
        return [m for m in lister.raw.of_class(name) if _namespace_of(m) == namespace]

    raws = list_objects(lister, api, kinds.MACHINE.resource, namespace, mirror=of_class_in_mirror, live=live)
    return [m for m in readable(Machine, raws) if m.spec.class_.name == name]


def class_in_use(api: ApiClient, name: str, namespace: str, *, lagging: bool = False) -> bool:
    """Whether a machine that can be read uses the class (the class reconcile's question for its
    finalizer): from the mirror, the keys under the class index and, from the first one on, its
    machines read (shared models, not parsed again while unchanged) until one is readable: one
    machine read, not every machine of the class parsed on every pass.
    Without the mirror, ``machines_of_class``. The same answer as ``bool(machines_of_class(...))``.
    A "no" while the mirror lags (``lagging``) is asked of the API server: the first machines of a
    new class wait for its finalizer (a rollout to a new class), and the late mirror has not seen them
    yet."""
    lister = _listers().machines
    if not mirror_has(lister):
        return bool(machines_of_class(api, name, namespace))
    if _class_in_mirror(lister, name, namespace):
        return True
    return lagging and bool(machines_of_class(api, name, namespace, live=True))


def _class_in_mirror(lister: Lister[Machine], name: str, namespace: str) -> bool:
    shared = lister.shared
    for key in lister.keys_by_index(BY_CLASS, name):
        if split_key(key)[0] != namespace:
            continue
        try:
            machine = shared.get_by_key(key)
        except Unreadable:
            continue
        if machine is not None and machine.spec.class_.name == name:
            return True
    return False


def machines_on_node(api: ApiClient, node_name: str) -> list[Machine]:
    """Machines whose ``node`` label names this node (MCM's ``getMachineFromNode``) that can be read,
    through ``list_objects``: the mirror's node index, else a LIST by that label."""
    lister = _listers().machines
    raws = list_objects(
        lister,
        api,
        kinds.MACHINE.resource,
        mirror=lambda: lister.raw.on_node(node_name),
        label_selector=f"{NODE_LABEL_KEY}={node_name}",
    )
    return readable(Machine, raws)


def machines_with_label(api: ApiClient, key: str, value: str, namespace: str) -> list[Machine]:
    """Live list by one label, for decisions that must not act on a lagging mirror (the permit count)."""
    items = ops.list_(api, kinds.MACHINE.resource, namespace, label_selector=f"{key}={value}")["items"]
    return [Machine.model_validate(i) for i in items]


def machines_in_namespace(api: ApiClient, namespace: str) -> list[Machine]:
    """Every readable machine of a namespace, through ``list_objects`` (the zone view of the
    remediation budgets, which spans deployments)."""
    raws = list_objects(_listers().machines, api, kinds.MACHINE.resource, namespace)
    return readable(Machine, raws)


def all_nodes(target: ApiClient | None) -> list[Obj]:
    """Every Node of the ``target`` cluster (API dicts), through ``list_objects``; [] in no-target mode."""
    if target is None:
        return []
    return list_objects(_listers().nodes, target, kinds.NODE.resource)


# --- secrets ---------------------------------------------------------------------------------------------


def secret_exists(ref: SecretReference, default_namespace: str) -> bool | None:
    """Whether a referenced secret exists, from the mirror's metadata; None when the mirror cannot
    tell (not synced), so the data read decides."""
    lister = _listers().secrets
    if not mirror_has(lister):
        return None
    return lister.raw.get(ref.name, ref.namespace or default_namespace) is not None


def get_secret_data(
    api: ApiClient, ref: SecretReference, default_namespace: str, ttl: float
) -> dict[str, bytes] | None:
    """The decoded data of a referenced secret, or None when it does not exist. Read from the API
    server (the mirror never holds secret data), through the short in-process cache, which the
    mirror's resourceVersion invalidates when the secret changes."""
    namespace = ref.namespace or default_namespace
    lister = _listers().secrets
    version: str | None = None
    if mirror_has(lister):
        mirrored = lister.raw.get(ref.name, namespace)
        if mirrored is None:
            return None
        version = str((mirrored.get("metadata") or {}).get("resourceVersion", ""))
    return secretdata_io.read_secret_data(api, ref.name, namespace, version, ttl=ttl)


def merge_secret_data(*datas: Mapping[str, bytes]) -> dict[str, bytes]:
    """MCM's ``mergeDataMaps``: later maps win on conflicting keys."""
    out: dict[str, bytes] = {}
    for data in datas:
        out.update(data)
    return out


@dataclass
class ClassContext:
    """A machine's class with its secrets merged (``secretRef`` first, ``credentialsSecretRef`` wins).

    The merged data is read on first use of ``secret`` only: most reconciles (health checks of
    running machines) never call a driver, and they cost no secret read.
    """

    machine_class: MachineClass
    #: ``namespace/name`` of referenced secrets that do not exist
    missing_secrets: list[str] = field(default_factory=list)
    loader: Callable[[], Secret] | None = field(default=None, repr=False)
    _secret: Secret | None = field(default=None, repr=False)

    @property
    def secret(self) -> Secret:
        if self._secret is None:
            self._secret = self.loader() if self.loader is not None else Secret(data={})
        return self._secret


def secret_refs(machine_class: MachineClass) -> list[SecretReference]:
    return [r for r in (machine_class.secret_ref, machine_class.credentials_secret_ref) if r and r.name]


#: class key (namespace/name) → the mirror keys of the secrets it named when last loaded here; a
#: hint for the next pass's prefetch (``likely_class_secrets``), bounded as classes come and go
_class_secrets: dict[str, list[tuple[str, str]]] = {}
CLASS_SECRETS_KEPT = 10_000


def likely_class_secrets(class_name: str, namespace: str) -> list[tuple[str, str]]:
    """The mirror keys of the secrets a MachineClass named when this process last loaded it
    (``load_class_context``): for a pass's prefetch of its class (``reconcile._ready``), so that the
    secrets' existence (``secret_exists``) comes in the same round trip instead of one of its own
    after the class is read. A guess only: a class whose refs changed since is read right (its new
    secrets are read when asked), and one never loaded here adds nothing."""
    return _class_secrets.get(object_key(namespace, class_name), [])


def _remember_class_secrets(machine_class: MachineClass, namespace: str, refs: list[SecretReference]) -> None:
    if len(_class_secrets) >= CLASS_SECRETS_KEPT:
        _class_secrets.clear()
    keys = [(kinds.SECRET.mirror, object_key(r.namespace or namespace, r.name)) for r in refs]
    _class_secrets[object_key(namespace, machine_class.metadata.name or "")] = keys


def load_class_context(api: ApiClient, machine_class: MachineClass, settings: Settings) -> ClassContext:
    """The class with its secrets (read through the control cluster ``api``): their existence from the
    mirror, their data on first use. Without a synced mirror, existence needs the data read, which
    then happens at once."""
    namespace = machine_class.metadata.namespace or settings.namespace
    refs = secret_refs(machine_class)
    _remember_class_secrets(machine_class, namespace, refs)
    names = {id(ref): f"{ref.namespace or namespace}/{ref.name}" for ref in refs}
    known = {id(ref): secret_exists(ref, namespace) for ref in refs}

    def load() -> tuple[Secret, list[str]]:
        datas, missing = [], []
        for ref in refs:
            data = (
                None
                if known[id(ref)] is False
                else get_secret_data(api, ref, namespace, settings.secret_cache_ttl)
            )
            if data is None:
                missing.append(names[id(ref)])
            else:
                datas.append(data)
        return Secret(data=merge_secret_data(*datas)), missing

    if any(exists is None for exists in known.values()):
        secret, missing = load()
        return ClassContext(machine_class, missing, _secret=secret)
    missing = [names[id(ref)] for ref in refs if not known[id(ref)]]
    return ClassContext(machine_class, missing, loader=lambda: load()[0])


# --- nodes -----------------------------------------------------------------------------------------------


def get_node(target: ApiClient | None, name: str) -> Obj | None:
    """The ``target`` cluster's Node (an API dict); None when absent or in no-target mode."""
    if not name or target is None:
        return None
    return get_raw(_listers().nodes, target, kinds.NODE.resource, name)


# --- the creation marker ---------------------------------------------------------------------------------


def _creation_key(machine_key: str) -> str:
    return rkey("machine", "creating", machine_key)


@contextmanager
def creation_in_flight(machine_key: str, lock_ttl: float) -> Iterator[None]:
    """Mark a machine as being in its creation flow, for every worker to see (MCM's
    ``pendingMachineCreationMap``): the deletion flow waits while a create call may be running.
    The mark expires with the reconcile lock (``lock_ttl``, ``settings.reconcile_lock_ttl``), so a
    killed worker cannot leave it behind."""
    client = get_redis()
    ttl = max(1, int(lock_ttl))
    client.set(_creation_key(machine_key), "1", ex=ttl)
    try:
        yield
    finally:
        client.delete(_creation_key(machine_key))


def creation_in_progress(machine_key: str) -> bool:
    return bool(get_redis().exists(_creation_key(machine_key)))
