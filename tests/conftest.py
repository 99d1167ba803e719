"""Shared fixtures. ``engine`` parametrizes a test over every engine, as ibis does over backends.

A test that takes ``replay_on`` runs on each engine in ``ENGINE_PARAMS``; on engines other
than serial it also replays serially and requires identical results, since the serial engine
is the oracle. Known gaps are marked per engine with ``pytest.mark.notyet(engines, reason)``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from engine_matrix import ENGINE_PARAMS, assert_same_result  # noqa: E402
from spark_fixtures import spark_session  # noqa: E402,F401 - one SparkSession per test session

import restream_kit as rk  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "notyet(engines, reason): a known gap on some engines")


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    """Caches and catalogs go to a fresh directory per test."""
    monkeypatch.setenv("RESTREAM_HOME", str(tmp_path / ".restream"))
    yield


@pytest.fixture(params=ENGINE_PARAMS)
def engine(request):
    name = request.param
    marker = request.node.get_closest_marker("notyet")
    if marker and name in marker.args[0]:
        pytest.xfail(f"not yet on {name}: {marker.args[1]}")
    if name == "spark":
        request.getfixturevalue("spark_session")
    return name


@pytest.fixture
def replay_on(engine, request):
    """``replay_on(program, log, **options)`` on the parametrized engine, checked against serial."""

    def run(program, log, **options):
        program = program if isinstance(program, rk.Program) else rk.Program.load(program)
        log = log if isinstance(log, rk.Log) else rk.Log(log)
        result = rk.replay(program, log, engine=engine, **options)
        if engine != "serial":
            assert_same_result(result, rk.replay(program, log, engine="serial"))
        return result

    run.engine = engine
    return run


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
