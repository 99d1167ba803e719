"""A local session's bounded unified memory (``restream_kit.engines.spark.session._memory``).

Spark's sorts fill its unified memory before they spill; with the default 4 GB heap's share
(about 2.2 GB) the JVM's peak grew with the log (docs/scale.md). A local session gets the
share a 1 GB heap has, the rest of the heap stays for what the driver collects.
"""

from __future__ import annotations

import pytest

from restream_kit.engines.spark.session._memory import (
    POOL_MB,
    bounded_pool,
    heap_mb,
    pool_fraction,
)
from restream_kit.engines.spark.session._session import default_conf


def test_sizes_read_as_spark_reads_driver_memory():
    assert heap_mb("4g") == heap_mb("4096m") == heap_mb("4096") == heap_mb("4G") == 4096
    assert heap_mb("1t") == 1024**2 and heap_mb("512k") == 0.5
    assert heap_mb("lots") is None and heap_mb("") is None


def test_the_fraction_gives_every_heap_the_pool_a_1g_heap_has():
    for memory in ("2g", "4g", "16g"):
        fraction = float(pool_fraction(memory))
        assert abs((heap_mb(memory) - 300) * fraction - POOL_MB) < 1
    assert round(POOL_MB) == 434
    # No more than Spark's default gives: left to Spark.
    assert pool_fraction("1g") is None and pool_fraction("700m") is None
    assert pool_fraction("?") is None


def test_local_sessions_get_it_clusters_and_callers_settings_do_not(monkeypatch):
    monkeypatch.delenv("RESTREAM_SPARK_DRIVER_MEMORY", raising=False)
    assert default_conf("local[2]")["spark.memory.fraction"] == pool_fraction("4g")
    assert "spark.memory.fraction" not in default_conf("spark://127.0.0.1:7077")
    monkeypatch.setenv("RESTREAM_SPARK_DRIVER_MEMORY", "1g")
    assert "spark.memory.fraction" not in default_conf("local[2]")
    monkeypatch.setenv("RESTREAM_SPARK_DRIVER_MEMORY", "8g")
    assert default_conf("local[*]")["spark.memory.fraction"] == pool_fraction("8g")
    # A caller's driver memory sets the fraction; a caller's fraction is kept as it is.
    settings = {**default_conf("local[2]"), "spark.driver.memory": "2g"}
    assert bounded_pool("local[2]", settings, {"spark.driver.memory": "2g"})[
        "spark.memory.fraction"
    ] == pool_fraction("2g")
    mine = {**settings, "spark.memory.fraction": "0.6"}
    assert bounded_pool("local[2]", mine, {"spark.memory.fraction": "0.6"}) == mine
    settings["spark.driver.memory"] = "1g"
    assert "spark.memory.fraction" not in bounded_pool("local[2]", settings, {})


@pytest.mark.spark
def test_a_local_session_runs_with_the_pool_and_the_whole_heap(spark_session):
    """What Spark's memory manager holds, not only the setting: without the fraction it
    would be about 2.2 GB of the 4 GB heap."""
    sc = spark_session.sparkContext
    assert sc.getConf().get("spark.driver.memory") == "4g"
    assert sc.getConf().get("spark.memory.fraction") == pool_fraction("4g")
    # The most a block manager may cache: the unified memory while no task runs.
    status = sc._jsc.sc().getExecutorMemoryStatus()  # executor -> (max, remaining)
    unified = status.values().head()._1() / 2**20
    assert abs(unified - POOL_MB) < 40, unified
    heap = sc._jvm.java.lang.Runtime.getRuntime().maxMemory() / 2**20
    assert heap > 3500, heap  # the driver can still collect into the rest of 4 GB
    # A sort larger than the pool spills and still sorts.
    rows = spark_session.range(0, 2_500_000, 1, 1).selectExpr("id", "repeat('x', 200) AS pad")
    top = rows.sortWithinPartitions(rows.id.desc()).select("id").take(2)
    assert [row.id for row in top] == [2_499_999, 2_499_998]
