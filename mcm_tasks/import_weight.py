"""What a process imports, kept to what it runs (issue 28: memory at rest).

Every imported module stays in memory for the life of the process (its code objects, its
functions, its classes), and each of an installation's processes holds its own copy: a worker
pod, an informer. Two imports brought parts no controller process runs:

- the ``kubernetes`` package's ``__init__`` imports every part of the official client the moment
  any of it is imported: besides the typed client and the kubeconfig loader this project uses, the
  dynamic client (with ``kubernetes_validate`` and jsonschema), the websocket ``stream``, ``watch``,
  ``leaderelection`` and ``informer``: ~80 modules, 3 MB of Python heap and 6 MB of resident
  memory per process. ``defer_kubernetes_parts`` registers the package as an object whose parts
  are imported on first use (PEP 562's module ``__getattr__``): ``kubernetes.config``,
  ``from kubernetes import watch`` and ``import kubernetes.dynamic`` work as before, and the
  package's own modules are the same files.
- the ``mcm-tasks`` command imported every sub-command's module (see ``mcm_tasks.cli``).

``mcm_tasks/__init__.py`` calls ``defer_kubernetes_parts`` so that it runs before anything of
ours imports the client. Where something imported ``kubernetes`` first, it does nothing.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any, Final

#: the package whose parts load on first use
_PACKAGE: Final = "kubernetes"


class _DeferredPackage(types.ModuleType):
    """``kubernetes``, its sub-packages imported when first named."""

    def __getattr__(self, name: str) -> Any:
        if name == "__version__":
            from importlib.metadata import version

            return version(_PACKAGE)
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return importlib.import_module(f"{_PACKAGE}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{_PACKAGE}.{name}":
                raise  # a part that exists failed on its own import: say so
            raise AttributeError(f"module {_PACKAGE!r} has no attribute {name!r}") from None


def defer_kubernetes_parts() -> bool:
    """Register ``kubernetes`` so that its parts load when first used; False when it was already
    imported (nothing to defer) or is not installed."""
    if _PACKAGE in sys.modules:
        return False
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or spec.submodule_search_locations is None:
        return False
    package = _DeferredPackage(_PACKAGE, "The official Kubernetes client; parts load on first use.")
    package.__spec__ = spec
    package.__path__ = list(spec.submodule_search_locations)
    package.__file__ = spec.origin
    package.__package__ = _PACKAGE
    sys.modules[_PACKAGE] = package
    return True
