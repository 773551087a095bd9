"""The README links only files that exist in a clone (no ../shared/…, no stale paths)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_readme_links_resolve() -> None:
    text = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    local = [t.split("#")[0] for t in targets if not re.match(r"^[a-z]+:", t) and not t.startswith("#")]
    assert local, "the README links files of the repo"
    missing = [t for t in local if not (ROOT / t).resolve().is_relative_to(ROOT) or not (ROOT / t).exists()]
    assert not missing, f"README links to files a clone lacks: {missing}"
