"""SparkSessions for the tests: local, on a real standalone cluster, and over Spark Connect.

``conftest`` imports these fixtures. ``spark_session`` is the process's classic local session
(``local[2]``), made on first use. ``test_cluster`` is a real cluster started once per test
session with ``scripts/cluster.sh`` on free, non-default ports and its own state directory (so
it never meets ``make cluster``): a standalone master with one worker and a Spark Connect
server that requires a token (given to the tests only through ``RESTREAM_CONNECT_TOKEN``).
``cluster_session`` replays on that master and ``connect_session`` over that server.

Classic PySpark has one SparkContext per process, so ``cluster_session`` stops the local
session and ``spark_session`` stops the cluster's: ``conftest`` orders the ``spark-cluster``
tests last, so that the switch happens once. A Connect session lives beside either.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = [
    "spark_session",
    "test_cluster",
    "cluster_session",
    "connect_session",
    "SPARK_TEST_CONF",
    "CLUSTER_TEST_CONF",
    "ClusterInfo",
    "free_port",
    "start_cluster",
    "stop_cluster",
]

ROOT = Path(__file__).resolve().parent.parent

SPARK_TEST_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.driver.memory": "4g",
}

#: The test process takes two of the worker's four cores, leaving two for the notebook's kernel.
CLUSTER_TEST_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.cores.max": "2",
    "spark.executor.memory": "1g",
    "spark.driver.memory": "2g",
    "spark.ui.enabled": "false",
}


def free_port() -> int:
    """A TCP port nothing listens on now (and whose next port is free too, for a worker UI)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < 65000:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
            return port


@dataclass
class ClusterInfo:
    """A cluster started by ``scripts/cluster.sh``: its URLs, state directory and environment."""

    master: str
    connect: str | None
    token: str | None
    directory: Path
    env: dict[str, str]

    def pids(self) -> dict[str, int]:
        """The daemons' pids, by name, from their pid files."""
        return {p.stem: int(p.read_text()) for p in self.directory.glob("*.pid")}


def start_cluster(
    directory: Path,
    workers: int = 1,
    cores: int = 4,
    connect: bool = True,
    token: str | None = None,
) -> ClusterInfo:
    """Start a cluster with ``scripts/cluster.sh start`` on free ports under ``directory``."""
    master_port, ui_port, connect_port = free_port(), free_port(), free_port()
    env = {
        **os.environ,
        "RESTREAM_CLUSTER_DIR": str(directory),
        "RESTREAM_MASTER_PORT": str(master_port),
        "RESTREAM_MASTER_UI_PORT": str(ui_port),
        "RESTREAM_CONNECT_PORT": str(connect_port),
        "RESTREAM_WORKERS": str(workers),
        "RESTREAM_WORKER_CORES": str(cores),
        "RESTREAM_WORKER_MEMORY": "2g",
        "RESTREAM_CONNECT": "1" if connect else "0",
        # The workers' Python is made from this one (run as another user when root).
        "PYTHON": sys.executable,
    }
    if token:
        env["SPARK_CONNECT_AUTHENTICATE_TOKEN"] = token
    done = subprocess.run(
        [str(ROOT / "scripts" / "cluster.sh"), "start"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        stop_cluster(ClusterInfo("", None, None, directory, env))
        pytest.fail(f"scripts/cluster.sh start failed: {done.stdout}{done.stderr}")
    # A token-protected server is reached as localhost: Spark Connect sends a token without
    # TLS only to localhost.
    host = "localhost" if token else "127.0.0.1"
    return ClusterInfo(
        master=f"spark://127.0.0.1:{master_port}",
        connect=f"sc://{host}:{connect_port}" if connect else None,
        token=token,
        directory=directory,
        env=env,
    )


def stop_cluster(cluster: ClusterInfo) -> subprocess.CompletedProcess:
    """``scripts/cluster.sh stop`` for ``cluster``."""
    return subprocess.run(
        [str(ROOT / "scripts" / "cluster.sh"), "stop"],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="session")
def test_cluster(tmp_path_factory):
    """A standalone master, one worker (4 cores) and a token-protected Connect server."""
    token = secrets.token_hex(16)
    cluster = start_cluster(tmp_path_factory.mktemp("cluster"), token=token)
    yield cluster
    from restream_kit.engines.spark import stop_session

    stop_session()
    stop_cluster(cluster)


def _classic(master: str, conf: dict):
    from restream_kit.engines.spark import get_session, stop_session
    from restream_kit.engines.spark.session._session import current, master_of

    running = current()
    if running is not None and master_of(running) != master:
        stop_session(master_of(running))
    return get_session(master, conf)


@pytest.fixture(scope="session")
def _sessions_stopped():
    yield
    from restream_kit.engines.spark import stop_session

    stop_session()


@pytest.fixture
def spark_session(_sessions_stopped):
    """The process's local SparkSession (``local[2]``), stopped after the tests."""
    return _classic("local[2]", SPARK_TEST_CONF)


@pytest.fixture
def cluster_session(test_cluster, _sessions_stopped):
    """The process's classic session on the test cluster's master (the local one stopped)."""
    return _classic(test_cluster.master, CLUSTER_TEST_CONF)


@pytest.fixture
def connect_session(test_cluster, _sessions_stopped, monkeypatch):
    """A Spark Connect session on the test cluster's server, its token from the environment."""
    from restream_kit.engines.spark import get_session

    monkeypatch.setenv("RESTREAM_CONNECT_TOKEN", test_cluster.token)
    return get_session(test_cluster.connect, {"spark.sql.shuffle.partitions": "2"})
