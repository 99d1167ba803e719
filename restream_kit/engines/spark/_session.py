"""One SparkSession per process, created on first use with defaults that suit replays.

``get_session()`` returns the session every Spark replay of this process shares. The
defaults: master ``local[*]`` (or ``$RESTREAM_SPARK_MASTER``), the web UI off
(``RESTREAM_SPARK_UI=1`` turns it on), as many shuffle partitions as cores, adaptive query
execution off (partition counts are chosen by the engine), Arrow on, quiet logs, and the
workers' Python set to the driver's. A ``conf`` mapping overrides any of them when a session is made; a session passed in is used
as it is, and becomes the process's session. Asking for another master while a session runs
is an error (stop it first).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping
from typing import Any

from ..._java import ensure_java_home
from ...errors import RestreamError

__all__ = ["get_session", "default_conf", "stop_session", "session_cores"]

_LOCK = threading.Lock()
_SESSION: Any = None


def _cores(master: str) -> int:
    """The cores a master URL gives: N for ``local[N]``, the machine's for ``local[*]``."""
    if master.startswith("local"):
        inside = master[master.find("[") + 1 : master.find("]")] if "[" in master else "1"
        head = inside.split(",")[0].strip()
        if head == "*":
            return os.cpu_count() or 1
        try:
            return max(1, int(head))
        except ValueError:
            return os.cpu_count() or 1
    return os.cpu_count() or 1


def default_conf(master: str) -> dict[str, str]:
    """The settings a new session gets unless the caller overrides them."""
    cores = _cores(master)
    return {
        "spark.ui.enabled": "true" if os.environ.get("RESTREAM_SPARK_UI") == "1" else "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(cores),
        "spark.default.parallelism": str(cores),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "20000",
        "spark.sql.adaptive.enabled": "false",
        "spark.sql.caseSensitive": "true",
        "spark.python.worker.reuse": "true",
        "spark.driver.memory": os.environ.get("RESTREAM_SPARK_DRIVER_MEMORY", "4g"),
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.extraJavaOptions": "-Dlog4j2.level=ERROR",
        # A kernel replays many times in one session: keep the status store's history short,
        # or its job, stage and SQL records fill the driver's heap.
        "spark.ui.retainedJobs": "100",
        "spark.ui.retainedStages": "100",
        "spark.ui.retainedTasks": "10000",
        "spark.sql.ui.retainedExecutions": "50",
        "spark.ui.dagGraph.retainedRootRDDs": "100",
        "spark.worker.ui.retainedExecutors": "100",
    }


def session_cores(session: Any) -> int:
    """How many tasks the session runs at once (its default parallelism)."""
    try:
        return max(1, int(session.sparkContext.defaultParallelism))
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext
        conf = session.conf.get("spark.sql.shuffle.partitions", None)
        return max(1, int(conf)) if conf else (os.cpu_count() or 1)


def get_session(
    master: str | None = None, conf: Mapping[str, Any] | None = None, session: Any = None
) -> Any:
    """The process's SparkSession: ``session`` if given, else the one made earlier, else a new
    one for ``master`` (default ``local[*]``; ``sc://`` URLs use Spark Connect) with the
    defaults of :func:`default_conf` overridden by ``conf``."""
    global _SESSION
    with _LOCK:
        if session is not None:
            _SESSION = session
            return session
        if _SESSION is not None and not _stopped(_SESSION):
            current = _master_of(_SESSION)
            if master and current and master != current:
                raise RestreamError(
                    f"this process already runs a SparkSession on {current}; stop it first "
                    "(restream_kit.engines.spark.stop_session()) to replay on " + master
                )
            return _SESSION
        ensure_java_home()
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        from pyspark.sql import SparkSession

        master = master or os.environ.get("RESTREAM_SPARK_MASTER") or "local[*]"
        settings = default_conf(master)
        settings.update({k: str(v) for k, v in (conf or {}).items()})
        builder = SparkSession.builder.appName("restream")
        if master.startswith("sc://"):
            builder = builder.remote(master)
            settings = {k: v for k, v in settings.items() if k.startswith("spark.sql.")}
        else:
            builder = builder.master(master)
        for key, value in settings.items():
            builder = builder.config(key, value)
        _SESSION = builder.getOrCreate()
        try:
            _SESSION.sparkContext.setLogLevel("ERROR")
        except Exception:  # noqa: BLE001 - no SparkContext over Spark Connect
            pass
        return _SESSION


def _master_of(session: Any) -> str | None:
    try:
        return session.sparkContext.master
    except Exception:  # noqa: BLE001 - Spark Connect sessions have no SparkContext
        return None


def _stopped(session: Any) -> bool:
    try:
        return session.sparkContext._jsc is None
    except Exception:  # noqa: BLE001 - Spark Connect sessions have no SparkContext
        return False


def stop_session() -> None:
    """Stop the process's session, if one was made (the next replay makes a new one)."""
    global _SESSION
    with _LOCK:
        if _SESSION is not None:
            _SESSION.stop()
            _SESSION = None
