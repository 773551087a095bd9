"""Rewrite the three per-kind constant families to the one vocabulary of ``mcm_tasks.kinds``.

Before, each kind had three module constants: ``cache.layout.MACHINES`` (the mirror key),
``kube.resources.MACHINES`` (the API resource, re-exported by ``kube.ops``) and
``informers.resources.MACHINES`` (the informer's watch spec). After, it has one name, ``kinds.MACHINE``:

- ``layout.MACHINES``                       → ``kinds.MACHINE.mirror``
- ``kres.MACHINES`` / ``ops.MACHINES`` / ``MACHINES`` imported from ``kube.resources``
                                            → ``kinds.MACHINE.resource``
- ``MCM_RESOURCES`` / ``resource_for_kind`` → ``kinds.MCM_RESOURCES`` / ``kinds.resource_for_kind``
- ``MACHINES`` imported from ``informers.resources`` → ``WATCHES[kinds.MACHINE]``

Usage: ``python tools/codemod_kinds.py [FILE_OR_DIR ...]`` (default: the repository), then
``ruff check --fix --select I001,F401`` and ``ruff format`` on the files it names. It is kept for
branches that predate the rename: run it on them after a rebase. Delete it once none is left.
"""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from pathlib import Path

PLURAL_TO_KIND = {
    "MACHINES": "MACHINE",
    "MACHINE_SETS": "MACHINE_SET",
    "MACHINE_DEPLOYMENTS": "MACHINE_DEPLOYMENT",
    "MACHINE_CLASSES": "MACHINE_CLASS",
    "SECRETS": "SECRET",
    "NODES": "NODE",
    "PODS": "POD",
    "POD_DISRUPTION_BUDGETS": "POD_DISRUPTION_BUDGET",
    "PERSISTENT_VOLUMES": "PERSISTENT_VOLUME",
    "PERSISTENT_VOLUME_CLAIMS": "PERSISTENT_VOLUME_CLAIM",
    "VOLUME_ATTACHMENTS": "VOLUME_ATTACHMENT",
}
#: resources that are not mirrored
RESOURCE_ONLY = {"NAMESPACES": "NAMESPACE", "EVENTS": "EVENT", "LEASES": "LEASE"}
MOVED_TO_KINDS = ("MCM_RESOURCES", "resource_for_kind")

RESOURCE_MODULES = ("mcm_tasks.kube.resources", "mcm_tasks.kube.ops")
LAYOUT_MODULE = "mcm_tasks.cache.layout"
WATCH_MODULE = "informers.resources"
#: the definition sites, edited by hand
SKIP = {"mcm_tasks/kinds.py", "mcm_tasks/kube/resources.py", "tools/codemod_kinds.py"}


def resource_text(name: str) -> str | None:
    if name in PLURAL_TO_KIND:
        return f"kinds.{PLURAL_TO_KIND[name]}.resource"
    if name in RESOURCE_ONLY:
        return f"kinds.{RESOURCE_ONLY[name]}.resource"
    if name in MOVED_TO_KINDS:
        return f"kinds.{name}"
    return None


def mirror_text(name: str) -> str | None:
    return f"kinds.{PLURAL_TO_KIND[name]}.mirror" if name in PLURAL_TO_KIND else None


def watch_text(name: str) -> str | None:
    return f"WATCHES[kinds.{PLURAL_TO_KIND[name]}]" if name in PLURAL_TO_KIND else None


ATTR_IN_TEXT = re.compile(r"\b(layout|kres)\.([A-Z_]+)\b")


def _in_text(match: re.Match[str]) -> str:
    alias, name = match.groups()
    new = mirror_text(name) if alias == "layout" else resource_text(name)
    return new or match.group(0)


class Rewrite:
    def __init__(self, path: Path, source: str) -> None:
        self.path = path
        self.source = source
        self.tree = ast.parse(source)
        #: local module alias → function of a constant name → replacement
        self.module_alias: dict[str, object] = {}
        #: local bare name → replacement
        self.bare: dict[str, str] = {}
        #: ImportFrom nodes to rewrite → names kept
        self.imports: dict[ast.ImportFrom, list[ast.alias]] = {}
        self.kinds_bound = False
        self.kinds_shadowed = False
        self.watch_import: ast.ImportFrom | None = None
        self._scan()

    def _scan(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                mod = node.module or ""
                for a in node.names:
                    local = a.asname or a.name
                    full = f"{mod}.{a.name}"
                    if full == LAYOUT_MODULE:
                        self.module_alias[local] = mirror_text
                    elif full in RESOURCE_MODULES:
                        self.module_alias[local] = resource_text
                    elif full == "mcm_tasks.kinds" and local == "kinds":
                        self.kinds_bound = True
                fn = {LAYOUT_MODULE: mirror_text, WATCH_MODULE: watch_text}.get(mod)
                if mod in RESOURCE_MODULES:
                    fn = resource_text
                if fn is None:
                    continue
                kept = []
                for a in node.names:
                    new = fn(a.name)  # type: ignore[operator]
                    if new is None:
                        kept.append(a)
                    else:
                        self.bare[a.asname or a.name] = new
                if len(kept) != len(node.names):
                    self.imports[node] = kept
                if mod == WATCH_MODULE:
                    self.watch_import = node
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name == LAYOUT_MODULE and a.asname:
                        self.module_alias[a.asname] = mirror_text
                    elif a.name in RESOURCE_MODULES and a.asname:
                        self.module_alias[a.asname] = resource_text
                    elif a.name == "mcm_tasks.kinds" and a.asname == "kinds":
                        self.kinds_bound = True
            elif (isinstance(node, ast.Name) and node.id == "kinds" and isinstance(node.ctx, ast.Store)) or (
                isinstance(node, ast.arg) and node.arg == "kinds"
            ):
                self.kinds_shadowed = True

    def run(self) -> str | None:
        lines = self.source.splitlines(keepends=True)
        import_rows = set()
        for node in self.imports:
            import_rows.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
        if self.watch_import is not None:
            w = self.watch_import
            import_rows.update(range(w.lineno, (w.end_lineno or w.lineno) + 1))
        edits: list[tuple[tuple[int, int], tuple[int, int], str]] = []
        toks = list(tokenize.generate_tokens(io.StringIO(self.source).readline))
        needs_watches = False
        for i, tok in enumerate(toks):
            if tok.start[0] in import_rows:
                continue
            if tok.type in (tokenize.STRING, tokenize.COMMENT):
                new = ATTR_IN_TEXT.sub(_in_text, tok.string)
                if new != tok.string:
                    edits.append((tok.start, tok.end, new))
                continue
            if tok.type != tokenize.NAME:
                continue
            prev = toks[i - 1] if i else None
            after_dot = prev is not None and prev.type == tokenize.OP and prev.string == "."
            if (
                not after_dot
                and tok.string in self.module_alias
                and i + 2 < len(toks)
                and toks[i + 1].string == "."
                and toks[i + 2].type == tokenize.NAME
            ):
                new = self.module_alias[tok.string](toks[i + 2].string)  # type: ignore[operator]
                if new is not None:
                    edits.append((tok.start, toks[i + 2].end, new))
                continue
            if not after_dot and tok.string in self.bare:
                edits.append((tok.start, tok.end, self.bare[tok.string]))
                needs_watches |= self.bare[tok.string].startswith("WATCHES[")
        if not edits and not self.imports:
            return None
        # token edits, from the end so positions stay valid
        for start, end, text in sorted(edits, reverse=True):
            (r0, c0), (r1, c1) = start, end
            head, tail = lines[r0 - 1][:c0], lines[r1 - 1][c1:]
            lines[r0 - 1 : r1] = [head + text + tail]
        new_kinds_import = not self.kinds_bound
        if self.kinds_shadowed:
            raise SystemExit(f"{self.path}: binds a local name `kinds`; rewrite it by hand")
        kinds_line = "from mcm_tasks import kinds"
        # import rewrites (line-based, from the bottom)
        rewrites: dict[ast.ImportFrom, list[ast.alias]] = dict(self.imports)
        if needs_watches and self.watch_import is not None:
            kept = rewrites.get(self.watch_import, list(self.watch_import.names))
            rewrites[self.watch_import] = [*kept, ast.alias("WATCHES")]
        placed = False
        for node in sorted(rewrites, key=lambda n: n.lineno, reverse=True):
            first, last = node.lineno, node.end_lineno or node.lineno
            indent = " " * node.col_offset
            comment = ""
            m = re.search(r"#.*$", lines[last - 1].rstrip("\n"))
            if m and ")" not in m.group(0):
                comment = "  " + m.group(0)
            kept = rewrites[node]
            out = []
            if kept:
                names = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in kept)
                out.append(f"{indent}from {node.module} import {names}{comment}\n")
            if new_kinds_import and not placed and node.col_offset == 0:
                out.append(f"{kinds_line}{comment}\n")
                placed = True
            lines[first - 1 : last] = out
        text = "".join(lines)
        if new_kinds_import and not placed and "kinds." in text:
            body = ast.parse(text).body
            tops = [n for n in body if isinstance(n, (ast.Import, ast.ImportFrom))]
            anchor = next((n for n in tops if (getattr(n, "module", "") or "").startswith("mcm_tasks")), None)
            anchor = anchor or (tops[-1] if tops else None)
            out_lines = text.splitlines(keepends=True)
            row = anchor.lineno - 1 if anchor is not None else 0
            out_lines.insert(row, kinds_line + "\n")
            text = "".join(out_lines)
        return text if text != self.source else None


def main(argv: list[str]) -> int:
    root = Path(__file__).resolve().parent.parent
    targets = [Path(a) for a in argv] or [root]
    files: list[Path] = []
    for t in targets:
        files.extend(sorted(t.rglob("*.py")) if t.is_dir() else [t])
    changed = []
    for f in files:
        rel = f.resolve().relative_to(root).as_posix()
        if rel in SKIP or rel.startswith((".venv/", "build/")):
            continue
        new = Rewrite(f, f.read_text()).run()
        if new is not None:
            f.write_text(new)
            changed.append(rel)
    print("\n".join(changed))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
