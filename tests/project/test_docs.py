"""The README and docs/ link only to files of the repository, and every such file exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_links_stay_in_the_repository(page):
    for target in LINK.findall(page.read_text()):
        path = target.split("#", 1)[0]
        assert "://" not in target and not target.startswith("/"), f"{page.name}: {target}"
        if not path:
            continue  # a link within the page
        resolved = (page.parent / path).resolve()
        assert resolved.is_relative_to(ROOT), f"{page.name}: {target} leaves the repository"
        assert resolved.exists(), f"{page.name}: {target} does not exist"


def test_the_readme_links_the_semantics():
    assert "](docs/semantics.md)" in (ROOT / "README.md").read_text()
