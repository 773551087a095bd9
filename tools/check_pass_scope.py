"""Check that the controllers read clients, settings and the clock from their pass scope only, and
that a module that decides does not act.

A phase below a controller's entry gets what it works with from the scope it is handed
(``controllers/common/scope.py`` ``PassScope``: ``api``, ``target``, ``settings``, ``clock()``,
``precise_clock()``), so a test builds the scope around a fake and a fixed clock and the phase never
reaches for a process global behind it. This walks every module under ``mcm_tasks/controllers/`` and
reports each call of a process getter (``get_settings()``, ``now_utc()``, ``precise_now_utc()``,
``get_clusters()``, ``control_api()``, ``target_api()``) or of the wall clock itself
(``datetime.now()``) outside the scope builders listed in ``SCOPE_BUILDERS``: the only places that
may read them.

It also checks the naming rule of docs/architecture.md: under ``mcm_tasks/controllers/`` a module
decides and its ``_io`` sibling acts. A module whose name does not end in ``_io`` (the entry modules
of ``ENTRY_MODULES`` and the pass modules of ``PASS_MODULES`` aside) must not import an edge that
acts (``ACTING_MODULES``: the API calls, the mirror, the Redis client) nor an ``_io`` module or one
of its functions; it may name an ``_io`` module's types (a CamelCase name), as the drain's plan names
its progress records.

    python tools/check_pass_scope.py          # exit 1 and list the calls when there is one
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONTROLLERS = ROOT / "mcm_tasks" / "controllers"

#: the process's getters a phase must not call: it reads them from its scope
GETTERS = frozenset(
    {"get_settings", "now_utc", "precise_now_utc", "get_clusters", "control_api", "target_api"}
)

#: the wall clock read directly (``datetime.now(UTC)``): a phase reads ``scope.precise_clock()``
CLOCK_READS = frozenset({"now", "utcnow", "today"})

#: (module path under mcm_tasks/controllers/, qualified function name): where a scope is built, the
#: one place each of its parts is read from the process
SCOPE_BUILDERS: frozenset[tuple[str, str]] = frozenset(
    {
        # the process's clients, read by the scope's properties
        ("common/context_io.py", "control_api"),
        ("common/context_io.py", "target_api"),
        # every pass scope: settings and clock at the start of the pass, the clients when first used
        ("common/scope.py", "PassScope.begin"),
        ("common/scope.py", "PassScope.api"),
        ("common/scope.py", "PassScope.target"),
        ("common/scope.py", "PassScope"),
        # the read of the object a pass's scope is built around
        ("machine/reconcile.py", "_read_machine"),
        ("machine/scope.py", "MachineScope.read"),
        ("machine/classes.py", "_read"),
        ("machine/secrets.py", "_read"),
        ("machineset/reconcile.py", "_read"),
        # the same read, planned for the queue contract's BEGIN and handed to the pass
        ("common/readahead_io.py", "MirrorReadAhead.plan"),
        ("common/readahead_io.py", "MirrorReadAhead.seed"),
        ("machinedeployment/scope.py", "Context.read"),
        ("machinedeployment/reconcile.py", "reconcile_machine_deployment"),
        # before the scope is built: whether a costly set's next pass may start yet
        ("machineset/spacing_io.py", "spaced.run"),
        # outside any pass: the queue's report on a failing key
        ("recovery_io.py", "reporter.report"),
    }
)


#: the modules that wire a reconciler: the pass itself, its registration, its wake-up rules, its scope
ENTRY_MODULES: frozenset[str] = frozenset(
    {"reconcile", "register", "register_termination", "watches", "scope", "reconcilers"}
)

#: the pass modules of the machine controller's other queues (module path under controllers/)
PASS_MODULES: frozenset[str] = frozenset(
    {"machine/classes.py", "machine/secrets.py", "machine/nodes.py", "machine/deletion.py"}
)

#: the edges that act: a module importing one (or a name from one) acts
ACTING_MODULES: tuple[str, ...] = (
    "mcm_tasks.kube.ops",
    "mcm_tasks.kube.clients",
    "mcm_tasks.kube.rest",
    "mcm_tasks.cache.get_listers",
    "mcm_tasks.redisdb",
    "redis",
)


def _acting_import(module: str, name: str | None) -> bool:
    """Whether importing ``name`` from ``module`` (or ``module`` itself when ``name`` is None) brings
    something that acts into a module that decides."""
    full = module if name is None else f"{module}.{name}"
    if any(full == edge or full.startswith(edge + ".") for edge in ACTING_MODULES):
        return True
    if name is not None and name.endswith("_io"):
        return True
    return module.rsplit(".", 1)[-1].endswith("_io") and name is not None and not name[:1].isupper()


def naming_violations(root: Path = CONTROLLERS) -> list[str]:
    """``module:line: imports what`` for each module that decides (no ``_io`` suffix, not an entry or
    pass module) yet imports an edge that acts, or an ``_io`` module's function."""
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        module = path.relative_to(root).as_posix()
        if path.stem.endswith("_io") or path.stem in ENTRY_MODULES or module in PASS_MODULES:
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                pairs = [(alias.name, None) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                pairs = [(node.module, alias.name) for alias in node.names]
            else:
                continue
            for mod, name in pairs:
                if _acting_import(mod, name):
                    what = mod if name is None else f"{mod}.{name}"
                    found.append(f"{module}:{node.lineno}: decides but imports {what} (name it *_io.py)")
    return found


def _is_datetime(node: ast.AST) -> bool:
    """``datetime`` or ``<module>.datetime``: the class whose ``now()`` reads the wall clock."""
    return (isinstance(node, ast.Name) and node.id == "datetime") or (
        isinstance(node, ast.Attribute) and node.attr == "datetime"
    )


def _reads(node: ast.AST, scope: list[str]) -> Iterator[tuple[str, int, str]]:
    """(qualified name of the enclosing function or class, line, getter) of each read of a getter:
    a call by bare name (``get_settings()``) or attribute (``context.control_api()``), or the getter
    handed on uncalled (``field(default_factory=now_utc)``)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield from _reads(child, [*scope, child.name])
            continue
        if isinstance(child, ast.Call):
            where = ".".join(scope) or "<module>"
            func = child.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name in GETTERS:
                yield where, child.lineno, name
            elif isinstance(func, ast.Attribute) and func.attr in CLOCK_READS and _is_datetime(func.value):
                yield where, child.lineno, f"datetime.{func.attr}"
            for arg in [*child.args, *(k.value for k in child.keywords)]:
                if isinstance(arg, ast.Name | ast.Attribute):
                    handed = arg.id if isinstance(arg, ast.Name) else arg.attr
                    if handed in GETTERS:
                        yield where, arg.lineno, handed
        yield from _reads(child, scope)


def violations(root: Path = CONTROLLERS, builders: frozenset[tuple[str, str]] = SCOPE_BUILDERS) -> list[str]:
    """``module:line: getter in function`` for each read of a getter outside the ``builders``,
    ``module`` relative to ``root``; and each builder that reads none (renamed or gone: the list
    must not outlive the code it names)."""
    found: list[str] = []
    used: set[tuple[str, str]] = set()
    for path in sorted(root.rglob("*.py")):
        module = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(), filename=str(path))
        for qualname, line, name in sorted(_reads(tree, []), key=lambda r: r[1]):
            if (module, qualname) in builders:
                used.add((module, qualname))
            else:
                found.append(f"{module}:{line}: {name} in {qualname}")
    found += [
        f"{module}: scope builder {qualname} reads nothing" for module, qualname in sorted(builders - used)
    ]
    return found


def main() -> int:
    found = violations() + naming_violations()
    for line in found:
        print(line)
    if found:
        print(
            f"{len(found)} finding(s) under mcm_tasks/controllers/: take the process's globals from the "
            "pass scope (tools/check_pass_scope.py lists the scope builders); x.py decides, x_io.py acts",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
