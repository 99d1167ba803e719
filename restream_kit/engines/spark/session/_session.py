"""SparkSessions for replays: one classic session per process, one Spark Connect session per URL.

``get_session()`` returns the session a replay uses. Where it runs comes from
``restream_kit.config.resolve`` (arguments, then ``RESTREAM_MASTER``/``RESTREAM_SPARK_CONF``,
then the profile file; a Connect token only from ``RESTREAM_CONNECT_TOKEN``):

- ``local[N]`` / ``local[*]`` (the default): an embedded session;
- ``spark://host:port``: a standalone cluster, through classic PySpark. Before the session is
  made the master's port must answer; afterwards the cluster must give the application an
  executor within the executor wait (30 s by default), or the session is stopped and a
  :class:`RestreamError` says so (a cluster without free cores);
- ``sc://host:port``: a Spark Connect server. Its session lives beside the classic one (it is
  made with the Connect builder, which leaves this process's classic PySpark alone), its
  gRPC retries are bounded so that a dead server fails in about 30 s rather than 10 minutes.

For remote sessions the workers' Python version is checked against this one (major.minor).
:func:`watch` guards a replay on a standalone cluster: when the application has had no
executor for the executor wait (workers died), it cancels the replay's jobs and records why.

Defaults for a new session: the web UI off (``RESTREAM_SPARK_UI=1`` turns it on), as many
shuffle partitions as cores, adaptive query execution off (partition counts are chosen by the
engine), Arrow on, quiet logs, the workers' Python set to the driver's, and on a local master
a bounded share of the heap for Spark's sorts and caches (``_memory``: the heap's peak then
does not grow with the log). Settings given
override any of them; a session passed in is used as it is and becomes the process's session.
Asking for another classic master while a classic session runs is an error (stop it first).
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ....io import config
from ....io.log import default_home, private_dir
from ....model.errors import RestreamError
from ..java import ensure_java_home
from ._cluster import (
    Watchdog,
    await_executors,
    check_python,
    endpoints,
    executor_waits,
    is_connect,
    master_of,
    mismatch_message,
    reachable,
    watch,
)
from ._jvm_archive import java_options
from ._memory import bounded_pool

__all__ = [
    "get_session",
    "default_conf",
    "stop_session",
    "session_cores",
    "is_connect",
    "planned_cores",
    "check_python",
    "executor_python",
    "mismatch_message",
    "watch",
    "Watchdog",
    "current",
    "master_of",
    "ui_url",
    "spark_log_path",
]

_LOCK = threading.Lock()
_SESSION: Any = None
_REMOTE: dict[str, Any] = {}


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


def planned_cores(master: str | None) -> int:
    """The cores a replay on ``master`` will have, judged before it starts: the running
    session's when it is on that master, else what the URL says (a cluster's are known only
    once its executors register: this machine's are the guess)."""
    session = current()
    if session is not None and (master is None or master_of(session) == master):
        return session_cores(session)
    return _cores(master or "local[*]")


def default_conf(master: str) -> dict[str, str]:
    """The settings a new session gets unless the caller overrides them."""
    cores = _cores(master)
    conf = {
        "spark.ui.enabled": "true" if os.environ.get("RESTREAM_SPARK_UI") == "1" else "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(cores),
        "spark.default.parallelism": str(cores),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "20000",
        "spark.sql.adaptive.enabled": "false",
        "spark.sql.caseSensitive": "true",
        "spark.python.worker.reuse": "true",
        # Tasks talk to their Python workers over a Unix socket, not loopback TCP: on some
        # kernels a worker blocked writing its output while its input queue is full stalls
        # the TCP connection for minutes (retransmits backing off to 120 s; seen on a 10M
        # event replay); a Unix socket has no windows to lose.
        "spark.python.unix.domain.socket.enabled": "true",
        # A cancelled task whose Python worker is busy in a handler is killed after this
        # (2 s by default): a cancelled replay leaves the machine idle sooner.
        "spark.python.task.killTimeout": "500ms",
        # A task has one core: polars in a Python worker should not start a thread per core.
        "spark.executorEnv.POLARS_MAX_THREADS": "1",
        "spark.driver.memory": os.environ.get("RESTREAM_SPARK_DRIVER_MEMORY", "4g"),
        "spark.sql.session.timeZone": "UTC",
        # The driver maps its classes from a class-data-sharing archive when there is one.
        "spark.driver.extraJavaOptions": " ".join(["-Dlog4j2.level=ERROR", *java_options()]),
        # A kernel replays many times in one session: keep the status store's history short,
        # or its job, stage and SQL records fill the driver's heap.
        "spark.ui.retainedJobs": "100",
        "spark.ui.retainedStages": "100",
        "spark.ui.retainedTasks": "10000",
        "spark.sql.ui.retainedExecutions": "50",
        "spark.ui.dagGraph.retainedRootRDDs": "100",
        "spark.worker.ui.retainedExecutors": "100",
    }
    if master.startswith("spark://"):
        # The cluster's cores are known once executors register (see _fit_partitions).
        del conf["spark.default.parallelism"], conf["spark.sql.shuffle.partitions"]
        # A replay runs many small jobs over cached partitions: waiting up to 3 s for a task's
        # preferred executor costs more than reading its blocks from another one.
        conf["spark.locality.wait"] = "0s"
        if {host for host, _ in endpoints(master)} <= {"127.0.0.1", "localhost"}:
            # Executors of a one-machine cluster reach the driver on loopback.
            conf["spark.driver.host"] = "127.0.0.1"
    return bounded_pool(master, conf, {})


def session_cores(session: Any) -> int:
    """How many tasks the session runs at once (its default parallelism)."""
    try:
        return max(1, int(session.sparkContext.defaultParallelism))
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext
        conf = session.conf.get("spark.sql.shuffle.partitions", None)
        return max(1, int(conf)) if conf else (os.cpu_count() or 1)


def get_session(
    master: str | None = None,
    conf: Mapping[str, Any] | None = None,
    session: Any = None,
    executor_wait: float | None = None,
) -> Any:
    """The SparkSession to replay on: ``session`` if given, else the one for the master that
    ``restream_kit.config.resolve`` finds (made on first use; see the module docstring)."""
    global _SESSION
    with _LOCK:
        if session is not None:
            if not is_connect(session):
                _SESSION = session
            return session
        target = config.resolve(master, conf, executor_wait)
        if target.master and target.master.startswith("sc://"):
            return _connect_session(target)
        if _SESSION is not None and not _stopped(_SESSION):
            current = master_of(_SESSION)
            if target.master and current and target.master != current:
                raise RestreamError(
                    f"this process already runs a SparkSession on {current}; stop it first "
                    "(restream_kit.engines.spark.stop_session()) to replay on " + target.master
                )
            return _SESSION
        _SESSION = _classic_session(target)
        return _SESSION


def spark_log_path() -> Path:
    """Where the JVM's own output goes (log4j, Hadoop, the JVM's warnings, Python workers'
    stderr): ``spark.log`` in ``$RESTREAM_HOME`` or ``./.restream``, never a cell or terminal."""
    return default_home() / "spark.log"


def _launch_jvm(settings: Mapping[str, str]) -> None:
    """Start the JVM (unless this process has one) with its stdout and stderr on
    :func:`spark_log_path`, and make it the gateway PySpark's session uses.

    Only the JVM's own descriptors point at the log (and so those of the Python workers it
    starts, whose output it copies to its stderr): this process's stay where they are, so
    that a command line's messages and progress, written by another thread while the JVM
    starts, reach the terminal.
    """
    from pyspark import SparkConf
    from pyspark.core.context import SparkContext
    from pyspark.java_gateway import launch_gateway

    with SparkContext._lock:
        if SparkContext._gateway is not None:
            return
    conf = SparkConf()
    for key, value in settings.items():
        conf.set(key, value)
    path = spark_log_path()
    private_dir(path.parent)
    with open(path, "ab") as log:
        gateway = launch_gateway(conf, popen_kwargs={"stdout": log, "stderr": log})
    SparkContext._ensure_initialized(gateway=gateway)


def _classic_session(target: config.SparkTarget) -> Any:
    master = target.master or "local[*]"
    if not (master.startswith("local") or master.startswith("spark://")):
        raise RestreamError(
            f"master {master!r}: expected local[N], spark://host:port or sc://host:port"
        )
    if master.startswith("spark://"):
        reachable(master, "Spark master")
    ensure_java_home()
    if "spark.driver.host" in default_conf(master) and "SPARK_LOCAL_IP" not in os.environ:
        os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # a one-machine cluster: bind to loopback
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    settings = default_conf(master)
    settings.update(target.conf)
    # The caller's driver memory sets the fraction, unless the caller sets that too.
    settings = bounded_pool(master, settings, target.conf)
    builder = SparkSession.builder.appName("restream").master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    # PySpark takes the executors' Python from PYSPARK_PYTHON when the context starts.
    python = executor_python(master, settings)
    before = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = python
    try:
        _launch_jvm({"spark.master": master, "spark.app.name": "restream", **settings})
        session = builder.getOrCreate()
    finally:
        if before is None:
            del os.environ["PYSPARK_PYTHON"]
        else:
            os.environ["PYSPARK_PYTHON"] = before
    session.sparkContext.setLogLevel("ERROR")
    executor_waits[id(session)] = target.executor_wait
    if master.startswith("spark://"):
        try:
            await_executors(session, master, target.executor_wait)
            if "spark.sql.shuffle.partitions" not in target.conf:
                cores = session.sparkContext.defaultParallelism
                session.conf.set("spark.sql.shuffle.partitions", str(cores))
            with watch(session, "restream-python-check") as dog:
                try:
                    check_python(session)
                except Exception:
                    if dog.reason:
                        raise RestreamError(dog.reason) from None
                    raise
        except BaseException:
            session.stop()
            raise
    elif python != sys.executable:
        check_python(session)
    return session


def executor_python(master: str, settings: dict[str, str]) -> str:
    """The Python the executors start: ``spark.pyspark.python`` when set, else
    ``PYSPARK_PYTHON``, else this interpreter on a local master and, on a cluster, ``python3``
    as the workers' PATH finds it (Spark's own default): a cluster's workers need not see
    this machine's files, so the kernel's path means nothing there."""
    chosen = settings.get("spark.pyspark.python") or os.environ.get("PYSPARK_PYTHON")
    if chosen:
        return chosen
    return sys.executable if master.startswith("local") else "python3"


def _connect_session(target: config.SparkTarget) -> Any:
    url = target.master
    assert url is not None
    session = _REMOTE.get(url)
    if session is not None and not _connect_closed(session):
        return session
    reachable(url, "Spark Connect server")
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    defaults = {k: v for k, v in default_conf(url).items() if k.startswith("spark.sql.")}
    # Not the generic builder: it would switch this whole process to Connect mode.
    session = ConnectSession.builder.remote(url).create()
    _bound_retries(session)
    shown = config.redact(url)
    try:
        for key, value in defaults.items():
            if key not in target.conf:
                try:
                    session.conf.set(key, value)
                except Exception:  # noqa: BLE001 - a static setting: the server's stands
                    pass
        for key, value in target.conf.items():
            try:
                session.conf.set(key, value)
            except Exception as exc:  # noqa: BLE001
                if "CANNOT_MODIFY" not in str(exc):
                    raise RestreamError(
                        f"Spark Connect server {shown}: cannot set {key}: {_first_line(exc)}"
                    ) from None
                # Cluster settings (cores, memory) are the server's: a profile or
                # RESTREAM_SPARK_CONF written for classic sessions still works here.
                warnings.warn(
                    f"Spark Connect server {shown}: {key} is set by the server, not by a "
                    "client session; ignored",
                    stacklevel=2,
                )
        check_python(session)
    except RestreamError:
        session.stop()
        raise
    except Exception as exc:  # noqa: BLE001 - e.g. a bad token: one line, token hidden
        session.stop()
        raise RestreamError(
            f"Spark Connect server {shown}: {type(exc).__name__}: {_first_line(exc)}"
        ) from None
    executor_waits[id(session)] = target.executor_wait
    _REMOTE[url] = session
    return session


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return config.redact(text.splitlines()[0] if text else type(exc).__name__)


def _bound_retries(session: Any) -> None:
    """Give up on an unreachable Connect server after ~30 s of retries, not 10 minutes."""
    try:
        from pyspark.sql.connect.client.retries import DefaultPolicy

        policy = DefaultPolicy(max_retries=6, initial_backoff=100, max_backoff=10_000)
        session._client.set_retry_policies([policy])
    except Exception:  # noqa: BLE001 - another PySpark: its defaults still end, later
        pass


def _connect_closed(session: Any) -> bool:
    try:
        return bool(session.is_stopped)
    except Exception:  # noqa: BLE001
        return False


def current() -> Any:
    """The process's classic session when one is running, else None."""
    with _LOCK:
        return _SESSION if _SESSION is not None and not _stopped(_SESSION) else None


def ui_url() -> str | None:
    """The web UI of the process's classic session (``RESTREAM_SPARK_UI=1``), else None."""
    session = current()
    try:
        return None if session is None else session.sparkContext.uiWebUrl
    except Exception:  # noqa: BLE001 - no SparkContext (Spark Connect): no UI of ours
        return None


def _stopped(session: Any) -> bool:
    try:
        return session.sparkContext._jsc is None
    except Exception:  # noqa: BLE001 - Spark Connect sessions have no SparkContext
        return False


def _base(url: str) -> str:
    """A Connect URL without its parameters (nor its token)."""
    return url.split(";")[0].rstrip("/")


def stop_session(master: str | None = None) -> None:
    """Stop the process's sessions (or only the one on ``master``); the next replay makes a
    new one."""
    global _SESSION
    with _LOCK:
        for url in list(_REMOTE):
            if master is None or _base(url) == _base(master):
                try:
                    _REMOTE.pop(url).stop()
                except Exception:  # noqa: BLE001 - the server may be gone already
                    pass
        if _SESSION is not None and (master is None or master_of(_SESSION) == master):
            _SESSION.stop()
            _SESSION = None
