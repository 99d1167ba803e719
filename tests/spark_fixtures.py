"""One SparkSession for the whole pytest session, shared by every test that replays on Spark.

``conftest`` imports :func:`spark_session`; it is created on first use (Spark is slow to
start) and stopped at the end. Tests run Spark with two cores, small shuffles and the UI off.
"""

from __future__ import annotations

import pytest

__all__ = ["spark_session", "SPARK_TEST_CONF"]

SPARK_TEST_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.driver.memory": "4g",
}


@pytest.fixture(scope="session")
def spark_session():
    """The process's SparkSession (``local[2]``), made once and stopped after the tests."""
    from restream_kit.engines.spark import get_session, stop_session

    session = get_session("local[2]", SPARK_TEST_CONF)
    yield session
    stop_session()
