"""The container image's recipe: built from the dependency set `make install` uses, lint-clean,
non-root, no compilers in the final stage. No Docker daemon is needed: the files are read."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import tomllib
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]


def dockerfile_stages() -> list[list[str]]:
    """Instructions (continuation lines joined, comments dropped) per stage."""
    stages: list[list[str]] = []
    current: list[str] = []
    pending = ""
    for raw in (ROOT / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pending += line.removesuffix("\\").strip() + " "
        if line.endswith("\\"):
            continue
        instruction, pending = pending.strip(), ""
        if instruction.upper().startswith("FROM "):
            current = [instruction]
            stages.append(current)
        elif stages:
            current.append(instruction)
    return stages


def pip_installs(text: str) -> list[list[str]]:
    """Each `pip install …` in a shell text, as its arguments after `install`."""
    found = []
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    for match in re.finditer(r"pip install ([^&;\n]+)", text):
        found.append(shlex.split(match.group(1).replace("\\\n", " ")))
    return found


def normalised(args: list[str]) -> list[str]:
    """An install's options with the project's own target replaced: `-e '.[x]'` and `".[x]"` agree."""
    out = []
    for arg in args:
        if arg == "-e":
            continue
        out.append("<project>" if arg.startswith(".") else arg)
    return out


def test_image_installs_as_make_install_does() -> None:
    make = pip_installs((ROOT / "Makefile").read_text())
    build_stage = dockerfile_stages()[0]
    docker = pip_installs("\n".join(i for i in build_stage if i.startswith("RUN ")))
    assert make, "Makefile has no pip install"
    assert [normalised(a) for a in docker] == [normalised(a) for a in make]
    for args in docker + make:
        assert "-c" in args and args[args.index("-c") + 1] == "constraints.txt", args


def _extras(args: list[str]) -> set[str]:
    target = next(a for a in args if a.startswith("."))
    found = re.search(r"\[([^\]]*)\]", target)
    return {e for e in (found.group(1).split(",") if found else []) if e and not e.startswith("$")}


def _closure(extras: set[str]) -> set[str]:
    """Every distribution the project needs with these extras, transitively, as installed here."""
    seen: set[str] = set()
    todo: list[tuple[str, set[str]]] = [("mcm-tasks", extras)]
    while todo:
        name, wanted = todo.pop()
        dist = distribution(name)
        for spec in dist.requires or []:
            req = Requirement(spec)
            env = [{"extra": e} for e in wanted] or [{"extra": ""}]
            if req.marker is not None and not any(req.marker.evaluate(e) for e in env):
                continue
            key = canonicalize_name(req.name)
            if key in seen:
                continue
            try:
                distribution(req.name)
            except PackageNotFoundError:
                continue  # a marker-less optional of a dependency we do not use
            seen.add(key)
            todo.append((req.name, set(req.extras)))
    return seen


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = version.strip()
    return pins


def test_constraints_pin_every_dependency_at_the_installed_version() -> None:
    """Run `make lock` after changing pyproject.toml's dependencies, and this passes again."""
    make = pip_installs((ROOT / "Makefile").read_text())
    extras = set().union(*(_extras(a) for a in make if any(x.startswith(".") for x in a)))
    assert {"sandbox", "test", "dev"} <= extras
    pins = _pins()
    missing = sorted(_closure(extras) - set(pins))
    assert not missing, f"not pinned in constraints.txt (run `make lock`): {missing}"
    wrong = {
        name: (pins[name], distribution(name).version)
        for name in _closure(extras)
        if pins[name] != distribution(name).version
    }
    assert not wrong, f"constraints.txt pins differ from what `make install` installed: {wrong}"


def test_final_stage_is_slim_and_non_root() -> None:
    stages = dockerfile_stages()
    assert len(stages) >= 2, "multi-stage: build stage + runtime stage"
    final = stages[-1]
    text = "\n".join(final)
    assert "slim" in final[0] or "ARG" in final[0] or "${PYTHON_IMAGE}" in final[0]
    assert "slim" in (ROOT / "Dockerfile").read_text().split("ARG PYTHON_IMAGE=", 1)[1].split()[0]
    assert not re.search(r"build-essential|\bgcc\b|apt-get install", text), "no compilers in the final stage"
    user = [i for i in final if i.upper().startswith("USER ")]
    assert user and user[-1].split()[1].split(":")[0] not in ("0", "root")
    assert any(i.startswith("COPY --from=build") for i in final)
    for label in ("title", "version", "revision", "licenses", "created"):
        assert f"org.opencontainers.image.{label}=" in text, label


def test_build_context_holds_what_the_image_copies() -> None:
    """Every COPY source passes .dockerignore (an allow-list), and every package is copied."""
    build = dockerfile_stages()[0]
    sources = [s for i in build if i.startswith("COPY ") for s in i.split()[1:-1]]
    allowed = {
        line.lstrip("!").rstrip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    }
    assert set(sources) <= allowed
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]}
    modules = {f"{m}.py" for m in pyproject["tool"]["setuptools"]["py-modules"]}
    assert packages | modules <= set(sources)


@pytest.mark.skipif(shutil.which("hadolint") is None and not (ROOT / ".venv/bin/hadolint").exists(),
                    reason="hadolint not installed (dev extra)")  # fmt: skip
def test_hadolint_passes() -> None:
    binary = shutil.which("hadolint") or str(ROOT / ".venv/bin/hadolint")
    result = subprocess.run([binary, str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
