"""The documents in the repository stay true to the code: every module and function the upstream map
names exists, the README's links point at files of this repository, the development page's folder
table covers every folder, and no docstring points at numbered sections of a document a clone does
not have."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ABBREVIATIONS = {"…/": "mcm_tasks/controllers/"}
#: folders that hold no project code or documentation of their own
NOT_DOCUMENTED = {".git", ".venv", ".ci", "build", "dist", "__pycache__"}


def _defined_names(path: Path) -> set[str]:
    """Functions, classes (with their methods as ``Class.method``) and module-level names."""
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.add(node.name)
            names.update(f"{node.name}.{n.name}" for n in node.body if isinstance(n, ast.FunctionDef))
            names.update(n.name for n in node.body if isinstance(n, ast.FunctionDef))
            names.update(
                n.target.id
                for n in node.body
                if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
            )
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def _map_references() -> list[tuple[str, str, str]]:
    """(row's upstream cell, file, name) for each ``path`` followed by the names cited after it."""
    out = []
    for line in (ROOT / "docs" / "upstream-map.md").read_text().splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) < 4 or not cells[2].startswith("`"):
            continue
        upstream, ours = cells[1], cells[2]
        current: str | None = None
        for token in re.findall(r"`([^`]+)`", ours):
            for short, full in ABBREVIATIONS.items():
                token = token.replace(short, full)
            if token.endswith(".py"):
                current = token
            elif current is not None and re.fullmatch(r"[A-Za-z_][\w.]*", token):
                out.append((upstream, current, token))
    return out


def test_the_upstream_map_names_modules_and_functions_that_exist() -> None:
    references = _map_references()
    assert len(references) > 150
    missing = []
    for upstream, file, name in references:
        path = ROOT / file
        if not path.exists():
            missing.append(f"{upstream}: {file} does not exist")
        elif name not in _defined_names(path) and not name.isupper():
            missing.append(f"{upstream}: {file} defines no {name}")
    assert not missing, "\n".join(missing)


def test_the_upstream_map_covers_the_seeds_flows() -> None:
    text = (ROOT / "docs" / "upstream-map.md").read_text()
    for name in (
        "triggerCreationFlow",
        "reconcileMachineHealth",
        "triggerDeletionFlow",
        "drainNode",
        "deleteVM",
        "getVMStatus",
        "evictPodsWithPv",
        "reconcileClusterMachineSafetyOrphanVMs",
        "reconcileClusterMachineSafetyAPIServer",
        "claimMachines",
        "manageReplicas",
        "slowStartBatch",
        "reconcileOldMachineSets",
        "reconcileNewMachineSet",
        "rolloutRecreate",
    ):
        assert f"`{name}`" in text or f"`{name}," in text or f", `{name}`" in text, name


def test_readme_links_point_at_files_of_the_repository() -> None:
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)#\s]+)[^)]*\)", readme)
    broken = [
        link for link in links if not link.startswith(("http://", "https://")) and not (ROOT / link).exists()
    ]
    assert not broken, broken
    assert "../" not in "".join(links)


def test_the_layout_table_covers_every_folder() -> None:
    readme = (ROOT / "docs" / "development.md").read_text()
    folders = sorted(
        p.name
        for p in ROOT.iterdir()
        if p.is_dir()
        and p.name not in NOT_DOCUMENTED
        and not p.name.startswith(".")
        and "egg-info" not in p.name
    )
    missing = [f for f in folders if f"`{f}/`" not in readme]
    assert not missing, f"docs/development.md's layout table misses {missing}"
    packages = [
        str(p.parent.relative_to(ROOT))
        for base in ("mcm_tasks", "informers", "providers", "mcm_sandbox")
        for p in (ROOT / base).rglob("__init__.py")
        if "__pycache__" not in str(p)
    ]
    missing = [p for p in packages if f"`{p}/`" not in readme]
    assert not missing, f"docs/development.md's layout table misses {missing}"


def test_no_docstring_cites_numbered_sections_of_an_outside_document() -> None:
    cited = [
        f"{path.relative_to(ROOT)}:{n}"
        for base in ("mcm_tasks", "informers", "providers", "mcm_sandbox")
        for path in (ROOT / base).rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "§" in line
    ]
    cited += [
        f"beat_schedule.py:{n}"
        for n, line in enumerate((ROOT / "beat_schedule.py").read_text().splitlines(), 1)
        if "§" in line
    ]
    assert not cited, cited


def test_grep_of_an_upstream_name_in_the_map_finds_our_code() -> None:
    code = "\n".join(
        p.read_text() for base in ("mcm_tasks", "informers", "providers") for p in (ROOT / base).rglob("*.py")
    )
    names = {
        name
        for line in (ROOT / "docs" / "upstream-map.md").read_text().splitlines()
        if line.startswith("| `")
        for name in re.findall(r"`([a-z]+[A-Z]\w*)`", line.split("|")[1])
    }
    assert len(names) > 100
    missing = sorted(n for n in names if not re.search(rf"\b{n}\b", code))
    assert not missing, f"no docstring cites {missing}"


#: where a docstring's ``path.py`` may be relative to, besides its own folder and its parents
DOCSTRING_PATH_BASES = (ROOT, ROOT / "mcm_tasks", ROOT / "mcm_tasks" / "controllers")
PRODUCT_AND_SANDBOX = ("mcm_tasks", "informers", "providers", "mcm_sandbox")


def _docstring_files() -> list[Path]:
    files = [p for base in PRODUCT_AND_SANDBOX for p in sorted((ROOT / base).rglob("*.py"))]
    return [*files, ROOT / "beat_schedule.py", *sorted((ROOT / "tools").glob("*.py"))]


def _path_exists(name: str, here: Path) -> bool:
    name = name.lstrip("./")
    folders = [p for p in here.parents if p == ROOT or ROOT in p.parents]
    return any((folder / name).exists() for folder in (*folders, *DOCSTRING_PATH_BASES))


def _dotted_exists(dotted: str) -> bool:
    """``mcm_tasks.queue.state.failing``: packages and a module, then a name that module mentions."""
    parts = dotted.split(".")
    path = ROOT
    for i, part in enumerate(parts):
        if (path / part).is_dir():
            path = path / part
        elif (path / f"{part}.py").exists():
            rest = parts[i + 1 :]
            return (
                not rest
                or re.search(rf"\b{re.escape(rest[0])}\b", (path / f"{part}.py").read_text()) is not None
            )
        else:
            init = path / "__init__.py"
            return init.exists() and re.search(rf"\b{re.escape(part)}\b", init.read_text()) is not None
    return True


def _named_in_package(token: str, text_after: str, init: Path, tree: ast.Module) -> bool:
    """Whether ``token`` in a package's docstring names something that exists: a module or package
    of it (or of one of its packages), a name it binds, a setting, a queue or provider name, or an
    installed library."""
    from importlib.util import find_spec

    from mcm_tasks.settings import Settings

    package = init.parent
    if (package / f"{token}.py").exists() or (package / token).is_dir():
        return True
    if any((sub / f"{token}.py").exists() for sub in package.iterdir() if sub.is_dir()):
        return True
    bound = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    bound |= _defined_names(init)
    if token in bound or token in Settings.model_fields or token.startswith("_"):
        return True
    if re.match(r"\s+(queue|provider)\b", text_after):
        return True
    return find_spec(token) is not None


def test_no_module_docstring_names_a_module_that_does_not_exist() -> None:
    """Issue 32: package docstrings named modules long gone (``claim`` in machineset/). A module
    docstring's ``x.py`` paths and ``mcm_tasks.x.y`` names must exist, and a package's docstring may
    name in ``double backquotes`` only what exists."""
    entry_point_groups = set(re.findall(r'entry-points\."([\w.]+)"', (ROOT / "pyproject.toml").read_text()))
    stale = []
    for path in _docstring_files():
        tree = ast.parse(path.read_text())
        doc = ast.get_docstring(tree) or ""
        where = str(path.relative_to(ROOT))
        for token in re.findall(r"(?<![\w/.-])([\w./-]+\.py)\b", doc):
            if not _path_exists(token, path):
                stale.append(f"{where}: {token}")
        for token in re.findall(r"\b((?:mcm_tasks|informers|providers|mcm_sandbox)(?:\.\w+)+)", doc):
            if token not in entry_point_groups and not _dotted_exists(token):
                stale.append(f"{where}: {token}")
        if path.name == "__init__.py":
            for match in re.finditer(r"``([a-z_][a-z0-9_]*)``", doc):
                if not _named_in_package(match.group(1), doc[match.end() :], path, tree):
                    stale.append(f"{where}: ``{match.group(1)}``")
    assert not stale, "docstrings name modules that do not exist:\n" + "\n".join(stale)


def test_the_differences_page_is_the_whole_list() -> None:
    """docs/differences.md is the one home of the deliberate differences: each entry names the
    upstream function it departs from, and every difference the upstream map notes is on it."""
    text = (ROOT / "docs" / "differences.md").read_text()
    entries = [line for line in text.splitlines() if line.startswith("- ")]
    assert len(entries) > 30
    unnamed = [e[:80] for e in entries if not re.match(r"- \*\*[^*]*`[A-Za-z][\w.]*", e)]
    assert not unnamed, f"entries that name no upstream function: {unnamed}"
    missing = []
    for line in (ROOT / "docs" / "upstream-map.md").read_text().splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) >= 5 and cells[1].startswith("`") and cells[3]:
            names = re.findall(r"`([A-Za-z_.]+)`", cells[1])
            if not any(f"`{name}`" in text for name in names):
                missing.append(cells[1])
    assert not missing, f"the upstream map notes differences the differences page lacks: {missing}"
