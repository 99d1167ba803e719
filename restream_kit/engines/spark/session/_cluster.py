"""What a remote Spark is checked for, before and while a replay runs: the master's port
answers, the application gets an executor within the executor wait, the workers' Python is
the driver's (major.minor), and, on a standalone cluster, a watchdog that cancels a
replay's jobs when its executors are gone for good (:func:`watch`). Also what kind of
session one is (:func:`is_connect`, :func:`master_of`).

Nothing here makes a session: ``_session`` does, and calls these.
"""

from __future__ import annotations

import re
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ....io import config
from ....model.errors import RestreamError

__all__ = [
    "Watchdog",
    "await_executors",
    "endpoints",
    "executor_waits",
    "reachable",
    "check_python",
    "is_connect",
    "master_of",
    "mismatch_message",
    "unrunnable_message",
    "watch",
]

#: The executor wait of each session made (by id): how long its watchdog waits for one.
executor_waits: dict[int, float] = {}


def is_connect(session: Any) -> bool:
    """True for a Spark Connect session."""
    return type(session).__module__.startswith("pyspark.sql.connect")


def master_of(session: Any) -> str | None:
    """A classic session's master URL (None for Spark Connect)."""
    try:
        return session.sparkContext.master
    except Exception:  # noqa: BLE001 - Spark Connect sessions have no SparkContext
        return None


def endpoints(master: str) -> list[tuple[str, int]]:
    """(host, port) pairs of a ``spark://h:p[,h:p]`` or ``sc://h:p/...`` URL."""
    scheme, _, rest = master.partition("://")
    rest = rest.split("/")[0].split(";")[0]
    default = 15002 if scheme == "sc" else 7077
    out = []
    for part in rest.split(","):
        host, _, port = part.rpartition(":") if ":" in part else (part, "", "")
        try:
            out.append((host.strip("[]") or "localhost", int(port) if port else default))
        except ValueError:
            raise RestreamError(f"master {config.redact(master)!r}: bad port {port!r}") from None
    return out


def reachable(master: str, what: str) -> None:
    """Fail at once, in one line, when no endpoint of ``master`` accepts a connection."""
    errors = []
    for host, port in endpoints(master):
        try:
            with socket.create_connection((host, port), timeout=5):
                return
        except OSError as exc:
            errors.append(f"{host}:{port}: {exc.strerror or exc}")
    raise RestreamError(
        f"cannot reach the {what} at {config.redact(master)} ({'; '.join(errors)}); "
        "is it running? (for a local one: make cluster)"
    )


def _executors(session: Any) -> int:
    """Executors registered with a classic session's driver (the driver itself not counted)."""
    sc = session.sparkContext
    return max(0, sc._jsc.sc().getExecutorMemoryStatus().size() - 1)


def await_executors(session: Any, master: str, wait: float) -> None:
    deadline = time.monotonic() + wait
    while _executors(session) == 0:
        if time.monotonic() > deadline:
            raise RestreamError(
                f"the cluster at {master} gave this application no executor within {wait:g} s: "
                "no worker with free cores and memory (are workers running? does another "
                "application hold their cores?)"
            )
        time.sleep(0.25)


_MISMATCH = re.compile(r"different version:?\s*\(?([\d., ]+)\)?\s*than that in driver:?\s*([\d.]+)")


def check_python(session: Any, driver: tuple[int, int] | None = None) -> str:
    """The workers' Python version (``"3.11"``); a RestreamError when its major.minor is not
    ``driver``'s (this interpreter's by default)."""
    want = "{}.{}".format(*(driver or sys.version_info[:2]))

    def probe(batches):  # runs on a worker; pickled by value, so it needs nothing shipped
        import sys as worker_sys

        import pyarrow as worker_pa

        for _ in batches:
            pass
        version = "{}.{}".format(*worker_sys.version_info[:2])
        yield worker_pa.RecordBatch.from_pydict({"v": [version]})

    try:
        rows = session.range(1, numPartitions=1).mapInArrow(probe, "v string").collect()
    except Exception as exc:  # noqa: BLE001 - PySpark's own check comes first
        message = mismatch_message(str(exc)) or unrunnable_message(str(exc))
        if message is None:
            raise
        raise RestreamError(message) from None
    got = rows[0]["v"]
    if got != want:
        raise RestreamError(_python_message(got, want))
    return got


def mismatch_message(text: str) -> str | None:
    """Our one line for PySpark's PYTHON_VERSION_MISMATCH error text (None for other text)."""
    found = _MISMATCH.search(text)
    if found is None:
        return None
    worker = ".".join(p.strip() for p in found.group(1).split(",")[:2] if p.strip())
    return _python_message(worker, found.group(2).rstrip("."))


_UNRUNNABLE = re.compile(r'Cannot run program "([^"]*)": error=\d+, ([^\n]+)')


def unrunnable_message(text: str) -> str | None:
    """Our one line for an executor that cannot start its Python (None for other text)."""
    found = _UNRUNNABLE.search(text)
    if found is None:
        return None
    return (
        f"the cluster's workers cannot run Python {found.group(1)!r} "
        f"({found.group(2).strip()}): set spark.pyspark.python (or PYSPARK_PYTHON) to an "
        "interpreter the workers can run, with this kernel's Python version and packages"
    )


def _python_message(worker: str, driver: str) -> str:
    return (
        f"the cluster's workers run Python {worker} but this kernel runs Python {driver}: "
        "use the same major.minor version on both (set spark.pyspark.python, or PYSPARK_PYTHON "
        "on the workers)"
    )


class Watchdog:
    """Cancels a replay's jobs on a standalone cluster once it has had no executor for
    ``wait`` seconds; ``reason`` then says why (None while all is well)."""

    def __init__(self, session: Any, group: str, wait: float, master: str):
        self.session = session
        self.group = group
        self.wait = wait
        self.master = master
        self.reason: str | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="restream-watchdog", daemon=True)

    def _run(self) -> None:
        last_seen = time.monotonic()
        while not self._done.wait(0.5):
            try:
                count = _executors(self.session)
            except Exception:  # noqa: BLE001 - the session is stopping
                return
            now = time.monotonic()
            if count:
                last_seen = now
                continue
            if now - last_seen >= self.wait and self.reason is None:
                self.reason = (
                    f"the cluster at {self.master} lost every executor of this replay and gave "
                    f"none back within {self.wait:g} s (did its workers die?)"
                )
            if self.reason is not None:
                try:  # again every half second, for jobs started after the first cancel
                    self.session.sparkContext.cancelJobGroup(self.group)
                except Exception:  # noqa: BLE001
                    return

    def __enter__(self) -> Watchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._done.set()
        self._thread.join(timeout=5)


class _Idle:
    reason = None


@contextmanager
def watch(session: Any, group: str) -> Iterator[Watchdog | _Idle]:
    """A :class:`Watchdog` over ``session``'s executors while the block runs, for jobs in
    ``group`` on a standalone cluster (other sessions need none: nothing to watch)."""
    master = None if is_connect(session) else master_of(session)
    if not master or not master.startswith("spark://"):
        yield _Idle()
        return
    wait = executor_waits.get(id(session), config.DEFAULT_EXECUTOR_WAIT)
    try:
        session.sparkContext.setJobGroup(group, "restream replay", True)
    except Exception:  # noqa: BLE001
        pass
    with Watchdog(session, group, wait, master) as dog:
        yield dog
