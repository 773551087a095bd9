"""The scope of one reconcile pass: what a pass over one object works with, in one object handed to
its phases, as Cluster API's reconcilers hand theirs a ``MachineScope``. Upstream MCM keeps the same
things on its ``controller`` struct (``controlMachineClient``, ``targetCoreClient``, ``recorder``, the
listers, ``safetyOptions``) beside the object ``reconcileClusterMachine`` and its siblings are given.

- ``obj``: the object the pass is about, read once at its start, kept as last written; each
  controller names it (``ObjectName``: ``scope.machine``, ``scope.machine_set``, ``ctx.deployment``,
  ``scope.job``);
- the shared reader: ``listers``, read through the one policy of ``context_io`` (``get_object``,
  ``list_objects``: the mirror once complete, else the API server);
- the writer's clients: ``api`` (control cluster) and ``target`` (None in no-target mode), this
  process's (``context_io.control_api``, ``context_io.target_api``), resolved when a phase first uses them:
  a pass that writes nothing (a debounced safety job, a frozen machine) never builds them; or the
  ones the scope was built with (``clients``: a test's recording fake);
- ``recorder`` (Events), ``settings``, ``now`` (the pass's one clock reading at its start) and
  ``clock`` (read again by a step that times what the pass itself waited on: a drain, a VM call),
  both to the second as status fields have them; ``precise_clock``, to the microsecond, for what
  measures a span (a drain's progress, a bootstrap token's expiry);
- ``memo``: what one phase works out that a later phase of the same pass reads again.

Registration builds it (``registration.scoped``): a controller gives the read of its object and its
phases, and gets the key reconciler the queue contract calls. Nothing in it outlives the pass.

The scope is the one place a pass reads the process's clients, settings and clock:
``tools/check_pass_scope.py`` (in ``make lint``) fails on any other read under ``controllers/``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, Self, TypeVar, overload

from kubernetes.client import ApiClient

from mcm_tasks.api import now_utc, precise_now_utc
from mcm_tasks.cache import Listers, get_listers
from mcm_tasks.controllers.common import context_io
from mcm_tasks.controllers.common.events import recorder
from mcm_tasks.kube.events import EventRecorder
from mcm_tasks.settings import Settings, get_settings

T = TypeVar("T")
V = TypeVar("V")


@dataclass(kw_only=True)
class PassScope(Generic[T]):
    """One pass over one object (see the module)."""

    #: the queue key of the pass
    key: str
    obj: T
    settings: Settings
    listers: Listers
    now: datetime = field(default_factory=now_utc)
    clock: Callable[[], datetime] = field(default=now_utc, repr=False)
    precise_clock: Callable[[], datetime] = field(default=precise_now_utc, repr=False)
    #: (control, target) the pass uses instead of the process's; None: the process's
    clients: tuple[ApiClient, ApiClient | None] | None = field(default=None, repr=False)
    memo: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def begin(cls, key: str, obj: T, **own: Any) -> Self:
        """The scope of a pass over ``obj``, with this process's settings and listers."""
        return cls(key=key, obj=obj, settings=get_settings(), listers=get_listers(), **own)

    @property
    def api(self) -> ApiClient:
        """The control cluster's client: where the pass writes."""
        return self.clients[0] if self.clients is not None else context_io.control_api()

    @property
    def target(self) -> ApiClient | None:
        """The target cluster's client; None in no-target mode (``--target-kubeconfig=none``)."""
        return self.clients[1] if self.clients is not None else context_io.target_api()

    @property
    def recorder(self) -> EventRecorder:
        """Events on the control cluster, under ``machine-controller-manager``."""
        return recorder(self.api)

    def remember(self, name: str, compute: Callable[[], V]) -> V:
        """``compute()`` once per pass: later phases asking for ``name`` get the first answer."""
        if name not in self.memo:
            self.memo[name] = compute()
        found: V = self.memo[name]
        return found


class ObjectName(Generic[T]):
    """The scope's object under the name its controller gives it (``machine = ObjectName[Machine]()``
    in a ``PassScope[Machine]``): reads and writes go to ``obj``."""

    @overload
    def __get__(self, scope: None, owner: type[Any]) -> ObjectName[T]: ...
    @overload
    def __get__(self, scope: PassScope[T], owner: type[Any]) -> T: ...
    def __get__(self, scope: PassScope[T] | None, owner: type[Any]) -> T | ObjectName[T]:
        return self if scope is None else scope.obj

    def __set__(self, scope: PassScope[T], value: T) -> None:
        scope.obj = value
