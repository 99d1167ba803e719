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


def _anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the headings of a page (lower case, punctuation dropped)."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_anchors_name_headings(page):
    for target in LINK.findall(page.read_text()):
        if "#" not in target or "://" in target:
            continue
        path, anchor = target.split("#", 1)
        linked = (page.parent / path).resolve() if path else page
        if linked.suffix == ".md":
            assert anchor in _anchors(linked), f"{page.name}: {target} names no heading"


def test_the_readme_is_short_and_links_every_page():
    """A newcomer reads the README in minutes; the rest is in docs/, each page linked."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 220
    linked = {(ROOT / t.split("#", 1)[0]).resolve() for t in LINK.findall(text)}
    missing = [p.name for p in PAGES[1:] if p.resolve() not in linked]
    assert not missing, f"README.md links no {missing}"
