"""The README is a short front door (at most 200 lines) whose links all resolve: files of a clone
(no ../shared/…, no stale paths), and headings that exist where a link names one."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def _anchors(page: Path) -> set[str]:
    """The ids MkDocs' toc gives the page's headings (lower case, punctuation dropped, - for spaces)."""
    ids = set()
    for line in page.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            ids.add(re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", title)).strip("-"))
    return ids


def test_readme_is_at_most_200_lines() -> None:
    assert len(README.read_text().splitlines()) <= 200


def test_readme_links_resolve() -> None:
    text = README.read_text()
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    local = [t for t in targets if not re.match(r"^[a-z]+:", t) and not t.startswith("#")]
    assert local, "the README links files of the repo"
    missing = []
    for target in local:
        path, _, anchor = target.partition("#")
        file = (ROOT / path).resolve()
        broken = not file.is_relative_to(ROOT) or not file.exists()
        if broken or (anchor and anchor not in _anchors(file)):
            missing.append(target)
    assert not missing, f"README links to what a clone lacks: {missing}"
