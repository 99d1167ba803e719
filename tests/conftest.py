"""Shared fixtures. ``engine`` parametrizes a test over every engine, as ibis does over backends.

A test that takes ``replay_on`` runs on each engine in ``ENGINE_PARAMS``; on engines other
than serial it also replays serially and requires identical results, since the serial engine
is the oracle. The engines are the registered ones (``restream_kit.engines.engine_names()``)
and the Spark engine's cluster placements (``engine_matrix.ENGINE_PARAMS``). A known gap is
marked per engine with the exception it raises, as ibis does:
``@pytest.mark.notyet(["spark"], raises=EngineUnsupported, reason="...")`` (strict: the test
must fail with exactly that exception there, and fails once the gap closes).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from engine_matrix import (  # noqa: E402
    CLUSTER_ENGINES,
    ENGINE_PARAMS,
    assert_ran_as_planned,
    assert_same_result,
    notyet_xfail,
)
from spark_fixtures import (  # noqa: E402,F401 - SparkSessions shared by the tests
    _sessions_stopped,
    cluster_session,
    connect_session,
    spark_session,
    test_cluster,
)

import restream_kit as rk  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "notyet(engines, raises=Exception, reason=...): a known gap on some engines, failing "
        "there with exactly that exception",
    )
    config.addinivalue_line(
        "markers", "cluster: also run this engine-parametrized test on the cluster engines"
    )


def pytest_collection_modifyitems(config, items):
    """Cluster engines run tests/test_semantics.py and tests marked ``cluster`` (all with
    RESTREAM_TEST_ALL_ENGINES=1); ``spark-cluster`` tests go last but for ``spark-connect``
    ones, since switching the process's one SparkContext from local to the cluster happens
    once."""
    everything = os.environ.get("RESTREAM_TEST_ALL_ENGINES") == "1"
    kept, dropped = [], []
    for item in items:
        name = _engine_of(item)
        chosen = item.path.name == "test_semantics.py" or item.get_closest_marker("cluster")
        (dropped if name in CLUSTER_ENGINES and not (chosen or everything) else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    # Connect sessions go after the classic cluster's: launching a JVM (a fork) while gRPC
    # threads run has been seen to kill the child.
    kept.sort(key=lambda item: {"spark-cluster": 1, "spark-connect": 2}.get(_engine_of(item), 0))
    items[:] = kept


def _engine_of(item) -> str | None:
    return getattr(getattr(item, "callspec", None), "params", {}).get("engine")


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    """Caches and catalogs go to a fresh directory per test."""
    monkeypatch.setenv("RESTREAM_HOME", str(tmp_path / ".restream"))
    yield


@pytest.fixture(params=ENGINE_PARAMS)
def engine(request):
    name = request.param
    gap = notyet_xfail(request.node.get_closest_marker("notyet"), name)
    if gap is not None:
        request.node.add_marker(gap)
    if name == "spark":
        request.getfixturevalue("spark_session")
    elif name == "spark-cluster":
        request.getfixturevalue("cluster_session")
    elif name == "spark-connect":
        request.getfixturevalue("connect_session")
    return name


@pytest.fixture
def replay_on(engine, request):
    """``replay_on(program, log, **options)`` on the parametrized engine, checked against serial."""

    spark = {}
    if engine == "spark-cluster":
        spark = {"engine": "spark", "master": request.getfixturevalue("test_cluster").master}
    elif engine == "spark-connect":
        spark = {"engine": "spark", "master": request.getfixturevalue("test_cluster").connect}

    def run(program, log, **options):
        program = program if isinstance(program, rk.Program) else rk.Program.load(program)
        log = log if isinstance(log, rk.Log) else rk.Log(log)
        result = rk.replay(program, log, **{"engine": engine, **spark, **options})
        if engine != "serial":
            assert_same_result(result, rk.replay(program, log, engine="serial"))
            assert_ran_as_planned(program, result)  # checkpointed replays included
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
