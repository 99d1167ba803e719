"""environment.yml (conda) must list exactly the dependencies of pyproject.toml.

How the two are compared:

- pyproject.toml: every requirement of ``[project.dependencies]`` and of every extra in
  ``[project.optional-dependencies]`` (spark, notebook, dev), pooled into one set.
- environment.yml: every entry of the ``pip:`` list under ``dependencies``. Entries starting
  with ``-`` are pip options, not requirements; the only one allowed is ``-e .`` (installs
  restream_kit itself, whose dependencies are the ones listed).
- Both sides are parsed as PEP 508 requirements. Names are normalised as PEP 503 does
  (case-insensitive, ``-``, ``_`` and ``.`` alike), and each name maps to its extras, version
  specifiers (compared as sets, so ``>=4.0,<5`` equals ``<5,>=4.0``) and marker. Any name on
  one side only, any difference in specifiers, extras or marker, or a name listed twice fails.
- The conda part (outside ``pip:``) may hold only ``python`` and ``pip``: python pinned with
  ``=`` to a version that ``requires-python`` allows, and nothing that pyproject.toml cannot
  express, so that conda and pip users get the same environment.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
CONDA_ONLY = {"python", "pip"}


def key(req: Requirement) -> tuple:
    return (frozenset(req.extras), req.specifier, str(req.marker) if req.marker else None)


def by_name(requirements: list[str], where: str) -> dict[str, tuple]:
    out: dict[str, tuple] = {}
    for text in requirements:
        req = Requirement(text)
        name = canonicalize_name(req.name)
        assert name not in out, f"{where}: {name} is listed twice"
        out[name] = key(req)
    return out


@pytest.fixture(scope="module")
def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


@pytest.fixture(scope="module")
def environment() -> dict:
    return yaml.safe_load((ROOT / "environment.yml").read_text())


def pip_section(environment: dict) -> list[str]:
    sections = [d["pip"] for d in environment["dependencies"] if isinstance(d, dict) and "pip" in d]
    assert len(sections) == 1, "environment.yml needs exactly one pip: list under dependencies"
    return [str(entry) for entry in sections[0]]


def conda_section(environment: dict) -> list[str]:
    return [str(d) for d in environment["dependencies"] if not isinstance(d, dict)]


def test_pip_requirements_match_pyproject(pyproject: dict, environment: dict) -> None:
    wanted_list = list(pyproject["dependencies"])
    for extra in pyproject["optional-dependencies"].values():
        wanted_list += extra
    wanted = by_name(wanted_list, "pyproject.toml")
    entries = pip_section(environment)
    options = [e for e in entries if e.startswith("-")]
    assert all(o.split() == ["-e", "."] for o in options), f"unexpected pip options: {options}"
    listed = by_name([e for e in entries if not e.startswith("-")], "environment.yml")
    missing = sorted(set(wanted) - set(listed))
    extra = sorted(set(listed) - set(wanted))
    assert not missing, f"in pyproject.toml but not environment.yml: {missing}"
    assert not extra, f"in environment.yml but not pyproject.toml: {extra}"
    differ = {
        name: (str(wanted[name][1]), str(listed[name][1]))
        for name in wanted
        if wanted[name] != listed[name]
    }
    assert not differ, f"specifiers differ (pyproject.toml, environment.yml): {differ}"


def test_conda_part_is_python_and_pip_only(pyproject: dict, environment: dict) -> None:
    conda = conda_section(environment)
    names = {entry.split("=")[0].split(">")[0].split("<")[0].strip() for entry in conda}
    assert names == CONDA_ONLY, (
        f"conda dependencies should be just python and pip, not {sorted(names)}"
    )
    python = next(entry for entry in conda if entry.startswith("python"))
    version = python.partition("=")[2].lstrip("=")
    assert version, "pin python's version in environment.yml, such as python=3.11"
    assert SpecifierSet(pyproject["requires-python"]).contains(version), (
        f"environment.yml's {python} is outside requires-python {pyproject['requires-python']}"
    )


def test_comparison_catches_drift() -> None:
    """The comparison itself: a changed bound, a renamed spelling and a new extra."""
    assert by_name(["pyspark>=4.0,<5"], "a") == by_name(["PySpark <5, >=4.0"], "b")
    assert by_name(["grpcio_status>=1.62"], "a") == by_name(["grpcio-status>=1.62"], "b")
    assert by_name(["pandas>=2.2,<3"], "a") != by_name(["pandas>=2.2"], "b")
    assert by_name(["ruff>=0.5"], "a") != by_name(["ruff[extra]>=0.5"], "b")
    with pytest.raises(AssertionError, match="twice"):
        by_name(["numpy>=1.26", "NumPy>=1.26"], "a")
